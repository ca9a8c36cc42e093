// GEMM tiling and program generation (see tpuw/runtime/gemm.h).
//
// How the program is built: program_builder.h (sequential meaning -> hazard-derived tokens -> merge
// with every pop after its push). The GEMM's sequential meaning: for each M tile, for each output
// column strip, for each K block ("fold"):
//   LOAD  weight tile (k, n)          -> WB slot  (t mod w_slots)
//   LOAD  A block (m, k) if not there -> UB slot  (resident: k; streaming: ring)
//   LOADW WB slot
//   MATMUL UB slot -> ACC buffer (strip mod 2), swap=1, accumulate = k > 0
// and after the last fold of a strip: STORE ACC buffer -> C strip.
#include "tpuw/runtime/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>

#include "program_builder.h"
#include "tpuw/checked.h"
#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::dma_instr;
using detail::kC;
using detail::kL;
using detail::kMaxRowsField;
using detail::kS;
using detail::round_down;
using detail::round_up;
using detail::split_transfer;
using detail::Transfer;

constexpr uint32_t kMaxWSlots = 64;      // WB tiles in the weight ring (prefetch depth is bounded by
                                         // the program order anyway, see kLookahead)
constexpr uint64_t kLookahead = 8;       // compute instructions a load is placed ahead of its use

uint64_t lcm64(uint64_t a, uint64_t b) { return std::lcm(a, b); }

void check_shape(const GemmShape& s) {
  if (s.m == 0 || s.k == 0 || s.n == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("GEMM shape M={} K={} N={}: every dimension must be >= 1", s.m, s.k, s.n));
  }
}

std::string shape_name(const GemmShape& s) { return fmt::format("GEMM M={} K={} N={}", s.m, s.k, s.n); }

/// x rounded up to a multiple of m, or Error(kInvalidArgument) when that overflows.
uint64_t checked_round_up(uint64_t x, uint64_t m, const GemmShape& s) {
  return checked_mul(checked_add(x, m - 1, shape_name(s)) / m, m, shape_name(s));
}

/// Checks that the operand spans hold M*K and K*N elements (the products overflow-checked).
void check_operands(const char* fn, std::span<const int8_t> a, std::span<const int8_t> b, const GemmShape& s) {
  const uint64_t mk = checked_mul(s.m, s.k, fmt::format("{}: M*K of {}", fn, shape_name(s)));
  const uint64_t kn = checked_mul(s.k, s.n, fmt::format("{}: K*N of {}", fn, shape_name(s)));
  if (a.size() != mk || b.size() != kn) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: A has {} elements and B {}, expected M*K = {} and K*N = {}", fn, a.size(), b.size(),
                            mk, kn));
  }
}

}  // namespace

GemmPlan plan_gemm(const DeviceParams& params, const GemmShape& shape) {
  check_shape(shape);
  GemmPlan p;
  p.shape = shape;
  const uint64_t an = params.array_n;
  p.array_n = params.array_n;
  p.beat = params.dma_data_w / 8;
  if (an == 0 || p.beat == 0) throw Error(ErrorKind::kInvalidArgument, "plan_gemm: bad device parameters");
  const uint64_t beat = p.beat;
  // A weight tile (an*an bytes) must be loadable in whole beats.
  if ((an * an) % lcm64(an, beat) != 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("array size {} with a {}-byte DMA beat: a weight tile is smaller than a beat", an, beat));
  }
  // Rows of an M tile: A blocks (rows*an bytes) and C strips (rows*4an bytes) in whole beats.
  const uint64_t m_align = std::lcm(lcm64(an, beat) / an, lcm64(4 * an, beat) / (4 * an));
  p.mp = checked_round_up(shape.m, m_align, shape);
  p.kp = checked_round_up(shape.k, an, shape);
  p.np = checked_round_up(shape.n, an, shape);
  // The packed operand sizes (a_bytes(), b_bytes(), c_bytes()), their sum and the sum plus 4 GiB
  // of addresses all fit in 64 bits; callers add them without further checks.
  {
    const std::string what = fmt::format("{}: packed operand bytes", shape_name(shape));
    const uint64_t a_bytes = checked_mul(p.mp, p.kp, what);
    const uint64_t b_bytes = checked_mul(p.kp, p.np, what);
    const uint64_t c_bytes = checked_mul(uint64_t{4}, checked_mul(p.mp, p.np, what), what);
    (void)checked_add(checked_add(checked_add(a_bytes, b_bytes, what), c_bytes, what), uint64_t{1} << 32, what);
  }
  p.k_blocks = p.kp / an;
  p.n_blocks = p.np / an;

  const uint64_t acc_cap = round_down(std::min<uint64_t>(params.acc_depth / 2, kMaxRowsField), m_align);
  if (acc_cap == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("ACC depth {} cannot hold two output strips of {} rows", params.acc_depth, m_align));
  }
  const uint64_t res_cap = round_down(params.ub_depth / p.k_blocks, m_align);
  uint64_t mt = 0;
  if (res_cap >= m_align && (res_cap >= p.mp || res_cap >= an)) {
    p.a_resident = true;
    mt = std::min({p.mp, acc_cap, res_cap});
  } else {
    p.a_resident = false;
    mt = std::min({p.mp, acc_cap, round_down(params.ub_depth / 4, m_align)});
    if (mt == 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("UB depth {} is too small for GEMM tiles of {} rows", params.ub_depth, m_align));
    }
  }
  p.m_tiles = (p.mp + mt - 1) / mt;
  p.m_tile = round_up((p.mp + p.m_tiles - 1) / p.m_tiles, m_align);  // balance the tiles
  p.a_slots = static_cast<uint32_t>(
      p.a_resident ? p.k_blocks : std::min<uint64_t>(params.ub_depth / p.m_tile, UINT32_MAX));
  p.w_slots = std::min<uint32_t>(params.wb_depth / params.array_n, kMaxWSlots);
  if (p.w_slots == 0) {
    throw Error(ErrorKind::kUnsupported, fmt::format("WB depth {} holds no weight tile", params.wb_depth));
  }
  p.folds = checked_product({p.m_tiles, p.n_blocks, p.k_blocks}, fmt::format("{}: folds", shape_name(shape)));
  return p;
}

GemmProgram compile_gemm(const GemmPlan& plan, uint64_t a_addr, uint64_t b_addr, uint64_t c_addr) {
  const uint64_t an = plan.array_n;
  const uint64_t beat = plan.beat;
  for (uint64_t addr : {a_addr, b_addr, c_addr}) {
    // plan_gemm guarantees that the sizes plus 4 GiB fit in 64 bits.
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32) ||
        addr + std::max({plan.a_bytes(), plan.b_bytes(), plan.c_bytes()}) > (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("compile_gemm: host address 0x{:x} is not {}-byte aligned or above 4 GiB", addr, beat));
    }
  }
  const size_t w_res0 = 0;
  const size_t a_res0 = plan.w_slots;
  const size_t acc_res0 = a_res0 + plan.a_slots;
  Builder b(acc_res0 + 2);

  std::vector<int64_t> a_content(plan.a_slots, -1);  // which (mt * k_blocks + kb) a UB slot holds
  uint64_t tile_counter = 0;
  uint64_t a_ring = 0;
  uint64_t strip = 0;
  for (uint64_t mt = 0; mt < plan.m_tiles; ++mt) {
    const uint64_t rows = plan.rows_of_tile(mt);
    const uint64_t a_tile_base = a_addr + mt * plan.m_tile * plan.kp;
    const uint64_t c_tile_base = c_addr + 4 * mt * plan.m_tile * plan.np;
    for (uint64_t nb = 0; nb < plan.n_blocks; ++nb, ++strip) {
      const uint64_t buf = strip % 2;
      const uint64_t acc_row = buf * plan.m_tile;
      for (uint64_t kb = 0; kb < plan.k_blocks; ++kb, ++tile_counter) {
        // Weight tile -> WB slot.
        const uint64_t wslot = tile_counter % plan.w_slots;
        const uint64_t tile_addr = b_addr + (nb * plan.k_blocks + kb) * an * an;
        for (const Transfer& t : split_transfer(wslot * an, tile_addr, an * an, an, beat)) {
          b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {w_res0 + wslot});
        }
        // A block -> UB slot, unless it is already there.
        const uint64_t aslot = plan.a_resident ? kb : (a_ring++ % plan.a_slots);
        const auto a_id = static_cast<int64_t>(mt * plan.k_blocks + kb);
        if (a_content[aslot] != a_id) {
          const uint64_t block_addr = a_tile_base + kb * rows * an;
          for (const Transfer& t : split_transfer(aslot * plan.m_tile, block_addr, rows * an, an, beat)) {
            b.emit(kL, dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {a_res0 + aslot});
          }
          a_content[aslot] = a_id;
        }
        isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
        lw.set("wb_addr", wslot * an);
        b.emit(kC, std::move(lw), {w_res0 + wslot}, {});
        isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
        mm.set("accumulate", kb > 0 ? 1 : 0);
        mm.set("swap", 1);
        mm.set("ub_addr", aslot * plan.m_tile);
        mm.set("acc_addr", acc_row);
        mm.set("rows", rows);
        b.emit(kC, std::move(mm), {a_res0 + aslot}, {acc_res0 + buf}, /*is_matmul=*/true);
      }
      const uint64_t strip_addr = c_tile_base + 4 * nb * rows * an;
      for (const Transfer& t : split_transfer(acc_row, strip_addr, rows * 4 * an, 4 * an, beat)) {
        b.emit(kS, dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {acc_res0 + buf}, {});
      }
    }
  }

  detail::MergedProgram merged = detail::merge_program(b, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
  GemmProgram prog;
  prog.plan = plan;
  detail::take_merged(std::move(merged), prog);
  return prog;
}

std::vector<int8_t> pack_a(const GemmPlan& plan, std::span<const int8_t> a) {
  const uint64_t an = plan.array_n, K = plan.shape.k, M = plan.shape.m;
  if (a.size() != checked_mul(M, K, fmt::format("pack_a: M*K of {}", shape_name(plan.shape)))) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("pack_a: A has {} elements, expected M*K = {}", a.size(), M * K));
  }
  std::vector<int8_t> out(plan.a_bytes(), 0);
  for (uint64_t mt = 0; mt < plan.m_tiles; ++mt) {
    const uint64_t rows = plan.rows_of_tile(mt);
    const uint64_t tile_base = mt * plan.m_tile * plan.kp;
    for (uint64_t kb = 0; kb < plan.k_blocks; ++kb) {
      int8_t* block = out.data() + tile_base + kb * rows * an;
      const uint64_t k0 = kb * an;
      const uint64_t kw = std::min(an, K - k0);
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t m = mt * plan.m_tile + r;
        if (m >= M) break;
        std::copy_n(a.data() + m * K + k0, kw, block + r * an);
      }
    }
  }
  return out;
}

std::vector<int8_t> pack_b(const GemmPlan& plan, std::span<const int8_t> b) {
  const uint64_t an = plan.array_n, K = plan.shape.k, N = plan.shape.n;
  if (b.size() != checked_mul(K, N, fmt::format("pack_b: K*N of {}", shape_name(plan.shape)))) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("pack_b: B has {} elements, expected K*N = {}", b.size(), K * N));
  }
  std::vector<int8_t> out(plan.b_bytes(), 0);
  for (uint64_t nb = 0; nb < plan.n_blocks; ++nb) {
    for (uint64_t kb = 0; kb < plan.k_blocks; ++kb) {
      int8_t* tile = out.data() + (nb * plan.k_blocks + kb) * an * an;
      const uint64_t n0 = nb * an;
      const uint64_t nw = std::min(an, N - n0);
      for (uint64_t r = 0; r < an && kb * an + r < K; ++r) {
        std::copy_n(b.data() + (kb * an + r) * N + n0, nw, tile + r * an);
      }
    }
  }
  return out;
}

std::vector<int32_t> unpack_c(const GemmPlan& plan, std::span<const int32_t> c_packed) {
  const uint64_t an = plan.array_n, M = plan.shape.m, N = plan.shape.n;
  if (c_packed.size() < plan.c_bytes() / 4) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("unpack_c: {} packed elements, the plan needs {}", c_packed.size(), plan.c_bytes() / 4));
  }
  std::vector<int32_t> out(checked_size(checked_mul(M, N, fmt::format("unpack_c: M*N of {}", shape_name(plan.shape))),
                                        "unpack_c: C"));
  for (uint64_t mt = 0; mt < plan.m_tiles; ++mt) {
    const uint64_t rows = plan.rows_of_tile(mt);
    const uint64_t tile_base = mt * plan.m_tile * plan.np;
    for (uint64_t nb = 0; nb < plan.n_blocks; ++nb) {
      const int32_t* strip = c_packed.data() + tile_base + nb * rows * an;
      const uint64_t n0 = nb * an;
      const uint64_t nw = std::min(an, N - n0);
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t m = mt * plan.m_tile + r;
        if (m >= M) break;
        std::copy_n(strip + r * an, nw, out.data() + m * N + n0);
      }
    }
  }
  return out;
}

std::vector<int32_t> gemm_cpu(std::span<const int8_t> a, std::span<const int8_t> b, const GemmShape& s) {
  check_shape(s);
  check_operands("gemm_cpu", a, b, s);
  std::vector<int32_t> c(checked_size(checked_mul(s.m, s.n, fmt::format("gemm_cpu: M*N of {}", shape_name(s))),
                                      "gemm_cpu: C"),
                         0);
  std::vector<uint32_t> row(s.n);
  for (uint64_t i = 0; i < s.m; ++i) {
    std::fill(row.begin(), row.end(), 0u);
    for (uint64_t k = 0; k < s.k; ++k) {
      const auto av = static_cast<uint32_t>(static_cast<int32_t>(a[i * s.k + k]));
      if (av == 0) continue;
      const int8_t* brow = b.data() + k * s.n;
      for (uint64_t j = 0; j < s.n; ++j) row[j] += av * static_cast<uint32_t>(static_cast<int32_t>(brow[j]));
    }
    for (uint64_t j = 0; j < s.n; ++j) c[i * s.n + j] = static_cast<int32_t>(row[j]);
  }
  return c;
}

GemmResult gemm(Device& device, std::span<const int8_t> a, std::span<const int8_t> b, const GemmShape& shape,
                const GemmOptions& options) {
  check_shape(shape);
  check_operands("gemm", a, b, shape);
  GemmResult r;
  r.plan = plan_gemm(device.info().params, shape);
  const GemmPlan& p = r.plan;
  HostBuffer abuf = device.alloc(p.a_bytes(), 4096);
  HostBuffer bbuf = device.alloc(p.b_bytes(), 4096);
  HostBuffer cbuf = device.alloc(p.c_bytes(), 4096);
  {
    const std::vector<int8_t> ap = pack_a(p, a);
    const std::vector<int8_t> bp = pack_b(p, b);
    device.write(abuf, 0, ap.data(), ap.size());
    device.write(bbuf, 0, bp.data(), bp.size());
  }
  const GemmProgram prog = compile_gemm(p, abuf.addr(), bbuf.addr(), cbuf.addr());
  r.instructions = prog.code.size() + 1;

  device.clear_perf();
  const ProgressFn progress = detail::fold_progress(device, prog.fold_index, options.progress);
  const uint64_t cyc0 = device.busy_cycles();
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t fence = device.submit(prog.code, progress);
  device.wait(fence, progress);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = device.busy_cycles() - cyc0;
  if (options.progress) options.progress(1.0);

  std::vector<int32_t> cp(p.c_bytes() / 4);
  device.read(cbuf, 0, cp.data(), p.c_bytes());
  r.c = unpack_c(p, cp);
  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.min_bytes = shape.m * shape.k + shape.k * shape.n + 4 * shape.m * shape.n;
  const double macs = static_cast<double>(shape.m) * static_cast<double>(shape.k) * static_cast<double>(shape.n);
  const double peak = static_cast<double>(p.array_n) * static_cast<double>(p.array_n);
  r.utilization = r.cycles > 0 ? macs / (peak * static_cast<double>(r.cycles)) : 0.0;
  return r;
}

}  // namespace tpuw::runtime
