// tpuw_bench_soak: random programs and random faults on several rtl/ref device pairs in one
// process (issue 14), every result compared rtl against ref.
//
// Each pair (one verilated device and one reference model of the same size, own thread, own host
// memory) loops until --seconds have passed, choosing at random:
//   80%  a random valid program (tests/diff RandomProgramSpec, RandomProgramOptions::all(): int8
//        and bf16 modes, transposes, the vector unit, on fp data with NaN/inf/subnormals):
//        host memory must end bit-identical;
//    8%  an illegal instruction inside a random program: both devices fault with the same cause,
//        FAULT_INFO and program index, memory identical, then both are reset;
//    5%  an AXI error: the program is started, runs a random number of cycles, then every host
//        memory access is refused (SimControl::inject_memory_fault): the device must fault
//        AXI_ERROR (or have finished already); injection off, reset;
//    4%  a hang: started, a random number of cycles, then the device stops answering
//        (inject_hang): the driver must time out (or the program had finished); hang off, reset;
//    3%  a reset in the middle of a program.
// After every injected fault the pair gets fresh data and a fresh valid program, compared again:
// that is "recovered". Prints programs, instructions executed, faults injected and recovered, and
// mismatches (must be 0; exit 1 otherwise), or one JSON object with --json.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "random_program.h"
#include "tpuw/device.h"
#include "tpuw/asm.h"
#include "tpuw/error.h"
#include "tpuw/sim_control.h"

namespace {

using json = nlohmann::ordered_json;
using namespace tpuw;
using difftest::RandomProgramOptions;
using difftest::RandomProgramSpec;

constexpr uint64_t kDataBytes = 16 * 1024;

enum Inject { kIllegal, kAxi, kHang, kReset, kNumInject };
constexpr const char* kInjectNames[kNumInject] = {"illegal_instruction", "axi_error", "hang", "reset"};

struct Totals {
  std::atomic<uint64_t> programs{0};
  std::atomic<uint64_t> instructions{0};  // per device kind: instructions the rtl devices completed
  std::atomic<uint64_t> injected[kNumInject]{};
  std::atomic<uint64_t> finished_first[kNumInject]{};  // program done before the injection hit
  std::atomic<uint64_t> recovered{0};
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint64_t> device_cycles{0};  // rtl busy cycles
};

struct Side {
  Device dev;
  HostBuffer data;
};

class PairRunner {
 public:
  PairRunner(unsigned index, unsigned array_n, uint64_t seed, Totals& totals, std::mutex& log_mu)
      : index_(index), n_(array_n), rng_(seed), totals_(totals), log_mu_(log_mu) {
    BackendConfig cfg;
    cfg.array_n = array_n;
    DeviceOptions opt;
    opt.timeout_cycles = 200'000;  // a hung device is noticed after this much simulated time
    opt.timeout_seconds = 60.0;
    for (const char* b : {"rtl", "ref"}) {
      Device d = Device::open(b, cfg, opt);
      HostBuffer buf = d.alloc(kDataBytes, 4096);
      sides_.push_back(Side{std::move(d), std::move(buf)});
    }
    if (sides_[0].data.addr() != sides_[1].data.addr()) {
      throw Error(ErrorKind::kInternal, "soak: rtl and ref allocators disagree");
    }
  }

  void run(std::chrono::steady_clock::time_point until) {
    while (std::chrono::steady_clock::now() < until) {
      const unsigned r = static_cast<unsigned>(rng_() % 100);
      try {
        if (r < 80) {
          valid_program("program");
        } else if (r < 88) {
          illegal_program();
        } else if (r < 93) {
          interrupted(kAxi);
        } else if (r < 97) {
          interrupted(kHang);
        } else {
          interrupted(kReset);
        }
      } catch (const Error& e) {
        mismatch(fmt::format("unexpected error: {}", e.what()));
        // Start over from a clean state so one failure does not cascade.
        for (Side& s : sides_) {
          if (SimControl* sim = s.dev.backend().sim_control()) {
            sim->inject_hang(false);
            sim->inject_memory_fault(false);
          }
          s.dev.reset();
        }
      }
    }
    totals_.device_cycles += sides_[0].dev.busy_cycles();
  }

 private:
  RandomProgramSpec spec(unsigned instructions) {
    return RandomProgramSpec{sides_[0].dev.info().params, sides_[0].data.addr(), kDataBytes, instructions,
                             RandomProgramOptions::all()};
  }

  void fill() {
    const std::vector<uint8_t> bytes = difftest::random_fp_data(kDataBytes, rng_);
    for (Side& s : sides_) s.dev.write(s.data, 0, bytes.data(), bytes.size());
  }

  bool same_memory(const std::string& what) {
    std::vector<uint8_t> a(kDataBytes), b(kDataBytes);
    sides_[0].dev.read(sides_[0].data, 0, a.data(), a.size());
    sides_[1].dev.read(sides_[1].data, 0, b.data(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) {
        mismatch(fmt::format("{}: host memory differs first at data offset {} (rtl 0x{:02x}, ref 0x{:02x})", what, i,
                             a[i], b[i]));
        return false;
      }
    }
    return true;
  }

  void mismatch(const std::string& what) {
    ++totals_.mismatches;
    std::lock_guard lock(log_mu_);
    std::cerr << fmt::format("soak: pair {} (N={}): MISMATCH: {}\n", index_, n_, what);
  }

  // A fresh valid program on fresh data; true when both devices agree.
  bool valid_program(const char* what) {
    fill();
    const auto prog = difftest::random_program(spec(40), rng_);
    for (Side& s : sides_) s.dev.run(prog);
    ++totals_.programs;
    totals_.instructions += prog.size();
    return same_memory(what);
  }

  void illegal_program() {
    fill();
    const RandomProgramSpec sp = spec(12);
    auto prog = difftest::random_program(sp, rng_);
    prog.push_back(difftest::random_illegal_instruction(sp, rng_));
    const auto tail = difftest::random_program(sp, rng_);
    prog.insert(prog.end(), tail.begin(), tail.end());
    std::optional<FaultReport> f[2];
    for (int d = 0; d < 2; ++d) {
      try {
        sides_[d].dev.run(prog);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kDeviceFault) throw;
      }
      f[d] = sides_[d].dev.fault();
    }
    ++totals_.injected[kIllegal];
    ++totals_.programs;
    if (!f[0] || !f[1]) {
      mismatch(fmt::format("illegal instruction: rtl {} / ref {}", f[0] ? "faulted" : "ran it",
                           f[1] ? "faulted" : "ran it"));
    } else if (f[0]->cause != f[1]->cause || f[0]->info != f[1]->info || f[0]->program_index != f[1]->program_index) {
      mismatch(fmt::format("illegal instruction: rtl '{}' vs ref '{}'", f[0]->message(), f[1]->message()));
    } else {
      totals_.instructions += f[0]->program_index.value_or(0);
      same_memory("faulted program");
    }
    recover(kIllegal);
  }

  // Starts a program on both devices, lets it run some cycles, then injects `what`.
  void interrupted(Inject what) {
    fill();
    const auto prog = difftest::random_program(spec(40), rng_);
    const uint64_t cycles = rng_() % 3000;
    bool fired[2] = {false, false};
    for (int d = 0; d < 2; ++d) {
      Device& dev = sides_[d].dev;
      SimControl* sim = dev.backend().sim_control();
      if (sim == nullptr) throw Error(ErrorKind::kInternal, "soak: a backend without SimControl");
      const uint32_t fence = dev.submit(prog);
      sim->run(cycles);
      if (what == kAxi) sim->inject_memory_fault(true);
      if (what == kHang) sim->inject_hang(true);
      if (what == kReset) {
        dev.reset();
        fired[d] = true;
        continue;
      }
      try {
        dev.wait(fence);
      } catch (const Error& e) {
        if (what == kHang && e.kind() == ErrorKind::kTimeout) {
          fired[d] = true;
        } else if (what == kAxi && e.kind() == ErrorKind::kDeviceFault) {
          const auto f = dev.fault();
          if (!f || f->cause != spec::Fault::kAxiError) {
            mismatch(fmt::format("{}: injected AXI error reported as '{}'", d == 0 ? "rtl" : "ref",
                                 f ? f->message() : std::string("no fault")));
          }
          fired[d] = true;
        } else {
          sim->inject_hang(false);
          sim->inject_memory_fault(false);
          throw;
        }
      }
      sim->inject_hang(false);
      sim->inject_memory_fault(false);
      if (fired[d]) {
        dev.reset();
      } else {
        ++totals_.finished_first[what];
      }
    }
    ++totals_.injected[what];
    recover(what);
  }

  void recover(Inject what) {
    for (Side& s : sides_) {
      if (s.dev.fault()) s.dev.reset();
    }
    // An interrupted program stops at a point that depends on each model's timing, so the local
    // memories and weight registers it was writing differ between rtl and ref (legitimately:
    // they are undefined after an aborted program). Give both the same state again.
    if (what != kIllegal) scrub();
    if (valid_program(kInjectNames[what])) ++totals_.recovered;
  }

  // Overwrites the local memory windows the random programs use (UB and ACC rows 0..63, WB rows
  // 0..4N-1) and both weight registers (active and shadow) with the same data on both devices.
  void scrub() {
    fill();
    const DeviceParams& p = sides_[0].dev.info().params;
    const uint64_t beat = p.dma_data_w / 8, n = p.array_n;
    const auto load = [&](spec::Mem mem, uint64_t window_rows, uint64_t row_size) {
      const uint64_t rb = std::max(row_size, beat);
      isa::Instr in = isa::make_instr(spec::Opcode::kLoad);
      in.set("mem", static_cast<uint64_t>(mem));
      in.set("local_addr", 0);
      in.set("host_addr", sides_[0].data.addr());
      in.set("rows", window_rows / (rb / row_size));
      in.set("row_bytes", rb);
      in.set("host_stride", rb);
      return isa::encode(in);
    };
    isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
    lw.set("wb_addr", 0);
    isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
    mm.set("ub_addr", 0);
    mm.set("acc_addr", 0);
    mm.set("rows", 1);
    mm.set("swap", 1);
    const std::vector<isa::Word> memories{load(spec::Mem::kUb, 64, n), load(spec::Mem::kWb, 4 * n, n),
                                          load(spec::Mem::kAcc, 64, 4 * n)};
    const std::vector<isa::Word> weights{isa::encode(lw), isa::encode(mm), isa::encode(lw)};
    for (Side& s : sides_) {
      s.dev.run(memories);
      s.dev.run(weights);
      s.dev.run(memories);  // ACC row 0 again (the MATMUL wrote it)
    }
  }

  unsigned index_, n_;
  std::mt19937_64 rng_;
  Totals& totals_;
  std::mutex& log_mu_;
  std::vector<Side> sides_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Soak test: random programs and random faults (AXI errors, hangs, resets) on several rtl/ref device "
               "pairs in one process, every result compared rtl vs ref"};
  double seconds = 10;
  unsigned pairs = 2;
  std::vector<unsigned> sizes{4, 16};
  uint64_t seed = 1;
  bool as_json = false;
  app.add_option("--seconds,--duration", seconds, "wall-clock time to run (s)")->check(CLI::Range(0.0, 1e7));
  app.add_option("--pairs", pairs, "rtl/ref device pairs, one thread each")->check(CLI::Range(1u, 64u));
  app.add_option("--sizes", sizes, "array sizes N, used round-robin over the pairs")->check(CLI::IsMember({4u, 16u}));
  app.add_option("--seed", seed, "random seed (pair i uses seed + i)");
  app.add_flag("--json", as_json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);

  Totals totals;
  std::mutex log_mu;
  try {
    std::vector<std::unique_ptr<PairRunner>> runners;
    for (unsigned i = 0; i < pairs; ++i) {
      runners.push_back(std::make_unique<PairRunner>(i, sizes[i % sizes.size()], seed + i, totals, log_mu));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto until = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(seconds));
    std::vector<std::thread> threads;
    std::vector<std::string> errors(pairs);
    for (unsigned i = 0; i < pairs; ++i) {
      threads.emplace_back([&, i] {
        try {
          runners[i]->run(until);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (unsigned i = 0; i < pairs; ++i) {
      if (!errors[i].empty()) {
        ++totals.mismatches;
        std::cerr << fmt::format("soak: pair {} stopped: {}\n", i, errors[i]);
      }
    }
    uint64_t injected = 0;
    for (const auto& x : totals.injected) injected += x.load();
    if (as_json) {
      json j;
      j["seconds"] = wall;
      j["pairs"] = pairs;
      j["sizes"] = sizes;
      j["seed"] = seed;
      j["programs"] = totals.programs.load();
      j["instructions"] = totals.instructions.load();
      j["rtl_device_cycles"] = totals.device_cycles.load();
      json inj;
      for (int k = 0; k < kNumInject; ++k) {
        inj[kInjectNames[k]] = {{"injected", totals.injected[k].load()},
                                {"program_finished_first", totals.finished_first[k].load()}};
      }
      j["faults"] = inj;
      j["faults_injected"] = injected;
      j["faults_recovered"] = totals.recovered.load();
      j["mismatches"] = totals.mismatches.load();
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << fmt::format("soak: {:.0f} s, {} rtl/ref pairs (N = {})\n", wall, pairs, fmt::join(sizes, ", "));
      std::cout << fmt::format("  programs               {}\n", totals.programs.load());
      std::cout << fmt::format("  instructions executed  {} per backend ({} rtl device cycles)\n",
                               totals.instructions.load(), totals.device_cycles.load());
      for (int k = 0; k < kNumInject; ++k) {
        std::cout << fmt::format("  injected {:<20} {} ({} device-runs finished before it hit)\n", kInjectNames[k],
                                 totals.injected[k].load(), totals.finished_first[k].load());
      }
      std::cout << fmt::format("  faults injected        {}\n", injected);
      std::cout << fmt::format("  faults recovered       {}\n", totals.recovered.load());
      std::cout << fmt::format("  mismatches             {}\n", totals.mismatches.load());
    }
    return totals.mismatches.load() == 0 && totals.recovered.load() == injected ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "tpuw_bench_soak: " << e.what() << "\n";
    return 1;
  }
}
