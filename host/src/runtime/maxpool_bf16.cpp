// 2-D max pooling in bf16 on the device (see tpuw/runtime/maxpool.h and docs/network_compiler.md,
// "MaxPool on the device"): compile_max_pool's program (detail::emit_max_pool, maxpool.cpp) with
// bf16 MATMULs (UB row pairs, the identity tile of 1.0), VECTOR MAX on the fp32 ACC copies and
// ACTIVATE bf16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "maxpool_emit.h"
#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {
namespace {

constexpr uint16_t kLowestBf16 = 0xFF7F;  // -3.3895e38: the pads (never win a max)
constexpr uint16_t kOneBf16 = 0x3F80;     // 1.0

}  // namespace

ConvPlan plan_max_pool_bf16(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch) {
  if (geom.in_c != geom.out_c) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 max pool: in_c {} != out_c {}", geom.in_c, geom.out_c));
  }
  // plan_conv reserves 3 * o_blocks ACC rows for params and sizes the R strips from the rest: give
  // it half the ACC (plus those rows) so that the S strips fit in the other half.
  DeviceParams q = params;
  const uint64_t o_blocks = (uint64_t{geom.out_c} + params.array_n - 1) / std::max<uint32_t>(params.array_n, 1);
  const uint64_t half = params.acc_depth / 2;
  q.acc_depth = half == 0 ? 0 : static_cast<uint32_t>(std::min<uint64_t>(half + 3 * o_blocks, params.acc_depth));
  ConvPlan p = plan_conv_bf16(q, geom, batch);
  p.weight_tiles = 1;  // the identity tile
  p.pinned_tiles = 1;
  p.weights_resident = true;
  return p;
}

uint64_t max_pool_bf16_min_bytes(const ConvPlan& p) { return 2 * max_pool_min_bytes(p); }

ConvProgram compile_max_pool_bf16(const ConvPlan& p, bool relu, uint64_t in_addr, uint64_t w_addr,
                                  uint64_t out_addr) {
  return detail::emit_max_pool(p, true, relu, in_addr, w_addr, 0, out_addr);
}

ConvBf16RunResult run_max_pool_bf16(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                    uint64_t batch) {
  layer.check();
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("run_max_pool_bf16: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("bf16 max pool '{}': the device has no bf16 mode / VECTOR unit (FEATURES.BF16)", layer.name));
  }
  ConvBf16RunResult r;
  r.plan = plan_max_pool_bf16(device.info().params, layer.geom, batch);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<uint16_t> xin = pack_conv_bf16_input(p, x, kLowestBf16);
  std::vector<uint16_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = kOneBf16;
  HostBuffer ibuf = device.alloc(conv_bf16_in_bytes(p), 4096);
  HostBuffer wbuf = device.alloc(w.size() * 2, 4096);
  HostBuffer obuf = device.alloc(conv_bf16_out_bytes(p), 4096);
  device.write(ibuf, 0, xin.data(), xin.size() * 2);
  device.write(wbuf, 0, w.data(), w.size() * 2);
  const ConvProgram prog = compile_max_pool_bf16(p, layer.relu, ibuf.addr(), wbuf.addr(), obuf.addr());
  r.instructions = prog.code.size() + 1;

  r.wall_s = detail::submit_and_wait(device, prog.code);
  std::vector<uint16_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size() * 2);
  r.y = unpack_conv_bf16_output(p, packed);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.min_bytes = max_pool_bf16_min_bytes(p);
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.utilization = 0;  // no multiply-accumulates of its own
  r.row_efficiency = static_cast<double>(p.ho * p.wo) / static_cast<double>(p.acc_rows);
  return r;
}

std::vector<float> max_pool_bf16_host(const Bf16ConvLayer& layer, std::span<const float> x, uint64_t batch,
                                      uint32_t array_n) {
  layer.check();
  const ConvGeometry& g = layer.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, Ho = g.out_h(), Wo = g.out_w(), an = array_n;
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool || an == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max_pool_bf16_host: layer '{}' is not a max pool (or array_n is 0)", layer.name));
  }
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 max pool '{}': input has {} values, expected {}",
                                                         layer.name, x.size(), batch * C * H * W));
  }
  const uint64_t cp = (C + an - 1) / an * an;
  std::vector<float> y(batch * C * Ho * Wo);
  std::vector<uint16_t> col(cp);
  std::vector<uint32_t> acc(C);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t oy = 0; oy < Ho; ++oy) {
      for (uint64_t ox = 0; ox < Wo; ++ox) {
        for (uint64_t t = 0; t < uint64_t{g.kernel_h} * g.kernel_w; ++t) {
          const uint64_t dy = t / g.kernel_w, dx = t % g.kernel_w;
          const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
          const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
          const bool inside = iy >= 0 && iy < static_cast<int64_t>(H) && ix >= 0 && ix < static_cast<int64_t>(W);
          // The UB pixel: the channels (bf16), the lanes past C and every pad the lowest bf16.
          std::fill(col.begin(), col.end(), kLowestBf16);
          if (inside) {
            for (uint64_t c = 0; c < C; ++c) {
              col[c] = num::bf16_from_float(x[((b * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix)]);
            }
          }
          for (uint64_t o = 0; o < C; ++o) {
            const uint64_t cb = o / an;
            uint32_t s = 0;  // +0; the identity's column o: 1.0 on row o, +0 elsewhere
            for (uint64_t k = cb * an; k < (cb + 1) * an; ++k) s = num::mac_bf16(s, col[k], k == o ? kOneBf16 : 0);
            acc[o] = t == 0 ? s : num::vmax(acc[o], s);
          }
        }
        for (uint64_t o = 0; o < C; ++o) {
          y[((b * C + o) * Ho + oy) * Wo + ox] = num::bf16_to_float(num::activate_bf16(acc[o], 0, false, layer.relu));
        }
      }
    }
  }
  return y;
}

}  // namespace tpuw::runtime
