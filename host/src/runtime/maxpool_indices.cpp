// MaxPool with Indices on the device, int8 and bf16 (see tpuw/runtime/maxpool_indices.h and
// docs/network_compiler.md, "MaxPool's Indices on the device").
//
// The max-pool program (detail::emit_max_pool, maxpool.cpp) with IndicesHooks: strips run
// channel-block-major, and per strip (ACC R, S, D, I and UB staging s%2) the hooks add
//   [first strip of block ob: LOAD ACC constants <- block ob's KP_t and IDX_t, once]
//   tap 0: per image: SCALE R = KP_0; MATMUL acc -> R; SCALE I = IDX_0
//   tap t: per image: SCALE S = KP_t; MATMUL acc -> S; SUB D = S - R; MAX R = R, S;
//          per image: SUB S = IDX_t - I; SELECT S = (D, S); ADD I = I + S
//   after each values STORE row: STORE ACC I row -> indices
// and the int8 ACTIVATE's bias (-0x4B000100) from the param rows.
#include "tpuw/runtime/maxpool_indices.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "conv_emit.h"
#include "maxpool_emit.h"
#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::dma_instr;
using detail::kC;
using detail::kL;
using detail::kS;
using detail::split_transfer;
using detail::Transfer;

constexpr uint32_t kIndexBase = 0x4B000000;    // fp32 2^23: 2^23 + i has the bits kIndexBase + i
constexpr uint32_t kInt8Base = 0x4B000100;     // int8 S = 2^23 + 256 + v
constexpr uint32_t kInt8PadBase = 0x4B0000FF;  // a pad tap: one below, so -128 from a pad loses
constexpr uint32_t kNegInf = 0xFF800000;       // bf16 pad taps start from -inf
constexpr uint32_t kOne = 0x3F800000;          // fp32 1.0 (SCALE: an exact copy)
constexpr uint16_t kLowestBf16 = 0xFF7F;
constexpr uint16_t kOneBf16 = 0x3F80;

// ACC rows of the constant block of one channel block.
uint64_t const_rows(const ConvPlan& p) { return 2 * p.taps * p.acc_rows; }

isa::Instr vec(spec::VecOp op, uint64_t dst, uint64_t a, uint64_t b, uint64_t rows, uint32_t scalar = 0) {
  isa::Instr v = isa::make_instr(spec::Opcode::kVector);
  v.set("op", static_cast<uint64_t>(op));
  v.set("dst_addr", dst);
  v.set("a_addr", a);
  v.set("b_addr", b);
  v.set("rows", rows);
  if (scalar != 0) v.set("scalar", scalar);
  return v;
}

}  // namespace

ConvPlan plan_max_pool_indices(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, bool bf16) {
  const char* what = bf16 ? "bf16 max pool with Indices" : "max pool with Indices";
  if (uint64_t{geom.in_c} * geom.in_h * geom.in_w >= (uint64_t{1} << 23)) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: C*H*W = {} must be below 2^23 (the fp32 index words)", what,
                                                     uint64_t{geom.in_c} * geom.in_h * geom.in_w));
  }
  const ConvPlan full = bf16 ? plan_max_pool_bf16(params, geom, batch) : plan_max_pool(params, geom, batch);
  // R, S, D and I strips (as many, as large) share what the constants and the 3 param rows leave;
  // plan_conv sizes its strips from acc_depth - 3 * o_blocks.
  const uint64_t fixed = const_rows(full) + 3;
  if (fixed + 4 * full.acc_rows > params.acc_depth) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} taps x {} rows of index constants and 4 x {} strip rows need more than the {} "
                            "ACC rows",
                            what, full.taps, full.acc_rows, full.acc_rows, params.acc_depth));
  }
  DeviceParams q = params;
  q.acc_depth = static_cast<uint32_t>((params.acc_depth - fixed) / 4 + 3 * full.o_blocks);
  ConvPlan p = bf16 ? plan_conv_bf16(q, geom, batch) : plan_conv(q, geom, batch);
  p.weight_tiles = 1;  // the identity tile
  p.pinned_tiles = 1;
  p.weights_resident = true;
  return p;
}

std::vector<uint32_t> max_pool_index_constants(const ConvPlan& p, bool bf16, bool column_major) {
  const ConvGeometry& g = p.geom;
  const uint64_t an = p.array_n, H = g.in_h, W = g.in_w, C = g.in_c;
  std::vector<uint32_t> out(p.o_blocks * const_rows(p) * an);
  for (uint64_t ob = 0; ob < p.o_blocks; ++ob) {
    for (uint64_t t = 0; t < p.taps; ++t) {
      const uint64_t dy = t / g.kernel_w, dx = t % g.kernel_w;
      uint32_t* kp = &out[((ob * p.taps + t) * 2) * p.acc_rows * an];
      uint32_t* idx = kp + p.acc_rows * an;
      for (uint64_t r = 0; r < p.acc_rows; ++r) {
        const uint64_t oy = r / p.wq, ox = r % p.wq;
        const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
        const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
        const bool inside = ox < p.wo && oy < p.ho && iy >= 0 && iy < static_cast<int64_t>(H) && ix >= 0 &&
                            ix < static_cast<int64_t>(W);
        for (uint64_t l = 0; l < an; ++l) {
          const uint64_t c = ob * an + l;
          const bool real = inside && c < C;
          kp[r * an + l] = bf16 ? (real ? 0u : kNegInf) : (real ? kInt8Base : kInt8PadBase);
          uint64_t i = 0;
          if (real) {
            const auto h = static_cast<uint64_t>(iy), w = static_cast<uint64_t>(ix);
            i = c * H * W + (column_major ? w * H + h : h * W + w);
          }
          idx[r * an + l] = kIndexBase + static_cast<uint32_t>(i);
        }
      }
    }
  }
  return out;
}

namespace {

// The argmax beside the max (detail::emit_max_pool's hooks). ACC rows after R and S:
// [D 0 | D 1 | I 0 | I 1 | the constants of one channel block]. The strips run block-major, so a
// block's constants (2 * taps * acc_rows rows) are loaded once, when its first strip starts.
class IndicesHooks final : public detail::MaxPoolHooks {
 public:
  IndicesHooks(const ConvPlan& p, bool bf16, uint64_t const_addr, uint64_t idx_addr)
      : p_(p), const_addr_(const_addr), idx_addr_(idx_addr), beat_((bf16 ? 2 : 1) * uint64_t{p.beat}),
        stage_(p.images_per_tile * p.acc_rows), region_(p.buffers * stage_) {}

  uint64_t acc_rows() const override { return 2 * region_ + const_rows(p_); }
  size_t resources() const override { return 5; }  // D (2), I (2), constants
  void place(uint64_t acc_row, size_t first) override {
    d_row_ = acc_row;
    i_row_ = acc_row + region_;
    c_row_ = acc_row + 2 * region_;
    r_d_ = first;
    r_i_ = first + 2;
    r_c_ = first + 4;
  }
  bool blocks_outer() const override { return true; }
  bool int8_bias() const override { return true; }  // -kInt8Base: S's base back off the values

  void begin_strip(const detail::MaxPoolStrip& st) override {
    if (loaded_ob_ == st.ob) return;
    loaded_ob_ = st.ob;
    const uint64_t acc_px = 4 * uint64_t{p_.array_n};
    for (const Transfer& t : split_transfer(c_row_, const_addr_ + st.ob * const_rows(p_) * acc_px,
                                            const_rows(p_) * acc_px, acc_px, beat_)) {
      st.b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {r_c_});
    }
  }
  // Tap t starts from its KP_t (a pad's base below every value), the MATMUL adds the value.
  bool before_matmul(const detail::MaxPoolStrip& st, uint64_t tap, uint64_t, uint64_t dst) override {
    st.b.emit(kC, vec(spec::VecOp::kScale, dst, kp(tap), 0, p_.acc_rows, kOne), {r_c_},
              {tap == 0 ? st.r_res : st.s_res});
    return true;
  }
  void after_matmul(const detail::MaxPoolStrip& st, uint64_t tap, uint64_t i) override {
    if (tap > 0) return;
    st.b.emit(kC, vec(spec::VecOp::kScale, I(st) + i * p_.acc_rows, idx(0), 0, p_.acc_rows, kOne), {r_c_},
              {r_i_ + st.sb});
  }
  // D = S - R; R = max(R, S); I += (D > 0 ? IDX_t - I : 0), per image for IDX_t - I (one image's constants).
  bool combine(const detail::MaxPoolStrip& st, uint64_t tap) override {
    const uint64_t D = d_row_ + st.sb * stage_, ar = p_.acc_rows;
    const size_t rd = r_d_ + st.sb, ri = r_i_ + st.sb;
    st.b.emit(kC, vec(spec::VecOp::kSub, D, st.s, st.r, st.rows), {st.s_res, st.r_res}, {rd});
    st.b.emit(kC, vec(spec::VecOp::kMax, st.r, st.r, st.s, st.rows), {st.r_res, st.s_res}, {st.r_res});
    for (uint64_t i = 0; i < st.nimg; ++i) {
      st.b.emit(kC, vec(spec::VecOp::kSub, st.s + i * ar, idx(tap), I(st) + i * ar, ar), {r_c_, ri}, {st.s_res});
    }
    st.b.emit(kC, vec(spec::VecOp::kSelect, st.s, D, st.s, st.rows), {rd, st.s_res}, {st.s_res});
    st.b.emit(kC, vec(spec::VecOp::kAdd, I(st), I(st), st.s, st.rows), {ri, st.s_res}, {ri});
    return true;
  }
  void store_row(const detail::MaxPoolStrip& st, uint64_t i, uint64_t oy, uint64_t out_row) override {
    const uint64_t acc_px = 4 * uint64_t{p_.array_n};
    for (const Transfer& t : split_transfer(I(st) + i * p_.acc_rows + oy * p_.wq, idx_addr_ + out_row * acc_px,
                                            p_.wo_stored * acc_px, acc_px, beat_)) {
      st.b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {r_i_ + st.sb}, {});
    }
  }

 private:
  uint64_t kp(uint64_t tap) const { return c_row_ + 2 * tap * p_.acc_rows; }
  uint64_t idx(uint64_t tap) const { return kp(tap) + p_.acc_rows; }
  uint64_t I(const detail::MaxPoolStrip& st) const { return i_row_ + st.sb * stage_; }

  const ConvPlan& p_;
  uint64_t const_addr_, idx_addr_, beat_;
  uint64_t stage_, region_;  // ACC rows of one strip buffer, of the two
  uint64_t d_row_ = 0, i_row_ = 0, c_row_ = 0;
  size_t r_d_ = 0, r_i_ = 0, r_c_ = 0;
  uint64_t loaded_ob_ = ~uint64_t{0};
};

}  // namespace

ConvProgram compile_max_pool_indices(const ConvPlan& p, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                                     uint64_t param_addr, uint64_t const_addr, uint64_t out_addr, uint64_t idx_addr) {
  const uint64_t beat = (bf16 ? 2 : 1) * uint64_t{p.beat};
  detail::check_host_addrs("compile_max_pool_indices",
                           std::array{in_addr, w_addr, param_addr, const_addr, out_addr, idx_addr}, beat);
  IndicesHooks hooks(p, bf16, const_addr, idx_addr);
  return detail::emit_max_pool(p, bf16, relu, in_addr, w_addr, param_addr, out_addr, &hooks);
}

template <class T>
std::vector<int64_t> max_pool_indices_host(const ConvGeometry& g, std::span<const T> x, uint64_t batch,
                                           bool column_major) {
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, Ho = g.out_h(), Wo = g.out_w();
  if (x.size() != batch * C * H * W) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("max_pool_indices_host: input has {} values, expected {}", x.size(), batch * C * H * W));
  }
  std::vector<int64_t> out(batch * C * Ho * Wo, -1);
  for (uint64_t n = 0; n < batch; ++n) {
    for (uint64_t c = 0; c < C; ++c) {
      const T* plane = &x[(n * C + c) * H * W];
      for (uint64_t oy = 0; oy < Ho; ++oy) {
        for (uint64_t ox = 0; ox < Wo; ++ox) {
          bool any = false;
          T best{};
          int64_t arg = -1;
          for (uint64_t dy = 0; dy < g.kernel_h; ++dy) {
            for (uint64_t dx = 0; dx < g.kernel_w; ++dx) {
              const int64_t iy = static_cast<int64_t>(oy * g.stride_h + dy * g.dilation_h) - g.pad_top;
              const int64_t ix = static_cast<int64_t>(ox * g.stride_w + dx * g.dilation_w) - g.pad_left;
              if (iy < 0 || iy >= static_cast<int64_t>(H) || ix < 0 || ix >= static_cast<int64_t>(W)) continue;
              const auto h = static_cast<uint64_t>(iy), w = static_cast<uint64_t>(ix);
              const T v = plane[h * W + w];
              if (!any || v > best) {
                any = true;
                best = v;
                arg = static_cast<int64_t>((n * C + c) * H * W + (column_major ? w * H + h : h * W + w));
              }
            }
          }
          out[((n * C + c) * Ho + oy) * Wo + ox] = arg;
        }
      }
    }
  }
  return out;
}
template std::vector<int64_t> max_pool_indices_host<int8_t>(const ConvGeometry&, std::span<const int8_t>, uint64_t,
                                                            bool);
template std::vector<int64_t> max_pool_indices_host<float>(const ConvGeometry&, std::span<const float>, uint64_t, bool);

namespace {

// The index words [batch][o_blocks][ho][wo_stored][an] -> NCHW int64: subtract 2^23, add n*C*H*W.
std::vector<int64_t> unpack_indices(const ConvPlan& p, std::span<const uint32_t> words) {
  const ConvGeometry& g = p.geom;
  const uint64_t C = g.out_c, an = p.array_n, chw = uint64_t{g.in_c} * g.in_h * g.in_w;
  std::vector<int64_t> out(p.batch * C * p.ho * p.wo);
  for (uint64_t n = 0; n < p.batch; ++n) {
    for (uint64_t c = 0; c < C; ++c) {
      const uint64_t ob = c / an, l = c % an;
      for (uint64_t oy = 0; oy < p.ho; ++oy) {
        for (uint64_t ox = 0; ox < p.wo; ++ox) {
          const uint32_t w = words[(((n * p.o_blocks + ob) * p.ho + oy) * p.wo_stored + ox) * an + l];
          out[((n * C + c) * p.ho + oy) * p.wo + ox] =
              static_cast<int64_t>(w) - int64_t{kIndexBase} + static_cast<int64_t>(n * chw);
        }
      }
    }
  }
  return out;
}

template <class Result>
void finish(Device& device, const ConvPlan& p, const ConvProgram& prog, Result& r) {
  r.instructions = prog.code.size() + 1;
  r.wall_s = detail::submit_and_wait(device, prog.code);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.utilization = 0;
  r.row_efficiency = static_cast<double>(p.ho * p.wo) / static_cast<double>(p.acc_rows);
}

}  // namespace

MaxPoolIndicesRun run_max_pool_indices(Device& device, const QConv2d& layer, std::span<const int8_t> x,
                                       uint64_t batch, bool column_major) {
  layer.check();
  if (!layer.max_pool) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("run_max_pool_indices: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("max pool '{}' with Indices: the device has no VECTOR unit (FEATURES.BF16)", layer.name));
  }
  MaxPoolIndicesRun run;
  ConvRunResult& r = run.values;
  r.plan = plan_max_pool_indices(device.info().params, layer.geom, batch, false);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<int8_t> xin = pack_conv_input(p, x, -128);
  std::vector<int8_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = 1;
  std::vector<uint32_t> params(3 * an, 0);
  std::fill(params.begin(), params.begin() + static_cast<std::ptrdiff_t>(an), static_cast<uint32_t>(-kInt8Base));
  std::fill(params.begin() + static_cast<std::ptrdiff_t>(an), params.begin() + static_cast<std::ptrdiff_t>(2 * an), 1u);
  const std::vector<uint32_t> consts = max_pool_index_constants(p, false, column_major);
  const uint64_t idx_bytes = p.batch * p.o_blocks * p.ho * p.wo_stored * an * 4;
  HostBuffer ibuf = device.alloc(p.in_bytes(), 4096);
  HostBuffer wbuf = device.alloc(w.size(), 4096);
  HostBuffer pbuf = device.alloc(params.size() * 4, 4096);
  HostBuffer cbuf = device.alloc(consts.size() * 4, 4096);
  HostBuffer obuf = device.alloc(p.out_bytes(), 4096);
  HostBuffer xbuf = device.alloc(idx_bytes, 4096);
  device.write(ibuf, 0, xin.data(), xin.size());
  device.write(wbuf, 0, w.data(), w.size());
  device.write(pbuf, 0, params.data(), params.size() * 4);
  device.write(cbuf, 0, consts.data(), consts.size() * 4);
  const ConvProgram prog = compile_max_pool_indices(p, false, layer.relu, ibuf.addr(), wbuf.addr(), pbuf.addr(),
                                                    cbuf.addr(), obuf.addr(), xbuf.addr());
  finish(device, p, prog, r);
  std::vector<int8_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size());
  r.y = unpack_conv_output(p, packed);
  std::vector<uint32_t> words(idx_bytes / 4);
  device.read(xbuf, 0, words.data(), idx_bytes);
  run.indices = unpack_indices(p, words);
  // Input and both outputs once (the indices as the device's int32 words).
  r.min_bytes = max_pool_min_bytes(p) + p.batch * p.geom.out_c * p.ho * p.wo * 4;
  return run;
}

MaxPoolIndicesBf16Run run_max_pool_bf16_indices(Device& device, const Bf16ConvLayer& layer, std::span<const float> x,
                                                uint64_t batch, bool column_major) {
  layer.check();
  if (layer.kind != Bf16ConvLayer::Kind::kMaxPool) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("run_max_pool_bf16_indices: layer '{}' is not a max pool", layer.name));
  }
  if (!max_pool_on_device(device.info())) {
    throw Error(ErrorKind::kUnsupported, fmt::format("bf16 max pool '{}' with Indices: the device has no bf16 mode / "
                                                     "VECTOR unit (FEATURES.BF16)",
                                                     layer.name));
  }
  MaxPoolIndicesBf16Run run;
  ConvBf16RunResult& r = run.values;
  r.plan = plan_max_pool_indices(device.info().params, layer.geom, batch, true);
  const ConvPlan& p = r.plan;
  const uint64_t an = p.array_n;
  const std::vector<uint16_t> xin = pack_conv_bf16_input(p, x, kLowestBf16);
  std::vector<uint16_t> w(an * an, 0);
  for (uint64_t k = 0; k < an; ++k) w[k * an + k] = kOneBf16;
  const std::vector<uint32_t> consts = max_pool_index_constants(p, true, column_major);
  const uint64_t idx_bytes = p.batch * p.o_blocks * p.ho * p.wo_stored * an * 4;
  HostBuffer ibuf = device.alloc(conv_bf16_in_bytes(p), 4096);
  HostBuffer wbuf = device.alloc(w.size() * 2, 4096);
  HostBuffer cbuf = device.alloc(consts.size() * 4, 4096);
  HostBuffer obuf = device.alloc(conv_bf16_out_bytes(p), 4096);
  HostBuffer xbuf = device.alloc(idx_bytes, 4096);
  device.write(ibuf, 0, xin.data(), xin.size() * 2);
  device.write(wbuf, 0, w.data(), w.size() * 2);
  device.write(cbuf, 0, consts.data(), consts.size() * 4);
  const ConvProgram prog = compile_max_pool_indices(p, true, layer.relu, ibuf.addr(), wbuf.addr(), wbuf.addr(),
                                                    cbuf.addr(), obuf.addr(), xbuf.addr());
  finish(device, p, prog, r);
  std::vector<uint16_t> packed(p.out_bytes());
  device.read(obuf, 0, packed.data(), packed.size() * 2);
  r.y = unpack_conv_bf16_output(p, packed);
  std::vector<uint32_t> words(idx_bytes / 4);
  device.read(xbuf, 0, words.data(), idx_bytes);
  run.indices = unpack_indices(p, words);
  r.min_bytes = max_pool_bf16_min_bytes(p) + p.batch * p.geom.out_c * p.ho * p.wo * 4;
  return run;
}

}  // namespace tpuw::runtime
