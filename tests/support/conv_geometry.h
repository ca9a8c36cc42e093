// The square convolution geometry the convolution tests build their cases from (unit and rtl).
#pragma once

#include <cstdint>

#include "tpuw/nn/qconv.h"

namespace tpuw::test {

/// c x h x w in, o out channels, a k x k kernel with the same stride, dilation and pad on every side.
inline nn::ConvGeometry geom(uint32_t c, uint32_t h, uint32_t w, uint32_t o, uint32_t k, uint32_t stride, uint32_t dil,
                             uint32_t pad) {
  nn::ConvGeometry g;
  g.in_c = c, g.in_h = h, g.in_w = w, g.out_c = o, g.kernel_h = k, g.kernel_w = k;
  g.stride_h = g.stride_w = stride;
  g.dilation_h = g.dilation_w = dil;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = pad;
  return g;
}

}  // namespace tpuw::test
