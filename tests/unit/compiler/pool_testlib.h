// The AveragePool models and PyTorch-semantics reference shared by the int8 and bf16 pool-group
// tests (pool_groups_test.cpp, pool_groups_bf16_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler_testlib.h"

namespace tpuw::compiler::testing {

struct PoolSpec {
  int64_t c = 3, h = 7, w = 6, k = 3, s = 1;
  std::vector<int64_t> pads;  // top, left, bottom, right; empty: absent
  int64_t cip = 0, ceil = 0;
  std::string auto_pad;
};

/// x [-1, c, h, w] -> AveragePool "pool" (square kernel and stride) -> y.
inline ModelBuilder pool_model(const PoolSpec& p) {
  ModelBuilder mb;
  mb.input("x", {-1, p.c, p.h, p.w});
  auto& n = mb.node("AveragePool", {"x"}, {"y"}, "pool");
  ModelBuilder::attr_ints(n, "kernel_shape", {p.k, p.k});
  ModelBuilder::attr_ints(n, "strides", {p.s, p.s});
  if (!p.pads.empty()) ModelBuilder::attr_ints(n, "pads", p.pads);
  if (!p.auto_pad.empty()) ModelBuilder::attr_s(n, "auto_pad", p.auto_pad);
  ModelBuilder::attr_i(n, "count_include_pad", p.cip);
  ModelBuilder::attr_i(n, "ceil_mode", p.ceil);
  mb.output("y");
  return mb;
}

/// PyTorch's avg_pool2d in double over `bc` planes of h x w: the window clipped to the padded input
/// (count_include_pad) or to the image; pads top/left/bottom/right (empty: none), `ho` x `wo`
/// outputs. `value` maps each input first (the bf16 tests round it to bf16).
inline std::vector<double> torch_avg(const std::vector<float>& x, uint64_t bc, int64_t h, int64_t w, int64_t k,
                                     int64_t s, std::vector<int64_t> pads, int64_t ho, int64_t wo, bool cip,
                                     const std::function<double(float)>& value = [](float v) { return double{v}; }) {
  if (pads.empty()) pads.assign(4, 0);
  std::vector<double> y;
  for (uint64_t i = 0; i < bc; ++i) {
    for (int64_t oy = 0; oy < ho; ++oy) {
      for (int64_t ox = 0; ox < wo; ++ox) {
        const int64_t y0 = oy * s - pads[0], x0 = ox * s - pads[1];
        const int64_t y1 = std::min(y0 + k, h + pads[2]), x1 = std::min(x0 + k, w + pads[3]);
        double sum = 0;
        int64_t inside = 0;
        for (int64_t yy = std::max<int64_t>(y0, 0); yy < std::min(y1, h); ++yy) {
          for (int64_t xx = std::max<int64_t>(x0, 0); xx < std::min(x1, w); ++xx) {
            sum += value(x[i * static_cast<uint64_t>(h * w) + static_cast<uint64_t>(yy * w + xx)]);
            ++inside;
          }
        }
        y.push_back(sum / static_cast<double>(cip ? (y1 - y0) * (x1 - x0) : inside));
      }
    }
  }
  return y;
}

}  // namespace tpuw::compiler::testing
