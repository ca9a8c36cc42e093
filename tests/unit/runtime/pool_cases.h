// The max-pool geometries both max-pool tests run (maxpool_test.cpp, maxpool_indices_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "tpuw/nn/qconv.h"

namespace tpuw::runtime::pool_cases {

struct PoolCase {
  uint32_t c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  uint64_t batch;
  unsigned array_n;
  bool relu;
};

inline ConvGeometry geometry(const PoolCase& c) {
  ConvGeometry g;
  g.in_c = g.out_c = c.c;
  g.in_h = c.h, g.in_w = c.w;
  g.kernel_h = c.kh, g.kernel_w = c.kw;
  g.stride_h = c.sh, g.stride_w = c.sw;
  g.dilation_h = c.dh, g.dilation_w = c.dw;
  g.pad_top = c.pt, g.pad_left = c.pl, g.pad_bottom = c.pb, g.pad_right = c.pr;
  return g;
}

/// Kernels, strides, pads (ceil_mode's extra end pads, asymmetric), dilations, several channel
/// blocks, N = 4, many images in several tiles; pads of at most kernel - 1 (every window holds an
/// input pixel, as ONNX's).
inline std::vector<PoolCase> attribute_cases() {
  return {
      {2, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 3, 16, false},     // 2x2/2
      {2, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, 3, 16, false},     // ceil_mode: one extra end pad
      {2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2, 3, 16, true},      // pads 1 + ceil_mode, ReLU
      {3, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 16, false},     // 3x3/1 pad 1
      {20, 9, 8, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 3, 16, true},     // two channel blocks, asymmetric
      {5, 9, 9, 2, 2, 1, 1, 2, 2, 0, 0, 0, 0, 2, 16, false},     // dilation 2
      {6, 11, 10, 3, 3, 3, 2, 2, 1, 2, 1, 1, 2, 2, 4, false},    // N=4, stride 3x2, dilation 2x1
      {16, 11, 11, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, 40, 16, true},  // the Fashion CNN's pool2, many images
  };
}

}  // namespace tpuw::runtime::pool_cases
