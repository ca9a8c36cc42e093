// Network compiler, part 2 of 4: program emission (see tpuw/runtime/network.h and
// docs/network_compiler.md).
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

#include <functional>
#include <optional>

#include "network_internal.h"
#include "program_builder.h"
#include "tpuw/error.h"

namespace tpuw::runtime {

using detail::Builder;
using detail::kC;
using detail::kL;
using detail::kS;
using detail::split_transfer;
using detail::Transfer;
using netdetail::kLookahead;

namespace netdetail {

std::vector<LayerProgramStats> layer_stats(const detail::MergedProgram& merged, size_t layers, uint64_t an) {
  std::vector<LayerProgramStats> stats(layers);
  for (size_t i = 0; i < merged.code.size(); ++i) {
    LayerProgramStats& s = stats.at(static_cast<size_t>(merged.tag[i]));
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
        s.activate_rows += in.get("rows");
        s.occupancy += in.get("rows") + 2 * an + 2 + 6;
        break;
      case spec::Opcode::kVector:
        ++s.vectors;
        s.vector_rows += in.get("rows");
        s.occupancy += in.get("rows") + 4;
        break;
      case spec::Opcode::kNop:
        ++s.nops;
        s.occupancy += 1;
        break;
      default:
        break;
    }
  }
  return stats;
}

}  // namespace netdetail

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
  // Resources: WB slots, UB chunks, 2 ACC buffers + the fused layers' strip buffers, 2 param slots,
  // spilled host blocks.
  const uint64_t chunks = (p.ub_in_row + uint64_t{p.in_slots} * p.m_tile + p.m_tile - 1) / p.m_tile;
  const uint64_t acc_bufs = p.acc_param_row / p.m_tile;  // 2 + the widest fused layer's strips
  const size_t wb0 = 0;
  const size_t ub0 = wb0 + p.w_slots;
  const size_t acc0 = ub0 + chunks;
  const size_t par0 = acc0 + acc_bufs;
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

  // Start of a strip (layer l, output block nb) accumulating in ACC buffer `buf` (rows from
  // buf * m_tile) with param slot `ps`: the params, or the bias preload of an int32 layer.
  auto begin_strip = [&](size_t l, uint64_t rows, uint64_t nb, uint64_t buf, uint64_t ps) {
    const NetworkLayerPlan& lp = p.layers[l];
    b.set_tag(static_cast<int32_t>(l));
    const uint64_t acc_row = buf * p.m_tile;
    const uint64_t prow = p.acc_param_row + p.param_slot_rows * ps;
    const uint64_t param_addr = a.params + lp.param_offset + nb * lp.param_rows * 4 * an;
    if (lp.final_int32) {
      b.bridge({acc0 + buf});
      b.set_tag(static_cast<int32_t>(l));
      b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, Transfer{acc_row, param_addr, rows, 4 * an, 0}),
             {}, {acc0 + buf});
    } else {
      for (const Transfer& t : split_transfer(prow, param_addr, lp.param_rows * 4 * an, 4 * an, beat)) {
        b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kAcc, t), {}, {par0 + ps});
      }
    }
  };
  // One fold: weight tile (nb, kb) of layer l, `load_input` (LOADs of the UB block, if any), LOADW,
  // the deferred ACTIVATE, MATMUL UB rows from `ub_row` into ACC buffer `buf`.
  auto fold = [&](size_t l, uint64_t rows, uint64_t nb, uint64_t kb, uint64_t ub_row, uint64_t buf,
                  const auto& load_input) {
    const NetworkLayerPlan& lp = p.layers[l];
    const auto tag = static_cast<int32_t>(l);
    b.set_tag(tag);
    const uint64_t wslot = wcount++ % p.w_slots;
    const uint64_t tile_addr = a.weights + lp.weight_offset + (nb * lp.k_blocks + kb) * an * an;
    for (const Transfer& t : split_transfer(wslot * an, tile_addr, an * an, an, beat)) {
      b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kWb, t), {}, {wb0 + wslot});
    }
    load_input();
    isa::Instr lw = isa::make_instr(spec::Opcode::kLoadw);
    lw.set("wb_addr", wslot * an);
    b.emit(kC, std::move(lw), {wb0 + wslot}, {});
    flush();
    b.set_tag(tag);
    isa::Instr mm = isa::make_instr(spec::Opcode::kMatmul);
    mm.set("accumulate", (kb > 0 || lp.final_int32) ? 1 : 0);
    mm.set("swap", 1);
    mm.set("ub_addr", ub_row);
    mm.set("acc_addr", buf * p.m_tile);
    mm.set("rows", rows);
    b.emit(kC, std::move(mm), {chunk_of(ub_row)}, {acc0 + buf}, /*is_matmul=*/true);
  };
  // End of a strip: STORE of an int32 strip, or the (deferred) ACTIVATE into the UB tensor l+1 --
  // resident, or a staging chunk that is STOREd (spilled, final) or consumed by the fused layer l+1
  // (streamed). Returns the UB row the ACTIVATE writes.
  auto end_strip = [&](size_t l, uint64_t mt, uint64_t nb, uint64_t buf, uint64_t ps) -> uint64_t {
    const NetworkLayerPlan& lp = p.layers[l];
    const bool last = l + 1 == nl;
    const TensorHome out_home = last ? TensorHome::kHost : p.tensor_home[l + 1];
    const uint64_t rows = p.rows_of_tile(mt);
    const uint64_t acc_row = buf * p.m_tile;
    const uint64_t prow = p.acc_param_row + p.param_slot_rows * ps;
    b.set_tag(static_cast<int32_t>(l));
    if (lp.final_int32) {
      const uint64_t dst = a.output + 4 * (mt * p.m_tile * lp.n_blocks * an + nb * rows * an);
      for (const Transfer& t : split_transfer(acc_row, dst, rows * 4 * an, 4 * an, beat)) {
        b.emit(kS, detail::dma_instr(spec::Opcode::kStore, spec::Mem::kAcc, t), {acc0 + buf}, {});
      }
      return 0;
    }
    flush();  // a fused layer's strips end back to back
    Pending pd;
    pd.tag = static_cast<int32_t>(l);
    uint64_t dst_row = 0;
    if (out_home == TensorHome::kResident) {
      dst_row = netdetail::resident_row(p, l + 1, mt, nb);
      if (keep_intermediate) {
        const uint64_t dst = a.debug + p.debug_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
        for (const Transfer& t : split_transfer(dst_row, dst, rows * an, an, beat)) pd.stores.push_back({t, {}});
      }
    } else {
      dst_row = p.ub_stage_row + (stage_count++ % 2) * p.m_tile;
      if (out_home == TensorHome::kHost) {
        const uint64_t dst = last ? a.output + block_offset(mt, nb, lp.n_blocks, 1)
                                  : a.spill + p.tensor_host_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
        std::vector<size_t> writes;
        if (!last) writes.push_back(host_base[l + 1] + mt * lp.n_blocks + nb);
        for (const Transfer& t : split_transfer(dst_row, dst, rows * an, an, beat)) pd.stores.push_back({t, writes});
      }
      if (!last && keep_intermediate) {
        const uint64_t dd = a.debug + p.debug_offset[l + 1] + block_offset(mt, nb, lp.n_blocks, 1);
        for (const Transfer& t : split_transfer(dst_row, dd, rows * an, an, beat)) pd.stores.push_back({t, {}});
      }
    }
    isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
    act.set("relu", lp.relu ? 1 : 0);
    act.set("lut", lp.lut ? 1 : 0);
    act.set("bias", 1);
    act.set("acc_addr", acc_row);
    act.set("ub_addr", dst_row);
    act.set("rows", rows);
    act.set("bias_addr", prow);
    act.set("qparam_addr", prow + 1);
    pd.act = std::move(act);
    pd.reads = {acc0 + buf, par0 + ps};
    pd.writes = {chunk_of(dst_row)};
    pd.store_reads = {chunk_of(dst_row)};
    pending = std::move(pd);
    return dst_row;
  };

  for (const auto& order_step : netdetail::network_order(p)) {
    // Not a structured binding: clang 14 (the fuzz preset) cannot capture one in a lambda.
    const size_t l = order_step.first;
    const uint64_t mt = order_step.second;
    const NetworkLayerPlan& lp = p.layers[l];
    const TensorHome in_home = p.tensor_home[l];
    const bool fuse = l + 1 < nl && p.tensor_home[l + 1] == TensorHome::kStreamed;
    const auto tag = static_cast<int32_t>(l);
    {
      const uint64_t rows = p.rows_of_tile(mt);
      if (in_home == TensorHome::kHost && l > 0) {
        flush();
        b.set_tag(tag);
        std::vector<size_t> blocks;
        for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) blocks.push_back(host_base[l] + mt * lp.k_blocks + kb);
        b.bridge(blocks);
      }
      // Fused int32 layer: its strips accumulate over the whole M tile; preload their biases.
      if (fuse && p.layers[l + 1].final_int32) {
        for (uint64_t j = 0; j < p.layers[l + 1].n_blocks; ++j) begin_strip(l + 1, rows, j, 2 + j, 0);
      }
      for (uint64_t nb = 0; nb < lp.n_blocks; ++nb, ++strip) {
        const uint64_t buf = strip % 2;
        const uint64_t ps = strip % 2;
        begin_strip(l, rows, nb, buf, ps);
        for (uint64_t kb = 0; kb < lp.k_blocks; ++kb) {
          // Input block (mt, kb) of tensor l.
          uint64_t ub_row = 0;
          const auto id = static_cast<int64_t>((uint64_t{l} << 44) | (mt << 22) | kb);
          std::function<void()> load_input = [] {};
          if (in_home == TensorHome::kResident) {
            ub_row = netdetail::resident_row(p, l, mt, kb);
            if (l == 0 && content[ub_row / p.m_tile] != id) {
              load_input = [&, ub_row] {
                const uint64_t src = a.input + block_offset(mt, kb, lp.k_blocks, 1);
                for (const Transfer& t : split_transfer(ub_row, src, rows * an, an, beat)) {
                  b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), {}, {chunk_of(ub_row)});
                }
              };
              content[ub_row / p.m_tile] = id;
            }
          } else {
            const uint64_t slot = lp.k_blocks <= p.in_slots ? kb : (in_ring++ % p.in_slots);
            ub_row = p.ub_in_row + slot * p.m_tile;
            if (content[ub_row / p.m_tile] != id) {
              load_input = [&, ub_row] {
                const uint64_t src = l == 0 ? a.input + block_offset(mt, kb, lp.k_blocks, 1)
                                            : a.spill + p.tensor_host_offset[l] + block_offset(mt, kb, lp.k_blocks, 1);
                std::vector<size_t> reads;
                if (l > 0) reads.push_back(host_base[l] + mt * lp.k_blocks + kb);
                for (const Transfer& t : split_transfer(ub_row, src, rows * an, an, beat)) {
                  b.emit(kL, detail::dma_instr(spec::Opcode::kLoad, spec::Mem::kUb, t), reads, {chunk_of(ub_row)});
                }
              };
              content[ub_row / p.m_tile] = id;
            }
          }
          fold(l, rows, nb, kb, ub_row, buf, load_input);
        }
        const uint64_t out_row = end_strip(l, mt, nb, buf, ps);
        // Fused layer l+1: this strip's output is its k-block nb; every one of its strips takes it.
        if (fuse) {
          const NetworkLayerPlan& cp = p.layers[l + 1];
          for (uint64_t j = 0; j < cp.n_blocks; ++j) {
            std::function<void()> none = [] {};
            fold(l + 1, rows, j, nb, out_row, 2 + j, none);
          }
        }
      }
      if (fuse) {
        const NetworkLayerPlan& cp = p.layers[l + 1];
        for (uint64_t j = 0; j < cp.n_blocks; ++j, ++strip) {
          if (!cp.final_int32) begin_strip(l + 1, rows, j, 2 + j, strip % 2);
          end_strip(l + 1, mt, j, 2 + j, strip % 2);
        }
      }
    }
  }
  flush();

  detail::MergedProgram merged = detail::merge_program(b, kLookahead, static_cast<int64_t>(2 * kLookahead + 24));
  CompiledNetwork out;
  out.plan = p;
  out.keep_intermediate = keep_intermediate;
  out.layer_stats = netdetail::layer_stats(merged, nl, an);
  out.code = std::move(merged.code);
  out.fold_index = std::move(merged.fold_index);
  return out;
}

}  // namespace tpuw::runtime
