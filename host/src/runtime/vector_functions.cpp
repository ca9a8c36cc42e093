// Activation functions as VECTOR op sequences (tpuw/runtime/vector_functions.h). The smooth
// functions' coefficients come from scripts/vector_function_coeffs.py (re-run it to change them;
// it prints these tables and the errors vec_function_error_bound states).
#include "tpuw/runtime/vector_functions.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <numbers>
#include <span>

#include "step_builder.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "vector_functions_emit.h"

namespace tpuw::runtime {
namespace {

// scripts/vector_function_coeffs.py
// tanh: L = 5.5, degree 18 in w
constexpr float kTanhL = 5.5f;
constexpr std::array<float, 19> kTanhCoef = {
    0x1.7c697ep-2f, -0x1.256174p-2f, 0x1.335e82p-3f, -0x1.54dd4cp-4f, 0x1.80775ap-5f, -0x1.b421cep-6f,
    0x1.efb8c2p-7f, -0x1.19e65cp-7f, 0x1.40a00ep-8f, -0x1.6c8db6p-9f, 0x1.9e352cp-10f, -0x1.d60390p-11f,
    0x1.0a0d50p-11f, -0x1.2bf518p-12f, 0x1.4fb010p-13f, -0x1.72a266p-14f, 0x1.8ef7acp-15f, -0x1.985432p-16f,
    0x1.752b6ep-17f};
// erf: L = 3.625, degree 12 in w
constexpr float kErfL = 3.625f;
constexpr std::array<float, 13> kErfCoef = {
    0x1.098168p-1f, -0x1.64cea2p-2f, 0x1.380f8cp-3f, -0x1.0f0024p-4f, 0x1.bcab4ep-6f, -0x1.533314p-7f,
    0x1.deb730p-9f, -0x1.385238p-10f, 0x1.794d50p-12f, -0x1.a6b108p-14f, 0x1.b6a870p-16f, -0x1.9f2c9ep-18f,
    0x1.45b34cp-20f};
// max |device - exact| on [-16, 16] (gelu, gelu_tanh: / max(1, |x|)), with a margin for the grid:
constexpr double kTanhErr = 2e-5, kSigmoidErr = 1e-5, kErfErr = 1e-6, kGeluErr = 1e-6, kGeluTanhErr = 1e-5;

using spec::VecOp;

class Seq {
 public:
  explicit Seq(std::string name) { f_.name = std::move(name); }
  uint8_t reg() {
    if (f_.regs == 255) throw Error(ErrorKind::kInternal, "vector function: too many registers");
    return f_.regs++;
  }
  void op(VecOp o, uint8_t dst, uint8_t a, uint8_t b, float s) { f_.steps.push_back({o, dst, a, b, s}); }
  void op(VecOp o, uint8_t dst, uint8_t a, float s) { op(o, dst, a, a, s); }
  // dst = max(src, c) / min(src, c) = -max(-src, -c) (exact).
  void maxs(uint8_t dst, uint8_t src, float c) { op(VecOp::kMaxs, dst, src, c); }
  void mins(uint8_t dst, uint8_t src, float c) {
    op(VecOp::kScale, dst, src, -1.0f);
    op(VecOp::kMaxs, dst, dst, -c);
    op(VecOp::kScale, dst, dst, -1.0f);
  }
  void clamp(uint8_t dst, uint8_t src, float lo, float hi) {
    maxs(dst, src, lo);
    mins(dst, dst, hi);
  }
  // A row of +1 from a finite row (NaN stays NaN): max(src * 0, 1).
  void one(uint8_t dst, uint8_t finite_src) {
    op(VecOp::kScale, dst, finite_src, 0.0f);
    op(VecOp::kMaxs, dst, dst, 1.0f);
  }
  // dst = t * g(2 t^2 / L^2 - 1), t = clamp(src, -L, L), g by Clenshaw (see the script's odd_fn).
  // Returns the register of the +1 row.
  uint8_t odd_poly(uint8_t dst, uint8_t src, float L, std::span<const float> c) {
    const uint8_t t = reg(), one_r = reg(), w2 = reg();
    uint8_t b1 = reg(), b2 = reg(), m = reg();
    clamp(t, src, -L, L);
    one(one_r, t);
    op(VecOp::kMul, w2, t, t, 0.0f);
    op(VecOp::kScale, w2, w2, static_cast<float>(4.0 / (static_cast<double>(L) * L)));
    op(VecOp::kAxpy, w2, one_r, w2, -2.0f);  // 1 * -2 + w2
    const size_t n = c.size() - 1;
    op(VecOp::kScale, b1, one_r, c[n]);  // b_n
    for (size_t k = n - 1; k >= 1; --k) {
      op(VecOp::kMul, m, w2, b1, 0.0f);
      if (k < n - 1) op(VecOp::kSub, m, m, b2, 0.0f);
      op(VecOp::kAxpy, m, one_r, m, c[k]);  // c_k * 1 + m
      const uint8_t old_b2 = b2;
      b2 = b1;
      b1 = m;
      m = old_b2;
    }
    op(VecOp::kMul, m, w2, b1, 0.0f);
    op(VecOp::kScale, m, m, 0.5f);
    if (n >= 2) op(VecOp::kSub, m, m, b2, 0.0f);
    op(VecOp::kAxpy, m, one_r, m, c[0]);
    op(VecOp::kMul, dst, t, m, 0.0f);
    return one_r;
  }
  // dst = clip(alpha * x + beta, 0, 1) (x clamped first to a range that does not change it, so
  // that the +1 row is finite for x = +-inf).
  void hard_sigmoid(uint8_t dst, uint8_t x, float alpha, float beta) {
    const uint8_t xc = reg(), one_r = reg();
    const float bound = alpha != 0.0f ? static_cast<float>((std::fabs(double{beta}) + 2.0) / std::fabs(double{alpha})) : 1.0f;
    clamp(xc, x, -bound, bound);
    one(one_r, xc);
    op(VecOp::kScale, dst, xc, alpha);
    op(VecOp::kAxpy, dst, one_r, dst, beta);  // beta * 1 + alpha * x
    clamp(dst, dst, 0.0f, 1.0f);
  }
  VecFunction done(uint8_t out) {
    f_.out = out;
    return std::move(f_);
  }

 private:
  VecFunction f_;
};

}  // namespace

VecFunction vec_function(const nn::Activation& act, bool relu) {
  std::string name = relu ? (act.none() ? "Relu" : "Relu + " + nn::act_name(act)) : nn::act_name(act);
  Seq q(act.none() && !relu ? "" : name);
  if (relu) q.maxs(0, 0, 0.0f);  // +0 unless x > 0; NaN stays NaN (ACTIVATE's ReLU)
  const float alpha = static_cast<float>(act.alpha), beta = static_cast<float>(act.beta);
  switch (act.fn) {
    case nn::ActFn::kNone: return q.done(0);
    case nn::ActFn::kClip:
      if (!std::isnan(act.alpha) && act.alpha > -HUGE_VAL) q.maxs(0, 0, alpha);
      if (!std::isnan(act.beta) && act.beta < HUGE_VAL) q.mins(0, 0, beta);
      return q.done(0);
    case nn::ActFn::kLeakyRelu: {
      const uint8_t n = q.reg();
      q.op(VecOp::kScale, n, 0, alpha);
      if (alpha >= 0.0f && alpha <= 1.0f) {
        q.op(VecOp::kMax, n, 0, n, 0.0f);  // max(x, alpha * x)
        return q.done(n);
      }
      const uint8_t p = q.reg(), m = q.reg();
      q.op(VecOp::kSelect, p, 0, 0, 0.0f);   // x where x > 0 (or NaN), else +0
      q.op(VecOp::kScale, m, 0, -1.0f);
      q.op(VecOp::kSelect, n, m, n, 0.0f);   // alpha * x where x < 0, else +0
      q.op(VecOp::kAdd, p, p, n, 0.0f);
      return q.done(p);
    }
    case nn::ActFn::kHardSigmoid: {
      const uint8_t h = q.reg();
      q.hard_sigmoid(h, 0, alpha, beta);
      return q.done(h);
    }
    case nn::ActFn::kHardSwish: {
      const uint8_t h = q.reg();
      q.hard_sigmoid(h, 0, 1.0f / 6.0f, 0.5f);
      q.op(VecOp::kMul, h, 0, h, 0.0f);
      return q.done(h);
    }
    case nn::ActFn::kTanh: {
      const uint8_t y = q.reg();
      q.odd_poly(y, 0, kTanhL, kTanhCoef);
      return q.done(y);
    }
    case nn::ActFn::kErf: {
      const uint8_t y = q.reg();
      q.odd_poly(y, 0, kErfL, kErfCoef);
      return q.done(y);
    }
    case nn::ActFn::kSigmoid: {  // 0.5 + 0.5 * tanh(x / 2)
      const uint8_t h = q.reg(), y = q.reg();
      q.op(VecOp::kScale, h, 0, 0.5f);
      const uint8_t one_r = q.odd_poly(y, h, kTanhL, kTanhCoef);
      q.op(VecOp::kScale, y, y, 0.5f);
      q.op(VecOp::kAxpy, y, one_r, y, 0.5f);
      return q.done(y);
    }
    case nn::ActFn::kGelu: {  // x/2 * erf(x / sqrt 2) + x/2
      const uint8_t u = q.reg(), e = q.reg();
      q.op(VecOp::kScale, u, 0, static_cast<float>(1.0 / std::numbers::sqrt2));
      q.odd_poly(e, u, kErfL, kErfCoef);
      q.op(VecOp::kScale, u, 0, 0.5f);
      q.op(VecOp::kMul, e, u, e, 0.0f);
      q.op(VecOp::kAdd, e, e, u, 0.0f);
      return q.done(e);
    }
    case nn::ActFn::kGeluTanh: {  // x/2 * tanh(sqrt(2/pi) (x + 0.044715 x^3)) + x/2
      const uint8_t u = q.reg(), e = q.reg();
      q.op(VecOp::kMul, u, 0, 0, 0.0f);
      q.op(VecOp::kMul, u, u, 0, 0.0f);
      q.op(VecOp::kAxpy, u, u, 0, 0.044715f);
      q.op(VecOp::kScale, u, u, static_cast<float>(std::sqrt(2.0 / std::numbers::pi)));
      q.odd_poly(e, u, kTanhL, kTanhCoef);
      q.op(VecOp::kScale, u, 0, 0.5f);
      q.op(VecOp::kMul, e, u, e, 0.0f);
      q.op(VecOp::kAdd, e, e, u, 0.0f);
      return q.done(e);
    }
  }
  throw Error(ErrorKind::kUnsupported, fmt::format("bf16: no VECTOR sequence for {}", nn::act_name(act)));
}

uint32_t vec_function_lane(const VecFunction& f, uint32_t x) {
  std::vector<uint32_t> r(f.regs, 0u);
  r[0] = x;
  for (const VecStep& s : f.steps) r.at(s.dst) = num::vector_lane(s.op, r.at(s.a), r.at(s.b), num::to_bits(s.scalar));
  return r.at(f.out);
}

float vec_function_apply(const VecFunction& f, float x) { return num::to_float(vec_function_lane(f, num::to_bits(x))); }

double vec_function_error_bound(const nn::Activation& act) {
  switch (act.fn) {
    case nn::ActFn::kTanh: return kTanhErr;
    case nn::ActFn::kSigmoid: return kSigmoidErr;
    case nn::ActFn::kErf: return kErfErr;
    case nn::ActFn::kGelu: return kGeluErr;
    case nn::ActFn::kGeluTanh: return kGeluTanhErr;
    default: return 0x1p-23;
  }
}

namespace detail {

uint64_t emit_vec_function(StepBuilder& sb, const VecFunction& f, uint64_t acc_row, uint64_t scratch_row,
                           uint64_t stride, uint64_t rows) {
  const auto row_of = [&](uint8_t r) { return r == 0 ? acc_row : scratch_row + uint64_t{r - 1u} * stride; };
  for (const VecStep& s : f.steps) {
    isa::Instr v = isa::make_instr(spec::Opcode::kVector);
    v.set("op", static_cast<uint64_t>(s.op));
    v.set("dst_addr", row_of(s.dst));
    v.set("a_addr", row_of(s.a));
    v.set("b_addr", row_of(s.b));
    v.set("rows", rows);
    v.set("scalar", num::to_bits(s.scalar));
    std::vector<size_t> reads = sb.acc(row_of(s.a), rows);
    if (num::vecop_reads_b(s.op)) {
      for (size_t r : sb.acc(row_of(s.b), rows)) reads.push_back(r);
    }
    sb.compute(std::move(v), reads, sb.acc(row_of(s.dst), rows));
  }
  return row_of(f.out);
}

}  // namespace detail

std::vector<float> vec_function_host(const VecFunction& f, std::span<const float> x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = num::bf16_to_float(num::f32_to_bf16(num::canon(vec_function_lane(f, num::to_bits(x[i])))));
  }
  return y;
}

VecPassResult run_vec_function_bf16(Device& device, const VecFunction& f, std::span<const float> x) {
  if ((device.info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("bf16 function {}: the {} device has no bf16 mode (FEATURES.BF16 is 0)", f.name,
                            device.info().backend));
  }
  if (x.empty()) throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 function {}: no values", f.name));
  const DeviceParams& params = device.info().params;
  const uint64_t an = params.array_n;
  const uint64_t rows = (x.size() + an - 1) / an;
  // Two register sets (one chunk's LOAD overlaps the previous chunk's work) of `regs` strips of
  // `strip` rows in the ACC; two UB output buffers of 2 * strip rows.
  const uint64_t regs = f.regs;
  const uint64_t strip = std::min<uint64_t>({params.acc_depth / (2 * regs), params.ub_depth / 4, detail::kMaxRowsField, rows});
  if (strip == 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("bf16 function {}: ACC depth {} cannot hold 2 x {} rows", f.name,
                                                     params.acc_depth, regs));
  }
  constexpr uint64_t kPage = 4096;
  HostBuffer in = device.alloc(std::max<uint64_t>(4 * rows * an, 64), kPage);
  HostBuffer out = device.alloc(std::max<uint64_t>(2 * rows * an, 64), kPage);
  detail::StepBuilder sb(params, 2);
  const uint64_t chunks = (rows + strip - 1) / strip;
  VecPassResult r;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t n = std::min(strip, rows - c * strip), set = c % 2;
    const uint64_t base = set * regs * strip, out_row = set * 2 * strip;
    sb.load(spec::Mem::kAcc, detail::Transfer{base, in.addr() + 4 * an * c * strip, n, 4 * an, 4 * an}, 0);
    const uint64_t res = detail::emit_vec_function(sb, f, base, base + strip, strip, n);
    isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
    act.set("bf16", 1);
    act.set("acc_addr", res);
    act.set("ub_addr", out_row);
    act.set("rows", n);
    sb.compute(std::move(act), sb.acc(res, n), sb.ub(out_row, 2 * n));
    sb.store(spec::Mem::kUb, detail::Transfer{out_row, out.addr() + 2 * an * c * strip, n, 2 * an, 2 * an}, 1);
    r.vectors += f.steps.size();
    r.vector_cycles += f.steps.size() * (n + 4);
  }
  detail::MergedProgram prog = sb.finish();
  std::vector<float> xf(rows * an, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) xf[i] = x[i];
  device.write(in, 0, xf.data(), xf.size() * 4);
  device.clear_perf();
  const uint32_t fence = device.submit(prog.code);
  device.wait(fence);
  std::vector<uint16_t> yb(rows * an);
  device.read(out, 0, yb.data(), yb.size() * 2);
  r.y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) r.y[i] = num::bf16_to_float(yb[i]);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.instructions = prog.code.size() + 1;
  r.moved_bytes = r.perf.rd_bytes + r.perf.wr_bytes;
  r.min_bytes = 4 * uint64_t{x.size()};
  return r;
}

}  // namespace tpuw::runtime
