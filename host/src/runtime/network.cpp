// Network compiler and runner (see tpuw/runtime/network.h and docs/network_compiler.md).
//
// The sequential meaning of the program, per layer l (tag l), per M tile mt:
//   [spilled input: one COMPUTE NOP taking over the M tile's spill blocks from the STORE queue]
//   per output column block nb (a "strip", ACC buffer s mod 2, param slot s mod 2):
//     int8 layer : LOAD ACC param slot <- (bias, mult, shift) rows of (l, nb)
//     int32 layer: [NOP bridge if the ACC buffer's last reader is a STORE]
//                  LOAD ACC buffer <- bias row replicated (host stride 0)
//     per k-block kb (a "fold"):
//       LOAD WB slot <- weight tile (l, nb, kb)                   (global ring of WB slots)
//       LOAD UB chunk <- input block (mt, kb) unless it is there   (network input / spill image)
//       LOADW WB slot
//       [the previous strip's ACTIVATE and its STOREs, deferred to here so the shift overlaps it]
//       MATMUL UB chunk -> ACC buffer, swap, accumulate = (kb > 0 or int32 layer)
//     int8 layer : ACTIVATE ACC buffer -> UB chunk (resident region of tensor l+1, or a staging
//                  chunk followed by STORE -> spill image / output); keep_intermediate: STORE the
//                  resident chunk -> debug image
//     int32 layer: STORE ACC buffer -> output image
// program_builder.h turns this into tokens and the merged instruction stream.
#include "tpuw/runtime/network.h"

#include <fmt/format.h>

#include <chrono>
#include <numeric>
#include <optional>

#include "program_builder.h"
#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

using detail::Builder;
using detail::kC;
using detail::kL;
using detail::kMaxRowsField;
using detail::kS;
using detail::round_down;
using detail::round_up;
using detail::split_transfer;
using detail::Transfer;

constexpr uint32_t kMaxWSlots = 64;
constexpr uint64_t kLookahead = 8;
constexpr uint64_t kParamRows = 6;  // 2 slots x (bias, mult, shift)
constexpr uint64_t kPageAlign = 4096;

void check_network(const nn::QNetwork& net, uint64_t batch) {
  if (batch == 0) throw Error(ErrorKind::kInvalidArgument, "network: batch must be >= 1");
  if (net.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "network: no layers");
  if (net.input_features != net.layers[0].k) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("network: input_features {} != k {} of the first layer '{}'", net.input_features,
                            net.layers[0].k, net.layers[0].name));
  }
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const nn::QLayer& l = net.layers[i];
    const bool last = i + 1 == net.layers.size();
    auto bad = [&](const std::string& what) {
      return Error(ErrorKind::kInvalidArgument, fmt::format("network layer {} '{}': {}", i, l.name, what));
    };
    if (l.k == 0 || l.n == 0) throw bad(fmt::format("k={} n={}: both must be >= 1", l.k, l.n));
    if (i > 0 && l.k != net.layers[i - 1].n) {
      throw bad(fmt::format("k={} does not match n={} of the previous layer", l.k, net.layers[i - 1].n));
    }
    if (l.w_q.size() != uint64_t{l.k} * l.n) throw bad(fmt::format("w_q has {} entries, expected k*n = {}", l.w_q.size(), uint64_t{l.k} * l.n));
    if (l.bias_q.size() != l.n) throw bad(fmt::format("bias_q has {} entries, expected n = {}", l.bias_q.size(), l.n));
    if (l.int32_output && !last) throw bad("int32_output is only allowed on the last layer");
    if (!l.int32_output) {
      if (l.mult.size() != l.n || l.shift.size() != l.n) {
        throw bad(fmt::format("mult/shift have {}/{} entries, expected n = {}", l.mult.size(), l.shift.size(), l.n));
      }
      for (uint8_t s : l.shift) {
        if (s > 63) throw bad(fmt::format("shift {} is above 63", s));
      }
    }
  }
}


}  // namespace

NetworkPlan plan_network(const DeviceParams& params, const nn::QNetwork& net, uint64_t batch,
                         const NetworkPlanOptions& options) {
  check_network(net, batch);
  NetworkPlan p;
  const uint64_t an = params.array_n;
  p.array_n = params.array_n;
  p.beat = params.dma_data_w / 8;
  p.batch = batch;
  if (an == 0 || p.beat == 0) throw Error(ErrorKind::kInvalidArgument, "plan_network: bad device parameters");
  const uint64_t beat = p.beat;
  if ((an * an) % std::lcm(an, beat) != 0 || (4 * an) % beat != 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("network: array size {} with a {}-byte DMA beat is not supported (a weight tile and an "
                            "ACC row must be whole beats)",
                            an, beat));
  }
  const uint64_t m_align = std::lcm(an, beat) / an;  // ACC rows are whole beats (checked above)
  p.mp = round_up(batch, m_align);
  const size_t nl = net.layers.size();

  // M tile: two ACC strips plus the param slots; four UB chunks (the all-spilled minimum).
  const uint64_t acc_cap =
      params.acc_depth > kParamRows ? round_down(std::min<uint64_t>((params.acc_depth - kParamRows) / 2, kMaxRowsField), m_align) : 0;
  const uint64_t ub_cap = round_down(params.ub_depth / 4, m_align);
  uint64_t mt = std::min({p.mp, acc_cap, ub_cap});
  if (options.max_m_tile > 0) mt = std::min(mt, std::max(m_align, round_down(options.max_m_tile, m_align)));
  if (mt == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("network: UB depth {} / ACC depth {} cannot hold tiles of {} rows", params.ub_depth,
                            params.acc_depth, m_align));
  }
  p.m_tiles = (p.mp + mt - 1) / mt;
  p.m_tile = round_up((p.mp + p.m_tiles - 1) / p.m_tiles, m_align);

  uint64_t woff = 0, poff = 0;
  for (const nn::QLayer& l : net.layers) {
    NetworkLayerPlan lp;
    lp.k = l.k;
    lp.n = l.n;
    lp.k_blocks = (l.k + an - 1) / an;
    lp.n_blocks = (l.n + an - 1) / an;
    lp.weight_offset = woff;
    lp.param_offset = poff;
    lp.final_int32 = l.int32_output;
    lp.relu = l.relu;
    woff += lp.k_blocks * lp.n_blocks * an * an;
    poff += lp.n_blocks * 3 * 4 * an;
    p.layers.push_back(lp);
  }
  p.weight_bytes = woff;
  p.param_bytes = poff;

  // Residency: every tensor resident unless the UB cannot hold it; spill the largest first.
  const uint64_t chunks = params.ub_depth / p.m_tile;
  std::vector<uint64_t> size(nl);
  for (size_t t = 0; t < nl; ++t) size[t] = p.layers[t].k_blocks * p.m_tiles;
  p.tensor_home.assign(nl, options.force_spill ? TensorHome::kHost : TensorHome::kResident);
  const bool final_int8 = !p.layers.back().final_int32;
  uint64_t r[2] = {0, 0}, stage = 0, in_min = 0;
  for (;;) {
    r[0] = r[1] = 0;
    stage = final_int8 ? 2 : 0;
    in_min = 0;
    for (size_t t = 0; t < nl; ++t) {
      if (p.tensor_home[t] == TensorHome::kResident) {
        r[t % 2] = std::max(r[t % 2], size[t]);
      } else {
        in_min = 2;
        if (t > 0) stage = 2;
      }
    }
    if (r[0] + r[1] + stage + in_min <= chunks) break;
    size_t victim = nl;
    for (size_t t = 0; t < nl; ++t) {
      if (p.tensor_home[t] == TensorHome::kResident && (victim == nl || size[t] >= size[victim])) victim = t;
    }
    if (victim == nl) throw Error(ErrorKind::kInternal, "plan_network: no plan fits the UB");
    p.tensor_home[victim] = TensorHome::kHost;
  }
  p.ub_region_rows[0] = r[0] * p.m_tile;
  p.ub_region_rows[1] = r[1] * p.m_tile;
  p.ub_stage_row = (r[0] + r[1]) * p.m_tile;
  p.ub_in_row = p.ub_stage_row + stage * p.m_tile;
  p.in_slots = in_min > 0 ? static_cast<uint32_t>(std::min<uint64_t>(chunks - r[0] - r[1] - stage, UINT32_MAX)) : 0;
  p.tensor_ub_row.assign(nl, 0);
  p.tensor_host_offset.assign(nl, 0);
  p.debug_offset.assign(nl, 0);
  uint64_t soff = 0, doff = 0;
  for (size_t t = 0; t < nl; ++t) {
    const uint64_t bytes = p.mp * p.layers[t].k_blocks * an;
    if (p.tensor_home[t] == TensorHome::kResident) p.tensor_ub_row[t] = (t % 2 == 0) ? 0 : p.ub_region_rows[0];
    if (t == 0) {
      p.input_bytes = bytes;
      continue;
    }
    if (p.tensor_home[t] == TensorHome::kHost) {
      p.tensor_host_offset[t] = soff;
      soff += round_up(bytes, kPageAlign);
    }
    p.debug_offset[t] = doff;
    doff += round_up(bytes, kPageAlign);
  }
  p.spill_bytes = soff;
  p.debug_bytes = doff;
  p.output_bytes = p.mp * p.layers.back().n_blocks * an * (final_int8 ? 1 : 4);
  p.w_slots = std::min<uint32_t>(params.wb_depth / params.array_n, kMaxWSlots);
  if (p.w_slots == 0) throw Error(ErrorKind::kUnsupported, fmt::format("WB depth {} holds no weight tile", params.wb_depth));
  p.acc_param_row = 2 * p.m_tile;
  return p;
}

CompiledNetwork compile_network(const DeviceParams& params, const nn::QNetwork& net, uint64_t batch,
                                const NetworkAddresses& addresses, bool keep_intermediate,
                                const NetworkPlanOptions& options) {
  return compile_network(plan_network(params, net, batch, options), addresses, keep_intermediate);
}

CompiledNetwork compile_network(const NetworkPlan& p, const NetworkAddresses& a, bool keep_intermediate) {
  const uint64_t an = p.array_n;
  const uint64_t beat = p.beat;
  const size_t nl = p.layers.size();
  for (uint64_t addr : {a.input, a.weights, a.params, a.spill, a.output, a.debug}) {
    if (addr % beat != 0 || addr >= (uint64_t{1} << 32)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("compile_network: host address 0x{:x} is not {}-byte aligned or above 4 GiB", addr, beat));
    }
  }
  // Resources: WB slots, UB chunks, 2 ACC buffers, 2 param slots, spilled host blocks.
  const uint64_t chunks = (p.ub_in_row + uint64_t{p.in_slots} * p.m_tile + p.m_tile - 1) / p.m_tile;
  const size_t wb0 = 0;
  const size_t ub0 = wb0 + p.w_slots;
  const size_t acc0 = ub0 + chunks;
  const size_t par0 = acc0 + 2;
  const size_t host0 = par0 + 2;
  std::vector<size_t> host_base(nl, 0);
  size_t nres = host0;
  for (size_t t = 1; t < nl; ++t) {
    host_base[t] = nres;
    if (p.tensor_home[t] == TensorHome::kHost) nres += p.layers[t].k_blocks * p.m_tiles;
  }
  Builder b(nres);
  auto chunk_of = [&](uint64_t row) { return ub0 + row / p.m_tile; };
  // Byte offset of block (mt, kb) of a tensor with kbn k-blocks, in the input/spill layout.
  auto block_offset = [&](uint64_t mt, uint64_t kb, uint64_t kbn, uint64_t elem) {
    return elem * (mt * p.m_tile * kbn * an + kb * p.rows_of_tile(mt) * an);
  };

  std::vector<int64_t> content(chunks, -1);
  uint64_t wcount = 0, strip = 0, stage_count = 0, in_ring = 0;

  struct Pending {
    isa::Instr act;
    std::vector<size_t> reads, writes;
    std::vector<std::pair<Transfer, std::vector<size_t>>> stores;  // UB -> host, reads chunk, writes
    std::vector<size_t> store_reads;
    int32_t tag = 0;
  };
  std::optional<Pending> pending;
  auto flush = [&] {
    if (!pending) return;
    b.set_tag(pending->tag);
    b.emit(kC, pending->act, pending->reads, pending->writes);
    for (auto& [t, w] : pending->stores) {
      b.emit(kS, detail::dma_instr(spec::Opcode::kStore, spec::Mem::kUb, t), pending->store_reads, w);
    }
    pending.reset();
  };

  for (size_t l = 0; l < nl; ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const bool last = l + 1 == nl;
    const TensorHome in_home = p.tensor_home[l];
    const TensorHome out_home = last ? TensorHome::kHost : p.tensor_home[l + 1];
    const auto tag = static_cast<int32_t>(l);
    for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
      const uint64_t rows = p.rows_of_tile(mt);
      if (in_home == TensorHome::kHost && l > 0) {
        flush();
        b.set_tag(tag);
        std::vector<size_t> blocks;
        for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) blocks.push_back(host_base[l] + mt * lp.k_blocks + kb);
        b.bridge(blocks);
      }
      for (uint64_t nb = 0; nb < lp.n_blocks; ++nb, ++strip) {
        b.set_tag(tag);
        const uint64_t buf = strip % 2;
        const uint64_t acc_row = buf * p.m_tile;
        const uint64_t prow = p.acc_param_row + 3 * (strip % 2);
        const uint64_t param_addr = a.params + lp.param_offset + nb * 12 * an;
        if (lp.final_int32) {
          b.bridge({acc0 + buf});
          b.set_tag(tag);
          b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, Transfer{acc_row, param_addr, rows, 4 * an, 0}),
                 {}, {acc0 + buf});
        } else {
          for (const Transfer& t : split_transfer(prow, param_addr, 12 * an, 4 * an, beat)) {
            b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {par0 + strip % 2});
          }
        }
        for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) {
          b.set_tag(tag);
          const uint64_t wslot = wcount++ % p.w_slots;
          const uint64_t tile_addr = a.weights + lp.weight_offset + (nb * lp.k_blocks + kb) * an * an;
          for (const Transfer& t : split_transfer(wslot * an, tile_addr, an * an, an, beat)) {
            b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {wb0 + wslot});
          }
          // Input block (mt, kb) of tensor l.
          uint64_t ub_row = 0;
          const auto id = static_cast<int64_t>((uint64_t{l} << 44) | (mt << 22) | kb);
          if (in_home == TensorHome::kResident) {
            ub_row = p.tensor_ub_row[l] + (mt * lp.k_blocks + kb) * p.m_tile;
            if (l == 0 && content[ub_row / p.m_tile] != id) {
              const uint64_t src = a.input + block_offset(mt, kb, lp.k_blocks, 1);
              for (const Transfer& t : split_transfer(ub_row, src, rows * an, an, beat)) {
                b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {chunk_of(ub_row)});
              }
              content[ub_row / p.m_tile] = id;
            }
          } else {
            const uint64_t slot = lp.k_blocks <= p.in_slots ? kb : (in_ring++ % p.in_slots);
            ub_row = p.ub_in_row + slot * p.m_tile;
            if (content[ub_row / p.m_tile] != id) {
              const uint64_t src = l == 0 ? a.input + block_offset(mt, kb, lp.k_blocks, 1)
                                          : a.spill + p.tensor_host_offset[l] + block_offset(mt, kb, lp.k_blocks, 1);
              std::vector<size_t> reads;
              if (l > 0) reads.push_back(host_base[l] + mt * lp.k_blocks + kb);
              for (const Transfer& t : split_transfer(ub_row, src, rows * an, an, beat)) {
                b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), reads, {chunk_of(ub_row)});
              }
              content[ub_row / p.m_tile] = id;
            }
          }
          isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
          lw.set("wb_addr", wslot * an);
          b.emit(kC, std::move(lw), {wb0 + wslot}, {});
          flush();
          b.set_tag(tag);
          isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
          mm.set("accumulate", (kb > 0 || lp.final_int32) ? 1 : 0);
          mm.set("swap", 1);
          mm.set("ub_addr", ub_row);
          mm.set("acc_addr", acc_row);
          mm.set("rows", rows);
          b.emit(kC, std::move(mm), {chunk_of(ub_row)}, {acc0 + buf}, /*is_matmul=*/true);
        }
        // End of the strip.
        if (lp.final_int32) {
          const uint64_t dst = a.output + 4 * (mt * p.m_tile * lp.n_blocks * an + nb * rows * an);
          for (const Transfer& t : split_transfer(acc_row, dst, rows * 4 * an, 4 * an, beat)) {
            b.emit(kS, detail::dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {acc0 + buf}, {});
          }
          continue;
        }
        Pending pd;
        pd.tag = tag;
        uint64_t dst_row = 0;
        if (out_home == TensorHome::kResident) {
          dst_row = p.tensor_ub_row[l + 1] + (mt * lp.n_blocks + nb) * p.m_tile;
          if (keep_intermediate) {
            const uint64_t dst = a.debug + p.debug_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
            for (const Transfer& t : split_transfer(dst_row, dst, rows * an, an, beat)) pd.stores.push_back({t, {}});
          }
        } else {
          dst_row = p.ub_stage_row + (stage_count++ % 2) * p.m_tile;
          const uint64_t dst = last ? a.output + block_offset(mt, nb, lp.n_blocks, 1)
                                    : a.spill + p.tensor_host_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
          std::vector<size_t> writes;
          if (!last) writes.push_back(host_base[l + 1] + mt * lp.n_blocks + nb);
          for (const Transfer& t : split_transfer(dst_row, dst, rows * an, an, beat)) pd.stores.push_back({t, writes});
          if (!last && keep_intermediate) {
            const uint64_t dd = a.debug + p.debug_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
            for (const Transfer& t : split_transfer(dst_row, dd, rows * an, an, beat)) pd.stores.push_back({t, {}});
          }
        }
        isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
        act.set("relu", lp.relu ? 1 : 0);
        act.set("bias", 1);
        act.set("acc_addr", acc_row);
        act.set("ub_addr", dst_row);
        act.set("rows", rows);
        act.set("bias_addr", prow);
        act.set("qparam_addr", prow + 1);
        pd.act = std::move(act);
        pd.reads = {acc0 + buf, par0 + strip % 2};
        pd.writes = {chunk_of(dst_row)};
        pd.store_reads = {chunk_of(dst_row)};
        pending = std::move(pd);
      }
    }
  }
  flush();

  detail::MergedProgram merged = detail::merge_program(b, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
  CompiledNetwork out;
  out.plan = p;
  out.keep_intermediate = keep_intermediate;
  out.layer_stats.assign(nl, {});
  for (size_t i = 0; i < merged.code.size(); ++i) {
    LayerProgramStats& s = out.layer_stats[static_cast<size_t>(merged.tag[i])];
    const isa::Instr in = isa::decode(merged.code[i]);
    ++s.instructions;
    switch (static_cast<spec::Opcode>(in.opcode)) {
      case spec::Opcode::kLoad:
        ++s.loads;
        s.load_bytes += in.get("rows") * in.get("row_bytes");
        break;
      case spec::Opcode::kStore:
        ++s.stores;
        s.store_bytes += in.get("rows") * in.get("row_bytes");
        break;
      case spec::Opcode::kLoadw:
        ++s.loadws;
        break;
      case spec::Opcode::kMatmul: {
        const uint64_t rows = in.get("rows");
        ++s.matmuls;
        s.matmul_rows += rows;
        s.occupancy += rows + (rows < an + 1 ? an + 1 - rows : 0);
        break;
      }
      case spec::Opcode::kActivate:
        ++s.activates;
        s.occupancy += in.get("rows") + 2 * an + 2 + 6;
        break;
      case spec::Opcode::kNop:
        ++s.nops;
        s.occupancy += 1;
        break;
      default:
        break;
    }
  }
  out.code = std::move(merged.code);
  out.fold_index = std::move(merged.fold_index);
  return out;
}

std::vector<int8_t> pack_network_input(const NetworkPlan& p, std::span<const int8_t> x) {
  const uint64_t an = p.array_n, K = p.layers[0].k, kbn = p.layers[0].k_blocks;
  if (x.size() != p.batch * K) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("network input has {} elements, expected batch*k = {}*{}", x.size(), p.batch, K));
  }
  std::vector<int8_t> out(p.input_bytes, 0);
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t kb = 0; kb < kbn; ++kb) {
      int8_t* block = out.data() + mt * p.m_tile * kbn * an + kb * rows * an;
      const uint64_t k0 = kb * an, kw = std::min(an, K - k0);
      for (uint64_t r = 0; r < rows && mt * p.m_tile + r < p.batch; ++r) {
        std::copy_n(x.data() + (mt * p.m_tile + r) * K + k0, kw, block + r * an);
      }
    }
  }
  return out;
}

std::vector<int8_t> unpack_network_tensor(const NetworkPlan& p, std::span<const int8_t> image, uint64_t features) {
  const uint64_t an = p.array_n, kbn = (features + an - 1) / an;
  std::vector<int8_t> out(p.batch * features);
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t kb = 0; kb < kbn; ++kb) {
      const int8_t* block = image.data() + mt * p.m_tile * kbn * an + kb * rows * an;
      const uint64_t k0 = kb * an, kw = std::min(an, features - k0);
      for (uint64_t r = 0; r < rows && mt * p.m_tile + r < p.batch; ++r) {
        std::copy_n(block + r * an, kw, out.data() + (mt * p.m_tile + r) * features + k0);
      }
    }
  }
  return out;
}

std::vector<int32_t> unpack_network_output(const NetworkPlan& p, std::span<const int32_t> image) {
  const uint64_t an = p.array_n, N = p.layers.back().n, nbn = p.layers.back().n_blocks;
  std::vector<int32_t> out(p.batch * N);
  for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
    const uint64_t rows = p.rows_of_tile(mt);
    for (uint64_t nb = 0; nb < nbn; ++nb) {
      const int32_t* strip = image.data() + mt * p.m_tile * nbn * an + nb * rows * an;
      const uint64_t n0 = nb * an, nw = std::min(an, N - n0);
      for (uint64_t r = 0; r < rows && mt * p.m_tile + r < p.batch; ++r) {
        std::copy_n(strip + r * an, nw, out.data() + (mt * p.m_tile + r) * N + n0);
      }
    }
  }
  return out;
}

std::vector<int8_t> pack_network_weights(const NetworkPlan& p, const nn::QNetwork& net) {
  const uint64_t an = p.array_n;
  std::vector<int8_t> out(p.weight_bytes, 0);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const std::vector<int8_t>& w = net.layers[l].w_q;
    for (uint64_t nb = 0; nb < lp.n_blocks; ++nb) {
      for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) {
        int8_t* tile = out.data() + lp.weight_offset + (nb * lp.k_blocks + kb) * an * an;
        const uint64_t n0 = nb * an, nw = std::min(an, lp.n - n0);
        for (uint64_t r = 0; r < an && kb * an + r < lp.k; ++r) {
          std::copy_n(w.data() + (kb * an + r) * lp.n + n0, nw, tile + r * an);
        }
      }
    }
  }
  return out;
}

std::vector<int32_t> pack_network_params(const NetworkPlan& p, const nn::QNetwork& net) {
  const uint64_t an = p.array_n;
  std::vector<int32_t> out(p.param_bytes / 4, 0);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const nn::QLayer& q = net.layers[l];
    for (uint64_t nb = 0; nb < lp.n_blocks; ++nb) {
      int32_t* rows = out.data() + lp.param_offset / 4 + nb * 3 * an;
      for (uint64_t j = 0; j < an && nb * an + j < lp.n; ++j) {
        const uint64_t c = nb * an + j;
        rows[j] = q.bias_q[c];
        if (!lp.final_int32) {
          rows[an + j] = q.mult[c];
          rows[2 * an + j] = q.shift[c];
        }
      }
    }
  }
  return out;
}

NetworkWeights upload_network_weights(Device& device, const nn::QNetwork& net) {
  // The weight and param layouts depend on the layers and ArrayN only: any batch gives them.
  const NetworkPlan p = plan_network(device.info().params, net, 1);
  NetworkWeights w;
  w.array_n = p.array_n;
  w.weight_bytes = p.weight_bytes;
  w.param_bytes = p.param_bytes;
  w.weights = device.alloc(std::max<uint64_t>(p.weight_bytes, 1), kPageAlign);
  w.params = device.alloc(std::max<uint64_t>(p.param_bytes, 1), kPageAlign);
  const std::vector<int8_t> wi = pack_network_weights(p, net);
  const std::vector<int32_t> pi = pack_network_params(p, net);
  device.write(w.weights, 0, wi.data(), wi.size());
  device.write(w.params, 0, pi.data(), pi.size() * 4);
  return w;
}

NetworkBuffers alloc_network_buffers(Device& device, const NetworkPlan& p, bool keep_intermediate) {
  auto alloc = [&](uint64_t bytes) { return device.alloc(std::max<uint64_t>(bytes, 1), kPageAlign); };
  NetworkBuffers b;
  b.input_bytes = p.input_bytes;
  b.spill_bytes = p.spill_bytes;
  b.output_bytes = p.output_bytes;
  b.debug_bytes = keep_intermediate ? p.debug_bytes : 0;
  b.input = alloc(b.input_bytes);
  b.spill = alloc(b.spill_bytes);
  b.output = alloc(b.output_bytes);
  b.debug = alloc(b.debug_bytes);
  return b;
}

NetworkAddresses network_addresses(const NetworkWeights& w, const NetworkBuffers& b) {
  return NetworkAddresses{b.input.addr(), w.weights.addr(), w.params.addr(),
                          b.spill.addr(), b.output.addr(),  b.debug.addr()};
}

namespace {
void check_buffers(const CompiledNetwork& prog, const NetworkBuffers& b) {
  const NetworkPlan& p = prog.plan;
  const uint64_t debug = prog.keep_intermediate ? p.debug_bytes : 0;
  if (b.input_bytes < p.input_bytes || b.spill_bytes < p.spill_bytes || b.output_bytes < p.output_bytes ||
      b.debug_bytes < debug) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("network buffers (input {} spill {} output {} debug {} bytes) are smaller than the "
                            "program's batch {} needs (input {} spill {} output {} debug {})",
                            b.input_bytes, b.spill_bytes, b.output_bytes, b.debug_bytes, p.batch, p.input_bytes,
                            p.spill_bytes, p.output_bytes, debug));
  }
}
}  // namespace

uint32_t submit_network(Device& device, const CompiledNetwork& prog, const NetworkBuffers& buffers,
                        std::span<const int8_t> input_q, const ProgressFn& progress) {
  check_buffers(prog, buffers);
  const std::vector<int8_t> in_img = pack_network_input(prog.plan, input_q);
  device.write(buffers.input, 0, in_img.data(), in_img.size());
  return device.submit(prog.code, progress);
}

void read_network_output(Device& device, const CompiledNetwork& prog, const NetworkBuffers& buffers,
                         NetworkRunResult& r) {
  check_buffers(prog, buffers);
  const NetworkPlan& p = prog.plan;
  r.plan = p;
  if (p.layers.back().final_int32) {
    std::vector<int32_t> img(p.output_bytes / 4);
    device.read(buffers.output, 0, img.data(), p.output_bytes);
    r.output_i32 = unpack_network_output(p, img);
  } else {
    std::vector<int8_t> img(p.output_bytes);
    device.read(buffers.output, 0, img.data(), p.output_bytes);
    r.output_q = unpack_network_tensor(p, img, p.layers.back().n);
  }
  r.layer_outputs.clear();
  if (prog.keep_intermediate) {
    for (size_t t = 1; t < p.layers.size(); ++t) {
      std::vector<int8_t> img(p.mp * p.layers[t].k_blocks * p.array_n);
      device.read(buffers.debug, p.debug_offset[t], img.data(), img.size());
      r.layer_outputs.push_back(unpack_network_tensor(p, img, p.layers[t].k));
    }
  }
}

NetworkRunResult run_network(Device& device, const nn::QNetwork& net, std::span<const int8_t> input_q,
                             uint64_t batch, const NetworkOptions& options) {
  NetworkRunResult r;
  r.plan = plan_network(device.info().params, net, batch, options.plan);
  const NetworkPlan& p = r.plan;
  if (input_q.size() != p.batch * p.layers[0].k) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("network input has {} elements, expected batch*k = {}*{}",
                                                         input_q.size(), p.batch, p.layers[0].k));
  }
  const NetworkBuffers buffers = alloc_network_buffers(device, p, options.keep_intermediate);
  const NetworkWeights weights = upload_network_weights(device, net);
  const CompiledNetwork prog = compile_network(p, network_addresses(weights, buffers), options.keep_intermediate);
  r.instructions = prog.code.size() + 1;

  device.clear_perf();
  const uint64_t base = device.instructions_submitted();
  ProgressFn progress;
  if (options.progress) {
    progress = [&] {
      const uint64_t consumed = device.instructions_consumed() - base;
      const auto done =
          std::lower_bound(prog.fold_index.begin(), prog.fold_index.end(), consumed) - prog.fold_index.begin();
      options.progress(prog.fold_index.empty() ? 1.0
                                               : static_cast<double>(done) / static_cast<double>(prog.fold_index.size()));
    };
  }
  const uint64_t cyc0 = device.busy_cycles();
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t fence = submit_network(device, prog, buffers, input_q, progress);
  device.wait(fence, progress);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = device.busy_cycles() - cyc0;
  r.sim_cycles_per_s = r.wall_s > 0 ? static_cast<double>(r.sim_cycles) / r.wall_s : 0.0;
  if (options.progress) options.progress(1.0);

  const size_t nl = p.layers.size();
  read_network_output(device, prog, buffers, r);

  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.rd_bytes = r.perf.rd_bytes;
  r.wr_bytes = r.perf.wr_bytes;
  const double peak = static_cast<double>(p.array_n) * static_cast<double>(p.array_n);
  uint64_t occ_total = 0;
  for (const LayerProgramStats& s : prog.layer_stats) occ_total += s.occupancy;
  auto share = [&](uint64_t total, uint64_t occ) {
    return occ_total == 0 ? 0
                          : static_cast<uint64_t>(static_cast<double>(total) * static_cast<double>(occ) /
                                                  static_cast<double>(occ_total) + 0.5);
  };
  uint64_t cycles_left = r.cycles;
  for (size_t l = 0; l < nl; ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const LayerProgramStats& s = prog.layer_stats[l];
    LayerReport lr;
    lr.name = net.layers[l].name;
    lr.m = batch;
    lr.k = lp.k;
    lr.n = lp.n;
    lr.cycles = l + 1 == nl ? cycles_left : std::min(cycles_left, share(r.cycles, s.occupancy));
    cycles_left -= lr.cycles;
    const uint64_t macs = batch * lp.k * lp.n;
    r.macs += macs;
    lr.utilization = lr.cycles > 0 ? static_cast<double>(macs) / (peak * static_cast<double>(lr.cycles)) : 0.0;
    lr.rd_bytes = s.load_bytes + 16 * s.instructions;
    lr.wr_bytes = s.store_bytes;
    lr.min_bytes = lp.k * lp.n + batch * lp.k + batch * lp.n * (lp.final_int32 ? 4 : 1);
    lr.mxu_active = s.matmul_rows;
    lr.weight_stall = share(r.perf.weight_stall, s.occupancy);
    lr.weight_shift = share(r.perf.weight_shift, s.occupancy);
    lr.dma_wait = share(r.perf.dma_wait, s.occupancy);
    lr.act_busy = share(r.perf.act_busy, s.occupancy);
    lr.program = s;
    r.layers.push_back(std::move(lr));
  }
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  uint64_t wbytes = 0;
  for (const NetworkLayerPlan& lp : p.layers) wbytes += lp.k * lp.n;
  r.min_bytes = wbytes + batch * p.layers[0].k + batch * p.layers.back().n * (p.layers.back().final_int32 ? 4 : 1);
  return r;
}

}  // namespace tpuw::runtime
