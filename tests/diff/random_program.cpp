#include "random_program.h"

#include <algorithm>

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

  isa::Instr compute() {
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

isa::Word random_illegal_instruction(const RandomProgramSpec& spec, std::mt19937_64& rng) {
  Generator gen(spec, rng);
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

}  // namespace tpuw::difftest
