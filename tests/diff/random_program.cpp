#include "random_program.h"

#include <algorithm>
#include <optional>

#include "tpuw/activate.h"
#include "tpuw/numerics.h"
#include "tpuw/spec.h"

namespace tpuw::difftest {
namespace {

using spec::Opcode;
using spec::Queue;

// Instructions work inside small windows of each local memory so that they read what earlier
// ones wrote (a LOAD into UB rows 0..63, a MATMUL over some of them, ...).
constexpr uint64_t kUbWindow = 64;
constexpr uint64_t kAccWindow = 64;

uint64_t uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {  // inclusive
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

uint64_t uniform_even(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {  // inclusive, lo and hi even
  return lo + 2 * uniform(rng, 0, (hi - lo) / 2);
}

// A bf16 pattern: 1/25 each of +-0, subnormal, +-inf, NaN, huge (products overflow), tiny normal
// (products underflow); otherwise a moderate magnitude 2^-8 .. 2^8.
uint16_t random_bf16(std::mt19937_64& rng) {
  const uint64_t r = rng();
  const auto sign = static_cast<uint16_t>((r & 1u) << 15);
  const auto frac = static_cast<uint16_t>((r >> 1) & 0x7Fu);
  uint64_t exp = 0;
  switch ((r >> 8) % 25) {
    case 0: return sign;
    case 1: return static_cast<uint16_t>(sign | frac | 1u);
    case 2: return static_cast<uint16_t>(sign | 0x7F80u);
    case 3: return static_cast<uint16_t>(sign | 0x7F80u | frac | 1u);
    case 4: exp = 240 + (r >> 16) % 15; break;
    case 5: exp = 1 + (r >> 16) % 16; break;
    default: exp = 119 + (r >> 16) % 17; break;
  }
  return static_cast<uint16_t>(sign | (exp << 7) | frac);
}

class Generator {
 public:
  Generator(const RandomProgramSpec& spec, std::mt19937_64& rng) : s_(spec), rng_(rng) {}

  uint32_t n() const { return s_.params.array_n; }
  uint32_t beat() const { return s_.params.dma_data_w / 8; }
  uint64_t wb_window() const { return 4ull * n(); }

  // A LOAD or STORE with random shape inside the data buffer and the memory's window.
  isa::Instr dma(Opcode op) {
    isa::Instr in = isa::make_instr(op);
    spec::Mem mem;
    if (op == Opcode::kLoad) {
      mem = static_cast<spec::Mem>(uniform(rng_, 0, 2));
    } else {
      mem = uniform(rng_, 0, 1) ? spec::Mem::kAcc : spec::Mem::kUb;
    }
    const uint64_t row_size = mem == spec::Mem::kAcc ? 4ull * n() : n();
    const uint64_t window = mem == spec::Mem::kUb ? kUbWindow : mem == spec::Mem::kWb ? wb_window() : kAccWindow;
    const uint64_t unit = std::max<uint64_t>(row_size, beat());
    uint64_t row_bytes = unit * uniform(rng_, 1, 3);
    while (row_bytes / row_size > window) row_bytes -= unit;
    const uint64_t local_per_row = row_bytes / row_size;
    const uint64_t max_rows = std::max<uint64_t>(1, std::min<uint64_t>(5, window / local_per_row));
    const uint64_t rows = uniform(rng_, 1, max_rows);
    uint64_t stride = row_bytes + beat() * uniform(rng_, 0, 2);
    if (op == Opcode::kLoad && uniform(rng_, 0, 9) == 0) stride = 0;  // broadcast one host row
    if (uniform(rng_, 0, 9) == 0 && row_bytes > beat()) stride = beat();  // overlapping rows
    const uint64_t span = (rows - 1) * stride + row_bytes;
    const uint64_t host_addr = s_.data_addr + beat() * uniform(rng_, 0, (s_.data_bytes - span) / beat());
    const uint64_t local_rows = rows * local_per_row;
    in.set("mem", static_cast<uint64_t>(mem));
    in.set("local_addr", uniform(rng_, 0, window - local_rows));
    in.set("host_addr", host_addr);
    in.set("rows", rows);
    in.set("row_bytes", row_bytes);
    in.set("host_stride", stride);
    return in;
  }

  // ---- ISA 1.1 (RandomProgramOptions) ----
  const RandomProgramOptions& opt() const { return s_.options; }
  bool coin() { return uniform(rng_, 0, 1) != 0; }

  isa::Instr loadw11() {
    isa::Instr in = isa::make_instr(Opcode::kLoadw);
    const bool bf16 = opt().use_bf16() && coin();
    in.set("bf16", bf16 ? 1 : 0);
    in.set("transpose", opt().use_transpose() && coin() ? 1 : 0);
    in.set("wb_addr", bf16 ? uniform_even(rng_, 0, wb_window() - 2 * n()) : uniform(rng_, 0, wb_window() - n()));
    return in;
  }

  isa::Instr matmul11() {
    isa::Instr in = isa::make_instr(Opcode::kMatmul);
    const bool bf16 = opt().use_bf16() && coin();
    const uint64_t rows = uniform(rng_, 1, bf16 ? 16 : 24);
    in.set("bf16", bf16 ? 1 : 0);
    in.set("rows", rows);
    in.set("ub_addr", bf16 ? uniform_even(rng_, 0, kUbWindow - 2 * rows) : uniform(rng_, 0, kUbWindow - rows));
    in.set("acc_addr", uniform(rng_, 0, kAccWindow - rows));
    in.set("accumulate", uniform(rng_, 0, 1));
    in.set("swap", uniform(rng_, 0, 1));
    return in;
  }

  isa::Instr activate11() {
    isa::Instr in = isa::make_instr(Opcode::kActivate);
    const bool bf16 = opt().use_bf16() && coin();
    const uint64_t rows = uniform(rng_, 1, bf16 ? 16 : 24);
    in.set("bf16", bf16 ? 1 : 0);
    in.set("rows", rows);
    in.set("acc_addr", uniform(rng_, 0, kAccWindow - rows));
    in.set("ub_addr", bf16 ? uniform_even(rng_, 0, kUbWindow - 2 * rows) : uniform(rng_, 0, kUbWindow - rows));
    in.set("relu", uniform(rng_, 0, 1));
    in.set("bias", uniform(rng_, 0, 1));
    in.set("bias_addr", uniform(rng_, 0, kAccWindow - 1));
    // ISA 1.2 lookup table (int8 only): the table is whatever the ACC rows after the shift row
    // hold, i.e. random bytes.
    const bool lut = !bf16 && opt().use_lut() && coin();
    in.set("lut", lut ? 1 : 0);
    const uint64_t qp_rows = 2 + (lut ? lut_rows(n()) : 0);
    // bf16 mode does not use (nor range-check) qparam_addr: sometimes far out of range.
    in.set("qparam_addr", bf16 && coin() ? uniform(rng_, 0, 0xFFFFF) : uniform(rng_, 0, kAccWindow - qp_rows));
    return in;
  }

  isa::Instr transpose11() {
    isa::Instr in = isa::make_instr(Opcode::kTranspose);
    const bool bf16 = opt().use_bf16() && coin();
    const uint64_t rows = uniform(rng_, 1, n()), pair = bf16 ? 2 : 1;
    in.set("bf16", bf16 ? 1 : 0);
    in.set("rows", rows);
    // Source and destination may overlap (every source row is read first).
    in.set("src_addr", bf16 ? uniform_even(rng_, 0, kUbWindow - 2 * rows) : uniform(rng_, 0, kUbWindow - rows));
    in.set("dst_addr", bf16 ? uniform_even(rng_, 0, kUbWindow - pair * n()) : uniform(rng_, 0, kUbWindow - n()));
    return in;
  }

  isa::Instr vector11() {
    isa::Instr in = isa::make_instr(Opcode::kVector);
    const auto op = static_cast<spec::VecOp>(uniform(rng_, 0, static_cast<uint64_t>(spec::VecOp::kImax)));
    const bool colsum = op == spec::VecOp::kColsum;
    const bool reads_b = num::vecop_reads_b(op);
    const uint64_t rows = uniform(rng_, 1, 16);
    const uint64_t a = uniform(rng_, 0, kAccWindow - rows);
    // b: inside the window when read; otherwise anywhere (not range-checked).
    uint64_t b = reads_b || coin() ? uniform(rng_, 0, kAccWindow - rows) : uniform(rng_, 0, 0xFFFFF);
    uint64_t dst = 0;
    if (colsum) {
      dst = uniform(rng_, 0, kAccWindow - 1);  // may lie inside a: a is read first
    } else {
      // An element-wise destination equals a source range or misses it (decode rule): in place on
      // a, in place on b, or a disjoint range, whichever the draw prefers and the sources allow.
      const auto clear = [&](uint64_t d, uint64_t src) { return d == src || d + rows <= src || src + rows <= d; };
      const auto ok = [&](uint64_t d) { return clear(d, a) && (!reads_b || clear(d, b)); };
      std::vector<uint64_t> cand;
      for (int i = 0; i < 8; ++i) cand.push_back(uniform(rng_, 0, kAccWindow - rows));
      const uint64_t pick = uniform(rng_, 0, 2);
      if (pick == 0) cand.insert(cand.begin(), a);
      if (pick == 1 && reads_b) cand.insert(cand.begin(), b);
      cand.push_back(a);
      if (reads_b) cand.push_back(b);
      const auto it = std::find_if(cand.begin(), cand.end(), ok);
      if (it != cand.end()) {
        dst = *it;
      } else {  // a and b overlap partially and nothing is clear of both: read b = a
        b = a;
        dst = a;
      }
    }
    in.set("op", static_cast<uint64_t>(op));
    in.set("rows", rows);
    in.set("a_addr", a);
    in.set("b_addr", b);
    in.set("dst_addr", dst);
    in.set("scalar", random_fp32(rng_));
    return in;
  }

  isa::Instr compute11() {
    switch (uniform(rng_, 0, 9)) {
      case 0: return loadw11();
      case 1:
      case 2: return matmul11();
      case 3: return activate11();
      case 4: return opt().use_transpose() ? transpose11() : activate11();
      case 5: return opt().use_transpose() ? transpose11() : matmul11();
      case 6:
      case 7: return opt().use_vector() ? vector11() : activate11();
      case 8: return opt().use_vector() ? vector11() : loadw11();
      default: return isa::make_instr(Opcode::kNop);
    }
  }

  isa::Instr compute() {
    if (opt().any()) return compute11();
    switch (uniform(rng_, 0, 5)) {
      case 0: {
        isa::Instr in = isa::make_instr(Opcode::kLoadw);
        in.set("wb_addr", uniform(rng_, 0, wb_window() - n()));
        return in;
      }
      case 1:
      case 2: {
        isa::Instr in = isa::make_instr(Opcode::kMatmul);
        const uint64_t rows = uniform(rng_, 1, 24);
        in.set("rows", rows);
        in.set("ub_addr", uniform(rng_, 0, kUbWindow - rows));
        in.set("acc_addr", uniform(rng_, 0, kAccWindow - rows));
        in.set("accumulate", uniform(rng_, 0, 1));
        in.set("swap", uniform(rng_, 0, 1));
        return in;
      }
      case 3:
      case 4: {
        isa::Instr in = isa::make_instr(Opcode::kActivate);
        const uint64_t rows = uniform(rng_, 1, 24);
        in.set("rows", rows);
        in.set("acc_addr", uniform(rng_, 0, kAccWindow - rows));
        in.set("ub_addr", uniform(rng_, 0, kUbWindow - rows));
        in.set("relu", uniform(rng_, 0, 1));
        in.set("bias", uniform(rng_, 0, 1));
        in.set("bias_addr", uniform(rng_, 0, kAccWindow - 1));
        in.set("qparam_addr", uniform(rng_, 0, kAccWindow - 2));
        return in;
      }
      default:
        return isa::make_instr(Opcode::kNop);
    }
  }

  isa::Instr any() {
    switch (uniform(rng_, 0, 3)) {
      case 0: return dma(Opcode::kLoad);
      case 1: return dma(Opcode::kStore);
      default: return compute();
    }
  }

  static Queue queue_of(const isa::Instr& in) { return in.info()->queue; }

  // Appends `in` so that it starts only after the previous instruction finished.
  void append_serialized(isa::Instr in) {
    if (!prog_.empty()) {
      Queue from = queue_of(prog_.back());
      const Queue to = queue_of(in);
      // LOAD and STORE share no token channel: route through a compute NOP.
      if ((from == Queue::kLoad && to == Queue::kStore) || (from == Queue::kStore && to == Queue::kLoad)) {
        append_serialized(isa::make_instr(Opcode::kNop));
        from = Queue::kCompute;
      }
      if (from != to) {
        isa::Instr& prev = prog_.back();
        if (static_cast<int>(to) > static_cast<int>(from)) {
          prev.push_next = true;
          in.pop_prev = true;
        } else {
          prev.push_prev = true;
          in.pop_next = true;
        }
      }
    }
    prog_.push_back(in);
  }

  std::vector<isa::Word> build() {
    for (unsigned i = 0; i < s_.instructions; ++i) append_serialized(any());
    std::vector<isa::Word> words;
    words.reserve(prog_.size());
    for (const auto& in : prog_) words.push_back(isa::encode(in));
    return words;
  }

 private:
  const RandomProgramSpec& s_;
  std::mt19937_64& rng_;
  std::vector<isa::Instr> prog_;
};

}  // namespace

std::vector<isa::Word> random_program(const RandomProgramSpec& spec, std::mt19937_64& rng) {
  return Generator(spec, rng).build();
}

namespace {

// ISA 1.1 decode faults: only the features the options enable; nullopt when none is.
std::optional<isa::Word> random_illegal11(const RandomProgramSpec& spec, std::mt19937_64& rng) {
  const auto& o = spec.options;
  const uint32_t n = spec.params.array_n;
  std::vector<int> kinds;
  if (o.use_bf16()) kinds.insert(kinds.end(), {0, 1, 2});
  if (o.use_transpose()) kinds.insert(kinds.end(), {3});
  if (o.use_transpose() && o.use_bf16()) kinds.insert(kinds.end(), {4});
  if (o.use_vector()) kinds.insert(kinds.end(), {5, 6, 7, 8});
  if (o.use_lut()) kinds.insert(kinds.end(), {9});
  if (o.use_lut() && o.use_bf16()) kinds.insert(kinds.end(), {10});
  if (kinds.empty()) return std::nullopt;
  const uint64_t odd = 2 * uniform(rng, 0, 20) + 1;
  switch (kinds[uniform(rng, 0, kinds.size() - 1)]) {
    case 0: {  // bf16 MATMUL, odd ub_addr
      isa::Instr in = isa::make_instr(Opcode::kMatmul);
      in.set("bf16", 1);
      in.set("rows", uniform(rng, 1, 8));
      in.set("ub_addr", odd);
      return isa::encode(in);
    }
    case 1: {  // bf16 LOADW, odd wb_addr
      isa::Instr in = isa::make_instr(Opcode::kLoadw);
      in.set("bf16", 1);
      in.set("wb_addr", odd);
      return isa::encode(in);
    }
    case 2: {  // bf16 MATMUL whose row pairs run past the end of UB
      isa::Instr in = isa::make_instr(Opcode::kMatmul);
      in.set("bf16", 1);
      in.set("rows", 4);
      in.set("ub_addr", spec.params.ub_depth - 6);
      return isa::encode(in);
    }
    case 3: {  // TRANSPOSE rows > N
      isa::Instr in = isa::make_instr(Opcode::kTranspose);
      in.set("rows", n + uniform(rng, 1, 100));
      return isa::encode(in);
    }
    case 4: {  // bf16 TRANSPOSE, odd destination
      isa::Instr in = isa::make_instr(Opcode::kTranspose);
      in.set("bf16", 1);
      in.set("rows", 1);
      in.set("dst_addr", odd);
      return isa::encode(in);
    }
    case 5: {  // undefined VECTOR op
      isa::Instr in = isa::make_instr(Opcode::kVector);
      in.set("op", uniform(rng, static_cast<uint64_t>(spec::VecOp::kImax) + 1, 15));
      in.set("rows", 1);
      return isa::encode(in);
    }
    case 6: {  // VECTOR destination partly overlapping a
      isa::Instr in = isa::make_instr(Opcode::kVector);
      in.set("op", uniform(rng, 0, 7));  // element-wise ops
      const uint64_t rows = uniform(rng, 2, 8);
      in.set("rows", rows);
      in.set("a_addr", 10);
      in.set("b_addr", 10);
      in.set("dst_addr", 10 + uniform(rng, 1, rows - 1));
      return isa::encode(in);
    }
    case 7: {  // VECTOR rows = 0
      isa::Instr in = isa::make_instr(Opcode::kVector);
      in.set("op", uniform(rng, 0, static_cast<uint64_t>(spec::VecOp::kImax)));
      return isa::encode(in);
    }
    case 9: {  // LUT ACTIVATE whose table rows run past the end of ACC
      isa::Instr in = isa::make_instr(Opcode::kActivate);
      in.set("lut", 1);
      in.set("rows", 1);
      in.set("qparam_addr", spec.params.acc_depth - 2 - uniform(rng, 0, lut_rows(n) - 1));
      return isa::encode(in);
    }
    case 10: {  // ACTIVATE with both `lut` and `bf16`
      isa::Instr in = isa::make_instr(Opcode::kActivate);
      in.set("lut", 1);
      in.set("bf16", 1);
      in.set("rows", uniform(rng, 1, 8));
      return isa::encode(in);
    }
    default: {  // VECTOR reading b past the end of ACC
      isa::Instr in = isa::make_instr(Opcode::kVector);
      in.set("op", static_cast<uint64_t>(spec::VecOp::kAdd));
      in.set("rows", 4);
      in.set("b_addr", spec.params.acc_depth - 2);
      return isa::encode(in);
    }
  }
}

}  // namespace

isa::Word random_illegal_instruction(const RandomProgramSpec& spec, std::mt19937_64& rng) {
  Generator gen(spec, rng);
  if (spec.options.any() && uniform(rng, 0, 1) == 0) {
    if (auto w = random_illegal11(spec, rng)) return *w;
  }
  switch (uniform(rng, 0, 5)) {
    case 0: {  // undefined opcode
      isa::Word w{};
      uint8_t op = 0;
      do {
        op = static_cast<uint8_t>(uniform(rng, 0, 255));
      } while (spec::find_instr(op) != nullptr);
      w[0] = op;
      return w;
    }
    case 1: {  // a reserved bit set in an otherwise valid instruction
      isa::Word w = isa::encode(gen.any());
      const auto& mask = spec::find_instr(w[0])->reserved_mask;
      std::vector<unsigned> bits;
      for (unsigned b = 0; b < spec::kInstrBits; ++b) {
        if ((mask[b / 32] >> (b % 32)) & 1u) bits.push_back(b);
      }
      const unsigned bit = bits[uniform(rng, 0, bits.size() - 1)];
      w[bit / 8] = static_cast<uint8_t>(w[bit / 8] | (1u << (bit % 8)));
      return w;
    }
    case 2: {  // zero rows
      isa::Instr in = gen.dma(spec::Opcode::kLoad);
      in.set("rows", 0);
      return isa::encode(in);
    }
    case 3: {  // past the end of the unified buffer
      isa::Instr in = isa::make_instr(spec::Opcode::kMatmul);
      in.set("rows", 8);
      in.set("ub_addr", spec.params.ub_depth - 7);
      return isa::encode(in);
    }
    case 4: {  // host range outside the DMA window (the driver sets it to host memory)
      isa::Instr in = gen.dma(spec::Opcode::kStore);
      in.set("host_addr", 0xFFFF0000ull);
      return isa::encode(in);
    }
    default: {  // a dependency flag the queue cannot have (LOAD has no previous queue)
      isa::Instr in = gen.dma(spec::Opcode::kLoad);
      in.pop_prev = true;
      return isa::encode(in);
    }
  }
}

uint32_t random_fp32(std::mt19937_64& rng) {
  const uint16_t hi = random_bf16(rng);
  const auto lo = static_cast<uint16_t>(rng());
  if ((hi & 0x7FFFu) == 0) return static_cast<uint32_t>(hi) << 16;  // a real +-0
  return static_cast<uint32_t>(hi) << 16 | lo;
}

std::vector<uint8_t> random_fp_data(size_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    const uint16_t h = random_bf16(rng);
    out[i] = static_cast<uint8_t>(h);
    out[i + 1] = static_cast<uint8_t>(h >> 8);
  }
  if (bytes % 2 != 0) out[bytes - 1] = static_cast<uint8_t>(rng());
  return out;
}

}  // namespace tpuw::difftest
