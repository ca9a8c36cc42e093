// Reference-model speed on one core (issue 11's figure): 512^3 GEMM, int8 and bf16, bit-exact
// models. Prints GOPS (int8) and GFLOPS (bf16): 2*M*K*N operations per second of wall time.
//   BM_RefGemmInt8Runtime: runtime::gemm on the ref backend (packing, DMA, MXU, unpacking).
//   BM_RefMxuProgram/int8, /bf16: a hand-built device program on RefDevice with A resident in UB:
//     per tile (32 x 32 tiles of N = 16) a LOADW and a 512-row MATMUL (accumulating over k), the
//     weight buffer refilled by DMA every WbDepth rows; the time of the device run only.
// The GOPS / GFLOPS counters are per CPU second of the benchmark thread (the single-core figure,
// independent of other load on the machine); GOPS_device is runtime::gemm's own wall time.
// Run: build/bench/tpuw_bench_ref  (goals: int8 >= 30 GOPS, bf16 >= 15 GFLOPS)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"
#include "tpuw/ref/ref_device.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/spec.h"

namespace {

using namespace tpuw;
namespace r = spec::reg;

constexpr uint32_t kM = 512, kK = 512, kNo = 512;
constexpr double kOps = 2.0 * kM * kK * kNo;

void BM_RefGemmInt8Runtime(benchmark::State& state) {
  BackendConfig cfg;
  cfg.array_n = 16;
  cfg.memory.size = 64ull << 20;
  Device dev = Device::open("ref", cfg);
  std::mt19937 rng(1);
  std::vector<int8_t> a(kM * kK), b(kK * kNo);
  for (auto& x : a) x = static_cast<int8_t>(rng());
  for (auto& x : b) x = static_cast<int8_t>(rng());
  const runtime::GemmShape shape{kM, kK, kNo};
  double device_s = 0;
  for (auto _ : state) {
    const auto res = runtime::gemm(dev, a, b, shape);
    device_s += res.wall_s;
    benchmark::DoNotOptimize(res.c.data());
  }
  state.counters["GOPS"] = benchmark::Counter(kOps * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GOPS_device"] = kOps * static_cast<double>(state.iterations()) / 1e9 / device_s;
}
BENCHMARK(BM_RefGemmInt8Runtime)->Unit(benchmark::kMillisecond)->MinTime(1.0);

class MxuProgram {
 public:
  explicit MxuProgram(bool bf16) : p_(*find_device_config(16)), dev_(p_, memory()), bf16_(bf16) {
    const uint32_t n = p_.array_n, pair = bf16 ? 2 : 1;
    const uint64_t a_rows = kM * (kK / n);  // UB tile rows: k-tile major, then row i
    std::mt19937 rng(2);
    std::vector<uint8_t> data(a_rows * pair * n + (kK / n) * (kNo / n) * n * pair * n);
    for (size_t i = 0; i < data.size(); i += 2) {  // moderate bf16 values (any bytes are int8)
      const auto v = static_cast<uint16_t>(rng());
      const auto h = bf16 ? static_cast<uint16_t>((v & 0x807Fu) | (0x3C00u + (v & 0x0380u))) : v;
      data[i] = static_cast<uint8_t>(h);
      data[i + 1] = static_cast<uint8_t>(h >> 8);
    }
    dev_.mem_write(kData, data.data(), data.size());
    const uint64_t w_base = kData + a_rows * pair * n;
    const uint32_t tile_rows = pair * n, tiles = (kK / n) * (kNo / n);
    const uint32_t per_group = p_.wb_depth / tile_rows, groups = (tiles + per_group - 1) / per_group;
    const auto load = [&](spec::Mem mem, uint64_t host, uint64_t rows, bool push_next, bool pop_next) {
      auto in = isa::make_instr(spec::Opcode::kLoad);
      in.set("mem", static_cast<uint64_t>(mem));
      in.set("local_addr", 0);
      in.set("host_addr", host);
      in.set("rows", rows);
      in.set("row_bytes", pair * n);
      in.set("host_stride", pair * n);
      in.push_next = push_next;
      in.pop_next = pop_next;
      return isa::encode(in);
    };
    prog_.push_back(load(spec::Mem::kUb, kData, a_rows, false, false));
    for (uint32_t g = 0; g < groups; ++g) {
      const uint32_t first = g * per_group, count = std::min(per_group, tiles - first);
      prog_.push_back(load(spec::Mem::kWb, w_base + uint64_t{first} * tile_rows * pair * n,
                           uint64_t{count} * tile_rows / pair, true, g > 0));
      for (uint32_t t = 0; t < count; ++t) {
        const uint32_t ti = first + t, nt = ti / (kK / n), kt = ti % (kK / n);
        auto lw = isa::make_instr(spec::Opcode::kLoadw);
        lw.set("wb_addr", uint64_t{t} * tile_rows);
        lw.set("bf16", bf16 ? 1 : 0);
        lw.pop_prev = t == 0;
        lw.push_prev = t + 1 == count && g + 1 < groups;  // the WB may be refilled
        prog_.push_back(isa::encode(lw));
        auto mm = isa::make_instr(spec::Opcode::kMatmul);
        mm.set("ub_addr", uint64_t{kt} * kM * pair);
        mm.set("acc_addr", (nt % (p_.acc_depth / kM)) * kM);
        mm.set("rows", kM);
        mm.set("accumulate", kt > 0 ? 1 : 0);
        mm.set("swap", 1);
        mm.set("bf16", bf16 ? 1 : 0);
        prog_.push_back(isa::encode(mm));
      }
    }
    auto f = isa::make_instr(spec::Opcode::kFence);
    f.set("value", 1);
    f.set("host_addr", kFence);
    f.set("irq", 1);
    prog_.push_back(isa::encode(f));
    dev_.write_reg(r::kIrqEnable, r::kIrqEnableFence | r::kIrqEnableFault);
    dev_.write_reg(r::kRingBase, kRing);
    dev_.write_reg(r::kRingSize, kRingEntries);
  }

  /// Submits the program and runs it to its FENCE; returns false on a fault.
  bool run() {
    for (const auto& w : prog_) {
      dev_.mem_write(kRing + 16ull * tail_, w.data(), w.size());
      tail_ = (tail_ + 1) % kRingEntries;
    }
    dev_.write_reg(r::kRingTail, tail_);
    dev_.run(~uint64_t{0} >> 2);
    dev_.write_reg(r::kIrqStatus, r::kIrqStatusFence);
    return dev_.read_reg(r::kFaultCause) == 0;
  }

 private:
  static constexpr uint64_t kRing = 0x10000, kFence = 0x8000, kData = 0x100000;
  static constexpr uint32_t kRingEntries = 4096;
  static HostMemoryConfig memory() {
    HostMemoryConfig m;
    m.size = 8ull << 20;
    return m;
  }
  DeviceParams p_;
  ref::RefDevice dev_;
  bool bf16_;
  std::vector<isa::Word> prog_;
  uint32_t tail_ = 0;
};

void BM_RefMxuProgram(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  MxuProgram prog(bf16);
  for (auto _ : state) {
    if (!prog.run()) {
      state.SkipWithError("the device faulted");
      break;
    }
  }
  state.SetLabel(bf16 ? "bf16 (GFLOPS)" : "int8 (GOPS)");
  state.counters[bf16 ? "GFLOPS" : "GOPS"] =
      benchmark::Counter(kOps * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RefMxuProgram)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
