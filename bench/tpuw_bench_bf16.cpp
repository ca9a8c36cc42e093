// bf16 figures of the matrix unit (ISA 1.1) on the verilated device at N=16:
//   - a 512x512x512 bf16 GEMM (fp32 accumulation): cycles (device counter, doorbell to fence),
//     MXU utilization = M*K*N / (N^2 * cycles), checked bit for bit against the column order of
//     docs/numerics.md (tpuw/numerics.h);
//   - the simulation rate of the whole device in int8 vs bf16 mode (the same GEMM program shape)
//     and of the bare 16x16 array in both modes.
// The program is a minimal bf16 variant of the runtime's GEMM compiler (runtime/gemm.cpp, same
// tiling and token derivation): a bf16 row is a UB/WB row pair, so the plan is made for half the
// UB and WB rows and every local row address is doubled. The user-facing bf16 GEMM
// (`tpuw gemm --dtype bf16`) belongs to the runtime; this bench only measures the hardware.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../host/src/runtime/program_builder.h"
#include "../sim/bench/bare_mxu.h"
#include "tpuw/device.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/sim_control.h"

namespace {

using tpuw::runtime::GemmPlan;
using tpuw::runtime::GemmShape;
namespace rt = tpuw::runtime::detail;
namespace spec = tpuw::spec;
namespace isa = tpuw::isa;

// bf16 (bf16 = true) or int8 GEMM program with the runtime's tiling. bf16: A block (mt, kb) is
// rows x 2N bytes at a_addr + 2*(mt*m_tile*kp + kb*rows*N); weight tile (kb, nb) is N rows x 2N
// bytes at b_addr + 2*N*N*(nb*k_blocks + kb); C as in the int8 GEMM (fp32 words).
std::vector<isa::Word> compile(const GemmPlan& plan, bool bf16, uint64_t a_addr, uint64_t b_addr,
                               uint64_t c_addr) {
  const uint64_t an = plan.array_n, beat = plan.beat, e = bf16 ? 2 : 1;
  const size_t w_res0 = 0, a_res0 = plan.w_slots, acc_res0 = a_res0 + plan.a_slots;
  rt::Builder b(acc_res0 + 2);
  std::vector<int64_t> a_content(plan.a_slots, -1);
  uint64_t tile_counter = 0, a_ring = 0, strip = 0;
  for (uint64_t mt = 0; mt < plan.m_tiles; ++mt) {
    const uint64_t rows = plan.rows_of_tile(mt);
    const uint64_t a_tile_base = a_addr + e * mt * plan.m_tile * plan.kp;
    const uint64_t c_tile_base = c_addr + 4 * mt * plan.m_tile * plan.np;
    for (uint64_t nb = 0; nb < plan.n_blocks; ++nb, ++strip) {
      const uint64_t buf = strip % 2, acc_row = buf * plan.m_tile;
      for (uint64_t kb = 0; kb < plan.k_blocks; ++kb, ++tile_counter) {
        const uint64_t wslot = tile_counter % plan.w_slots;
        const uint64_t tile_addr = b_addr + e * (nb * plan.k_blocks + kb) * an * an;
        for (const auto& t : rt::split_transfer(e * wslot * an, tile_addr, e * an * an, an, beat))
          b.emit(rt::kL, rt::dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {w_res0 + wslot});
        const uint64_t aslot = plan.a_resident ? kb : (a_ring++ % plan.a_slots);
        const auto a_id = static_cast<int64_t>(mt * plan.k_blocks + kb);
        if (a_content[aslot] != a_id) {
          const uint64_t block_addr = a_tile_base + e * kb * rows * an;
          for (const auto& t : rt::split_transfer(e * aslot * plan.m_tile, block_addr, e * rows * an, an, beat))
            b.emit(rt::kL, rt::dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {a_res0 + aslot});
          a_content[aslot] = a_id;
        }
        isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
        lw.set("wb_addr", e * wslot * an);
        lw.set("bf16", bf16 ? 1 : 0);
        b.emit(rt::kC, std::move(lw), {w_res0 + wslot}, {});
        isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
        mm.set("accumulate", kb > 0 ? 1 : 0);
        mm.set("swap", 1);
        mm.set("bf16", bf16 ? 1 : 0);
        mm.set("ub_addr", e * aslot * plan.m_tile);
        mm.set("acc_addr", acc_row);
        mm.set("rows", rows);
        b.emit(rt::kC, std::move(mm), {a_res0 + aslot}, {acc_res0 + buf}, /*is_matmul=*/true);
      }
      const uint64_t strip_addr = c_tile_base + 4 * nb * rows * an;
      for (const auto& t : rt::split_transfer(acc_row, strip_addr, rows * 4 * an, 4 * an, beat))
        b.emit(rt::kS, rt::dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {acc_res0 + buf}, {});
    }
  }
  return rt::merge_program(b, 8, 2 * 8 + 24).code;
}

struct Result {
  uint64_t cycles = 0, sim_cycles = 0;
  double wall_s = 0, utilization = 0;
  bool exact = false;
  tpuw::PerfCounters perf{};
};

// Moderate random bf16 values (exponents around 1) so the sums neither overflow nor vanish.
uint16_t rnd_bf16(std::mt19937_64& rng) {
  const auto exp = static_cast<uint32_t>(120 + rng() % 12);
  return static_cast<uint16_t>((rng() & 0x807Fu) | (exp << 7));
}

Result run(tpuw::Device& dev, uint64_t size, bool bf16, bool check) {
  tpuw::DeviceParams params = dev.info().params;
  if (bf16) {  // a bf16 row is a row pair: plan with half the rows
    params.ub_depth /= 2;
    params.wb_depth /= 2;
  }
  const GemmShape shape{size, size, size};
  const GemmPlan p = tpuw::runtime::plan_gemm(params, shape);
  const uint64_t e = bf16 ? 2 : 1, an = p.array_n;
  // Packed operands in the layout of compile() (values are bf16 or int8 bytes).
  std::mt19937_64 rng(7);
  std::vector<uint16_t> a(p.mp * p.kp), bm(p.kp * p.np);  // a[i*kp+k], bm[k*np+n]
  for (auto& v : a) v = bf16 ? rnd_bf16(rng) : static_cast<uint16_t>(rng() & 0xFFu);
  for (auto& v : bm) v = bf16 ? rnd_bf16(rng) : static_cast<uint16_t>(rng() & 0xFFu);
  std::vector<uint8_t> ap(e * p.mp * p.kp), bp(e * p.kp * p.np);
  auto put = [&](std::vector<uint8_t>& dst, uint64_t idx, uint16_t v) {
    dst[e * idx] = static_cast<uint8_t>(v & 0xFFu);
    if (bf16) dst[e * idx + 1] = static_cast<uint8_t>(v >> 8);
  };
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t kb = 0; kb < p.k_blocks; ++kb)
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t k = 0; k < an; ++k) {
          const uint64_t i = mt * p.m_tile + r;
          put(ap, mt * p.m_tile * p.kp + kb * rows * an + r * an + k, a[i * p.kp + kb * an + k]);
        }
  }
  for (uint64_t nb = 0; nb < p.n_blocks; ++nb)
    for (uint64_t kb = 0; kb < p.k_blocks; ++kb)
      for (uint64_t k = 0; k < an; ++k)
        for (uint64_t n = 0; n < an; ++n)
          put(bp, (nb * p.k_blocks + kb) * an * an + k * an + n, bm[(kb * an + k) * p.np + nb * an + n]);
  tpuw::HostBuffer abuf = dev.alloc(ap.size(), 4096), bbuf = dev.alloc(bp.size(), 4096),
                   cbuf = dev.alloc(p.c_bytes(), 4096);
  dev.write(abuf, 0, ap.data(), ap.size());
  dev.write(bbuf, 0, bp.data(), bp.size());
  const auto code = compile(p, bf16, abuf.addr(), bbuf.addr(), cbuf.addr());

  Result r;
  tpuw::SimControl* sim = dev.backend().sim_control();
  const uint64_t s0 = sim != nullptr ? sim->cycles() : 0;
  dev.clear_perf();
  const auto t0 = std::chrono::steady_clock::now();
  dev.wait(dev.submit(code));
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = sim != nullptr ? sim->cycles() - s0 : 0;
  r.perf = dev.perf();
  r.cycles = r.perf.cycles;
  r.utilization = static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size) /
                  (static_cast<double>(an * an) * static_cast<double>(r.cycles));
  if (check) {
    std::vector<uint32_t> cp(p.c_bytes() / 4);
    dev.read(cbuf, 0, cp.data(), p.c_bytes());
    r.exact = true;
    for (uint64_t mt = 0; mt < p.m_tiles && r.exact; ++mt) {
      const uint64_t rows = p.rows_of_tile(mt);
      for (uint64_t nb = 0; nb < p.n_blocks; ++nb)
        for (uint64_t rr = 0; rr < rows; ++rr)
          for (uint64_t n = 0; n < an; ++n) {
            const uint64_t i = mt * p.m_tile + rr, j = nb * an + n;
            uint32_t acc = 0;
            for (uint64_t kb = 0; kb < p.k_blocks; ++kb) {
              uint32_t s = 0;  // one fold: +0 then k = 0 .. N-1
              if (bf16) {
                for (uint64_t k = 0; k < an; ++k)
                  s = tpuw::num::mac_bf16(s, a[i * p.kp + kb * an + k], bm[(kb * an + k) * p.np + j]);
                acc = kb == 0 ? s : tpuw::num::add(acc, s);
              } else {
                for (uint64_t k = 0; k < an; ++k)
                  s += static_cast<uint32_t>(int32_t{static_cast<int8_t>(a[i * p.kp + kb * an + k])} *
                                             int32_t{static_cast<int8_t>(bm[(kb * an + k) * p.np + j])});
                acc += s;
              }
            }
            const uint64_t idx = mt * p.m_tile * p.np + nb * rows * an + rr * an + n;
            if (cp[idx] != acc) r.exact = false;
          }
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bf16 figures: 512^3 bf16 GEMM utilization on the verilated device (N=16), device simulation "
               "rate in int8 vs bf16 mode, bare-array rate in both modes."};
  uint64_t size = 512, mxu_cycles = 1'000'000;
  bool quick = false;
  app.add_option("--size", size, "GEMM size (M = K = N)")->capture_default_str();
  app.add_option("--mxu-cycles", mxu_cycles, "cycles simulated for each bare-array rate")->capture_default_str();
  app.add_flag("--quick", quick, "skip the bare-array rates");
  CLI11_PARSE(app, argc, argv);
  try {
    tpuw::BackendConfig cfg;
    cfg.array_n = 16;
    tpuw::Device dev = tpuw::Device::open("rtl", cfg);
    const Result i8 = run(dev, size, false, true);
    const Result bf = run(dev, size, true, true);
    for (const auto& [name, r] : {std::pair{"int8", i8}, std::pair{"bf16", bf}}) {
      fmt::print("gemm {0}x{0}x{0} {1} on rtl N=16: {2} cycles, utilization {3:.3f}; MXU active {4}, weight "
                 "stall {5}, DMA wait {6}; result {7}; {8:.0f} simulated cycles/s ({9:.2f} s wall)\n",
                 size, name, r.cycles, r.utilization, r.perf.mxu_active, r.perf.weight_stall, r.perf.dma_wait,
                 r.exact ? "bit-exact" : "WRONG", static_cast<double>(r.sim_cycles) / r.wall_s, r.wall_s);
    }
    if (!quick) {
      const auto b8 = tpuw::bench::run_bare_mxu(mxu_cycles, false);
      const auto b16 = tpuw::bench::run_bare_mxu(mxu_cycles, true);
      fmt::print("bare 16x16 array: int8 rows {:.0f} cycles/s, bf16 rows {:.0f} cycles/s\n", b8.cycles_per_s,
                 b16.cycles_per_s);
    }
    return i8.exact && bf.exact ? 0 : 1;
  } catch (const std::exception& ex) {
    fmt::print(stderr, "tpuw_bench_bf16: {}\n", ex.what());
    return 1;
  }
}
