// The attribute combinations both convolution tests run (conv_test.cpp in int8,
// conv_bf16_test.cpp in bf16, which adds groups and pools of its own).
#pragma once

#include <cstdint>
#include <vector>

#include "tpuw/runtime/conv.h"

namespace tpuw::runtime::conv_cases {

struct ConvCase {
  const char* what;
  ConvGeometry g;
  uint64_t batch;
  bool relu, bias;
};

inline ConvGeometry geom(uint32_t c, uint32_t h, uint32_t w, uint32_t o, uint32_t kh, uint32_t kw) {
  ConvGeometry g;
  g.in_c = c, g.in_h = h, g.in_w = w, g.out_c = o, g.kernel_h = kh, g.kernel_w = kw;
  return g;
}

/// Appends pads, strides, dilations, asymmetric pads, several channel blocks, LeNet's first layer
/// (batch `lenet_batch`) and a kernel covering the whole image, as cases of type C (ConvCase or
/// an aggregate deriving from it).
template <class C>
void add_attribute_cases(std::vector<C>& v, uint64_t lenet_batch) {
  auto add = [&](const ConvCase& c) { v.push_back(C{c}); };
  add({"1x1 no pad", geom(5, 6, 7, 9, 1, 1), 3, false, true});
  {
    ConvGeometry g = geom(3, 8, 8, 4, 3, 3);
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
    add({"3x3 pad 1 relu", g, 2, true, true});
  }
  {
    ConvGeometry g = geom(20, 9, 11, 18, 3, 3);  // channel blocks > 1 on both sides (N=16)
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
    add({"3x3 20->18 pad 1, no bias", g, 3, true, false});
  }
  {
    ConvGeometry g = geom(4, 10, 9, 6, 3, 3);
    g.stride_h = g.stride_w = 2;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1;
    add({"3x3 stride 2 pad 1", g, 2, true, true});
  }
  {
    ConvGeometry g = geom(2, 12, 13, 3, 3, 2);
    g.stride_h = 3, g.stride_w = 1;
    add({"3x2 stride (3,1)", g, 2, false, true});
  }
  {
    ConvGeometry g = geom(3, 11, 10, 5, 3, 3);
    g.dilation_h = 2, g.dilation_w = 3;
    g.pad_top = 2, g.pad_left = 3, g.pad_bottom = 2, g.pad_right = 3;
    add({"3x3 dilation (2,3)", g, 2, true, true});
  }
  {
    ConvGeometry g = geom(3, 7, 9, 4, 2, 4);
    g.pad_top = 0, g.pad_left = 2, g.pad_bottom = 1, g.pad_right = 1;  // asymmetric (SAME_UPPER-like)
    add({"2x4 asymmetric pads", g, 3, false, false});
  }
  {
    ConvGeometry g = geom(6, 14, 14, 8, 5, 5);
    g.stride_h = 2, g.stride_w = 2, g.dilation_h = 2, g.dilation_w = 1;
    g.pad_top = 1, g.pad_left = 2, g.pad_bottom = 3, g.pad_right = 0;
    add({"5x5 stride 2 dilation (2,1) asymmetric", g, 2, true, true});
  }
  add({"LeNet conv1 5x5", geom(1, 28, 28, 6, 5, 5), lenet_batch, true, true});
  add({"kernel covers the image", geom(2, 5, 5, 3, 5, 5), 4, false, true});  // one output pixel
}

}  // namespace tpuw::runtime::conv_cases
