// GEMM tiling and program generation (see tpuw/runtime/gemm.h).
//
// How the program is built
// ------------------------
// 1. Sequential meaning. The compiler first writes the program as if it ran one instruction at a
//    time: for each M tile, for each output column strip, for each K block ("fold"):
//      LOAD  weight tile (k, n)          -> WB slot  (t mod w_slots)
//      LOAD  A block (m, k) if not there -> UB slot  (resident: k; streaming: ring)
//      LOADW WB slot
//      MATMUL UB slot -> ACC buffer (strip mod 2), swap=1, accumulate = k > 0
//    and after the last fold of a strip: STORE ACC buffer -> C strip.
//    Each instruction records the buffers (WB slot, UB slot, ACC buffer) it reads and writes.
//
// 2. Hazards to tokens. Every cross-queue read-after-write and write-after-read on a buffer becomes
//    a requirement "instruction X of queue Q may issue only after instruction Y of queue P is done"
//    (P, Q adjacent: LOAD<->COMPUTE, COMPUTE<->STORE). Queues run in order and tokens are counters,
//    so the k-th pop of a channel is satisfied by its k-th push: walking the consumer queue, a pop
//    is placed only where the requirement exceeds what earlier pops already guarantee, and the
//    matching push on the producer at the required index (strictly increasing, one push per
//    instruction and channel). For the COMPUTE -> LOAD "buffer free" channel the push may be placed
//    later than required (but still before the reloaded buffer's first use): this bounds the
//    tokens in flight well below the 8-bit counters without delaying any load, because a load is
//    not dispatched earlier than that anyway (see 3).
//
// 3. Program order. The three queues are merged into one instruction stream: compute instructions
//    in order; before each, the loads whose first consumer is at most kLookahead compute
//    instructions ahead (and whose pop partner is already in the stream); after each, every store
//    whose pop partner is in the stream. Every pop therefore follows its push in program order,
//    which makes the program deadlock-free with any queue depth: the earliest unfinished
//    instruction always has its tokens and is at the head of its queue.
#include "tpuw/runtime/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>

#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

constexpr uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
constexpr uint64_t round_down(uint64_t x, uint64_t m) { return x / m * m; }

constexpr uint32_t kMaxWSlots = 64;      // WB tiles in the weight ring (prefetch depth is bounded by
                                         // the program order anyway, see kLookahead)
constexpr uint64_t kLookahead = 8;       // compute instructions a load is placed ahead of its use
constexpr uint64_t kMaxHostRow = 4096;   // bytes per DMA host row: one 4 KiB page = one burst
constexpr uint64_t kMaxRowsField = 0xFFFF;

enum Q : int { kL = 0, kC = 1, kS = 2 };

struct Op {
  isa::Instr instr;
  std::array<int64_t, 3> req{-1, -1, -1};  // must wait for queue q's instruction req[q] to be done
  bool is_matmul = false;
};

struct Resource {
  int last_writer_q = -1;
  int64_t last_writer = -1;
  std::array<int64_t, 3> readers{-1, -1, -1};
};

class Builder {
 public:
  explicit Builder(size_t num_resources) : res_(num_resources) {}

  void emit(Q q, isa::Instr instr, std::initializer_list<size_t> reads, std::initializer_list<size_t> writes,
            bool is_matmul = false) {
    Op op;
    op.instr = std::move(instr);
    op.is_matmul = is_matmul;
    const auto idx = static_cast<int64_t>(ops_[q].size());
    for (size_t r : reads) {
      Resource& s = res_[r];
      if (s.last_writer_q >= 0 && s.last_writer_q != q) {
        op.req[s.last_writer_q] = std::max(op.req[s.last_writer_q], s.last_writer);
      }
      s.readers[q] = idx;
    }
    for (size_t r : writes) {
      Resource& s = res_[r];
      for (int p = 0; p < 3; ++p) {
        if (p != q && s.readers[p] >= 0) op.req[p] = std::max(op.req[p], s.readers[p]);
      }
      if (s.last_writer_q >= 0 && s.last_writer_q != q) {
        op.req[s.last_writer_q] = std::max(op.req[s.last_writer_q], s.last_writer);
      }
      s.last_writer_q = q;
      s.last_writer = idx;
      s.readers = {-1, -1, -1};
    }
    for (int p = 0; p < 3; ++p) {
      if (op.req[p] >= 0 && std::abs(p - static_cast<int>(q)) != 1) {
        throw Error(ErrorKind::kInternal, "gemm compiler: dependency between non-adjacent queues");
      }
    }
    ops_[q].push_back(std::move(op));
  }

  std::array<std::vector<Op>, 3>& ops() { return ops_; }

 private:
  std::vector<Resource> res_;
  std::array<std::vector<Op>, 3> ops_;
};

// Token channel between producer queue P and consumer queue Q. Sets pop flags on consumers and
// push flags on producers; returns for each consumer op the producer index its pop is matched
// with (-1 = no pop). `latest_push(j, need)` may move the push later than `need`.
template <typename Later>
std::vector<int64_t> assign_channel(std::vector<Op>& producers, std::vector<Op>& consumers, Q p,
                                    const char* pop_flag, const char* push_flag, Later latest_push) {
  (void)p;
  std::vector<int64_t> partner(consumers.size(), -1);
  int64_t guaranteed = -1;
  int64_t need = -1;
  for (size_t j = 0; j < consumers.size(); ++j) {
    need = std::max(need, consumers[j].req[p]);
    if (need <= guaranteed) continue;
    int64_t at = std::max(need, latest_push(j, need));
    at = std::min<int64_t>(at, static_cast<int64_t>(producers.size()) - 1);
    if (at <= guaranteed) at = need;
    isa::Instr& c = consumers[j].instr;
    if (std::string_view(pop_flag) == "pop_prev") c.pop_prev = true; else c.pop_next = true;
    isa::Instr& pr = producers[static_cast<size_t>(at)].instr;
    if (std::string_view(push_flag) == "push_prev") pr.push_prev = true; else pr.push_next = true;
    partner[j] = at;
    guaranteed = at;
  }
  return partner;
}

uint64_t lcm64(uint64_t a, uint64_t b) { return std::lcm(a, b); }

// One DMA transfer of `bytes` contiguous host bytes into/out of consecutive local rows, split into
// as few LOAD/STORE instructions as the field widths allow, host rows of at most 4 KiB.
struct Transfer {
  uint64_t local_row;
  uint64_t host_addr;
  uint64_t rows;
  uint64_t row_bytes;
};

std::vector<Transfer> split_transfer(uint64_t local_row, uint64_t host_addr, uint64_t bytes, uint64_t local_row_bytes,
                                     uint64_t beat) {
  const uint64_t unit = lcm64(local_row_bytes, beat);
  if (bytes % unit != 0 || unit > 0xFFFF) {
    throw Error(ErrorKind::kInternal,
                fmt::format("gemm compiler: transfer of {} bytes is not a multiple of {}", bytes, unit));
  }
  const uint64_t count = bytes / unit;
  uint64_t d = std::max<uint64_t>(1, std::min(count, kMaxHostRow / unit));
  while (count % d != 0) --d;
  const uint64_t row_bytes = unit * d;
  uint64_t rows_left = count / d;
  std::vector<Transfer> out;
  while (rows_left > 0) {
    const uint64_t rows = std::min(rows_left, kMaxRowsField);
    out.push_back({local_row, host_addr, rows, row_bytes});
    local_row += rows * row_bytes / local_row_bytes;
    host_addr += rows * row_bytes;
    rows_left -= rows;
  }
  return out;
}

isa::Instr dma_instr(spec::Opcode op, spec::Mem mem, const Transfer& t) {
  isa::Instr i = isa::make_instr(op);
  i.set("mem", static_cast<uint64_t>(mem));
  i.set("local_addr", t.local_row);
  i.set("host_addr", t.host_addr);
  i.set("rows", t.rows);
  i.set("row_bytes", t.row_bytes);
  i.set("host_stride", t.row_bytes);
  return i;
}

void check_shape(const GemmShape& s) {
  if (s.m == 0 || s.k == 0 || s.n == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("GEMM shape M={} K={} N={}: every dimension must be >= 1", s.m, s.k, s.n));
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
  p.mp = round_up(shape.m, m_align);
  p.kp = round_up(shape.k, an);
  p.np = round_up(shape.n, an);
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
  p.folds = p.m_tiles * p.n_blocks * p.k_blocks;
  return p;
}

GemmProgram compile_gemm(const GemmPlan& plan, uint64_t a_addr, uint64_t b_addr, uint64_t c_addr) {
  const uint64_t an = plan.array_n;
  const uint64_t beat = plan.beat;
  for (uint64_t addr : {a_addr, b_addr, c_addr}) {
    if (addr % beat != 0 || addr + std::max({plan.a_bytes(), plan.b_bytes(), plan.c_bytes()}) > (uint64_t{1} << 32)) {
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

  auto& ops = b.ops();
  std::vector<Op>& L = ops[kL];
  std::vector<Op>& C = ops[kC];
  std::vector<Op>& S = ops[kS];

  // First compute consumer of every load (from the running maximum of the compute requirements).
  std::vector<int64_t> first_use(L.size(), static_cast<int64_t>(C.size()));
  {
    int64_t covered = -1;
    for (size_t i = 0; i < C.size(); ++i) {
      while (covered < C[i].req[kL]) first_use[static_cast<size_t>(++covered)] = static_cast<int64_t>(i);
    }
  }
  const auto no_delay = [](size_t, int64_t need) { return need; };
  // Frees (COMPUTE -> LOAD): push as late as allowed, up to kFreeSlack before the first use.
  const auto free_slack = static_cast<int64_t>(2 * kLookahead + 24);
  const std::vector<int64_t> l_pop =
      assign_channel(C, L, kC, "pop_next", "push_prev", [&](size_t j, int64_t need) {
        return std::max(need, first_use[j] - free_slack);
      });
  const std::vector<int64_t> c_pop_l = assign_channel(L, C, kL, "pop_prev", "push_next", no_delay);
  const std::vector<int64_t> c_pop_s = assign_channel(S, C, kS, "pop_next", "push_prev", no_delay);
  const std::vector<int64_t> s_pop = assign_channel(C, S, kC, "pop_prev", "push_next", no_delay);

  // Merge into program order.
  GemmProgram prog;
  prog.plan = plan;
  prog.code.reserve(L.size() + C.size() + S.size());
  int64_t emitted_c = -1, emitted_l = -1, emitted_s = -1;
  size_t li = 0, si = 0;
  auto emit_stores = [&] {
    while (si < S.size() && s_pop[si] <= emitted_c) {
      prog.code.push_back(isa::encode(S[si].instr));
      ++prog.stores;
      emitted_s = static_cast<int64_t>(si++);
    }
  };
  for (size_t i = 0; i < C.size(); ++i) {
    while (li < L.size() && first_use[li] <= static_cast<int64_t>(i + kLookahead) && l_pop[li] <= emitted_c) {
      prog.code.push_back(isa::encode(L[li].instr));
      ++prog.loads;
      emitted_l = static_cast<int64_t>(li++);
    }
    if (c_pop_l[i] > emitted_l || c_pop_s[i] > emitted_s) {
      throw Error(ErrorKind::kInternal, "gemm compiler: a pop precedes its push in program order");
    }
    if (C[i].is_matmul) {
      prog.fold_index.push_back(prog.code.size());
      ++prog.matmuls;
    } else {
      ++prog.loadws;
    }
    prog.code.push_back(isa::encode(C[i].instr));
    emitted_c = static_cast<int64_t>(i);
    emit_stores();
  }
  if (li != L.size() || si != S.size()) {
    throw Error(ErrorKind::kInternal, "gemm compiler: instructions left over after the merge");
  }
  return prog;
}

std::vector<int8_t> pack_a(const GemmPlan& plan, std::span<const int8_t> a) {
  const uint64_t an = plan.array_n, K = plan.shape.k, M = plan.shape.m;
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
  std::vector<int32_t> out(M * N);
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
  std::vector<int32_t> c(s.m * s.n, 0);
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
  if (a.size() != shape.m * shape.k || b.size() != shape.k * shape.n) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("gemm: A has {} elements and B {}, expected M*K = {} and K*N = {}", a.size(), b.size(),
                            shape.m * shape.k, shape.k * shape.n));
  }
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
  const uint64_t base = device.instructions_submitted();
  ProgressFn progress;
  if (options.progress) {
    progress = [&] {
      const uint64_t consumed = device.instructions_consumed() - base;
      const auto done = std::lower_bound(prog.fold_index.begin(), prog.fold_index.end(), consumed) -
                        prog.fold_index.begin();
      options.progress(static_cast<double>(done) / static_cast<double>(prog.fold_index.size()));
    };
  }
  const uint64_t cyc0 = device.backend().cycles();
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t fence = device.submit(prog.code, progress);
  device.wait(fence, progress);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = device.backend().cycles() - cyc0;
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
