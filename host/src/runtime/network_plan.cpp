// Network compiler, part 1 of 4: the memory planner and scheduler (see tpuw/runtime/network.h and
// docs/network_compiler.md). network_emit.cpp turns a plan into the program, network_pack.cpp
// packs and unpacks the host images, network_run.cpp runs it and attributes the counters.
//
// What the planner decides, and why:
//  - The goal is the fewest bytes over the host interface (weights, activations and instruction
//    fetch); cycles follow, because the MXU is busy whenever it is not waiting for bytes.
//  - Inside a layer the program walks M tile -> output strip -> k-block, so the layer's weights are
//    read once per M tile (the WB ring holds 64 tiles, far less than a layer). Fewer, bigger M
//    tiles read the weights fewer times; the ACC bounds an M tile to (AccDepth - 6) / 2 rows.
//  - An activation tensor is resident (0 bytes), spilled (written and read back: twice its size;
//    and read once per output strip if an M tile's k-blocks do not fit the UB input slots), or
//    streamed: the next layer is fused into its producer when its strips all fit the ACC beside
//    the two working buffers (a classifier head) -- 0 bytes and only two UB staging chunks.
//  - Loop order: layer by layer over the whole batch (a resident tensor holds every M tile), or
//    every layer per M tile (tile_outer: a resident tensor holds one M tile, so tensors the batch
//    cannot keep resident fit; same weight reads for the same M tile).
//  - Every combination on the search path (M tile count x loop order x residency) is costed
//    exactly by traffic_of, which walks the emitter's loops at (layer, M tile) granularity, and
//    the cheapest wins; ties keep the earlier (fewer M tiles, layer order, unfused) candidate, so
//    a network that fits (the benchmark MLP) gets exactly the program it always had.
//  - Above 1.5x the minimum the plan explains the largest excess in one line (traffic_note).
#include "tpuw/runtime/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "network_internal.h"
#include "program_builder.h"
#include "tpuw/activate.h"
#include "tpuw/error.h"

namespace tpuw::runtime {
namespace {

using detail::kMaxRowsField;
using detail::round_down;
using detail::round_up;
using netdetail::kMaxWSlots;
using netdetail::kPageAlign;
using netdetail::network_order;

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
    if (!l.lut.empty() && l.lut.size() != 256) throw bad(fmt::format("lut has {} entries, expected 256", l.lut.size()));
    if (!l.lut.empty() && l.int32_output) throw bad("a lookup table needs an int8 output (not int32_output)");
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


// Lays out the UB and the ACC for p.m_tile / p.m_tiles and the residency `home`: ping-pong
// regions, staging and input slots; ACC strip buffers (2 + the widest fused layer's strips) and the
// param slots. Returns false when it does not fit.
bool layout(NetworkPlan& p, const DeviceParams& params, const std::vector<TensorHome>& home) {
  const size_t nl = p.layers.size();
  const uint64_t chunks = params.ub_depth / p.m_tile;
  const bool final_int8 = !p.layers.back().final_int32;
  uint64_t r[2] = {0, 0}, stage = final_int8 ? 2 : 0, in_min = 0, fused = 0;
  for (size_t t = 0; t < nl; ++t) {
    if (home[t] == TensorHome::kResident) {
      r[t % 2] = std::max(r[t % 2], p.layers[t].k_blocks * (p.tile_outer ? 1 : p.m_tiles));
    } else {
      if (home[t] == TensorHome::kHost) in_min = 2;
      if (t > 0) stage = 2;
      if (home[t] == TensorHome::kStreamed) fused = std::max(fused, p.layers[t].n_blocks);
    }
  }
  if (r[0] + r[1] + stage + in_min > chunks) return false;
  if ((2 + fused) * p.m_tile + 2 * p.param_slot_rows > params.acc_depth) return false;
  p.tensor_home = home;
  p.ub_region_rows[0] = r[0] * p.m_tile;
  p.ub_region_rows[1] = r[1] * p.m_tile;
  p.ub_stage_row = (r[0] + r[1]) * p.m_tile;
  p.ub_in_row = p.ub_stage_row + stage * p.m_tile;
  p.in_slots = in_min > 0 ? static_cast<uint32_t>(std::min<uint64_t>(chunks - r[0] - r[1] - stage, UINT32_MAX)) : 0;
  p.acc_param_row = (2 + fused) * p.m_tile;
  return true;
}

// Fuses every layer it can into its predecessor: tensor t (t >= 1, not the last layer's input of a
// chain) becomes kStreamed when `from` says so for it, its neighbours are not streamed and the
// ACC holds layer t's strips beside the two working buffers.
std::vector<TensorHome> with_streams(const NetworkPlan& p, const DeviceParams& params, std::vector<TensorHome> home,
                                     TensorHome from) {
  for (size_t t = 1; t < home.size(); ++t) {
    if (home[t] != from || home[t - 1] == TensorHome::kStreamed) continue;
    if (t + 1 < home.size() && home[t + 1] == TensorHome::kStreamed) continue;
    if ((2 + p.layers[t].n_blocks) * p.m_tile + 2 * p.param_slot_rows > params.acc_depth) continue;
    home[t] = TensorHome::kStreamed;
  }
  return home;
}

// DMA instructions of one transfer as network_emit.cpp splits it.
uint64_t dma_count(uint64_t bytes, uint64_t local_row_bytes, uint64_t beat) {
  return detail::split_transfer(0, 0, bytes, local_row_bytes, beat).size();
}

// The bytes and instructions of the program network_emit.cpp emits for `p` (without
// keep_intermediate), walking the same loops at the granularity of (layer, M tile): see the
// program at the top of network_emit.cpp. Also sets every layer's weight_reads / input_reads.
NetworkTraffic traffic_of(NetworkPlan& p) {
  const uint64_t an = p.array_n, beat = p.beat;
  const size_t nl = p.layers.size();
  NetworkTraffic t;
  uint64_t ld = 0, st = 0, n = 0;
  const uint64_t w_instr = dma_count(an * an, an, beat);
  uint64_t strip = 0;                   // the emitter's strip counter (ACC buffer = strip % 2)
  bool stored[2] = {false, false};      // the buffer's last reader was a STORE (int32 strip)
  for (size_t l = 0; l < nl; ++l) {
    NetworkLayerPlan& lp = p.layers[l];
    const bool ring = p.tensor_home[l] == TensorHome::kHost && lp.k_blocks > p.in_slots;
    lp.weight_reads = p.m_tiles;
    lp.input_reads = (l == 0 || p.tensor_home[l] == TensorHome::kHost) ? (ring ? lp.n_blocks : 1) : 0;
  }
  for (const auto& [l, mt] : network_order(p)) {
    // Layer l and, when tensor l+1 is streamed, the fused layer l+1, on M tile mt.
    const uint64_t rows = p.rows_of_tile(mt);
    const bool fuse = l + 1 < nl && p.tensor_home[l + 1] == TensorHome::kStreamed;
    for (size_t f = l; f <= (fuse ? l + 1 : l); ++f) {
      const NetworkLayerPlan& lp = p.layers[f];
      const bool last = f + 1 == nl;
      const TensorHome in_home = p.tensor_home[f];
      const TensorHome out_home = last ? TensorHome::kHost : p.tensor_home[f + 1];
      const bool ring = in_home == TensorHome::kHost && lp.k_blocks > p.in_slots;
      const uint64_t strips = lp.n_blocks, folds = lp.n_blocks * lp.k_blocks;
      if (in_home == TensorHome::kHost && f > 0) n += 1;  // bridge NOP for the spilled input
      // Params or bias preload, per strip; the strips' ACC buffers.
      if (lp.final_int32) {
        if (in_home == TensorHome::kStreamed) {
          if (mt > 0) n += strips;  // bridge NOPs: the fused strip buffers were last read by STOREs
        } else {
          for (uint64_t s = 0; s < strips; ++s) {
            if (stored[(strip + s) % 2]) n += 1;  // bridge NOP: the buffer's last reader was a STORE
            stored[(strip + s) % 2] = true;
          }
        }
        n += strips;
        ld += strips * rows * 4 * an;
      } else {
        n += strips * dma_count(4 * an * lp.param_rows, 4 * an, beat);
        ld += strips * 4 * an * lp.param_rows;
        if (in_home != TensorHome::kStreamed) {
          for (uint64_t s = 0; s < std::min<uint64_t>(strips, 2); ++s) stored[(strip + s) % 2] = false;
        }
      }
      strip += strips;
      // Weight tiles, LOADW, MATMUL.
      n += folds * (w_instr + 2);
      ld += folds * an * an;
      // Input blocks.
      if (lp.input_reads > 0) {
        const uint64_t loads = ring ? folds : lp.k_blocks;
        n += loads * dma_count(rows * an, an, beat);
        ld += loads * rows * an;
      }
      // Outputs.
      if (lp.final_int32) {
        n += strips * dma_count(rows * 4 * an, 4 * an, beat);
        st += strips * rows * 4 * an;
      } else {
        n += strips;  // ACTIVATE
        if (out_home == TensorHome::kHost) {
          n += strips * dma_count(rows * an, an, beat);
          st += strips * rows * an;
        }
      }
    }
  }
  n += 1;  // FENCE
  t.instructions = n;
  t.rd_bytes = ld + 16 * n;
  t.wr_bytes = st + 4;
  uint64_t w = 0;
  for (const NetworkLayerPlan& lp : p.layers) w += lp.k * lp.n;
  t.min_bytes = w + p.batch * p.layers[0].k + p.batch * p.layers.back().n * (p.layers.back().final_int32 ? 4 : 1);
  return t;
}

// Why the chosen plan moves more than kTrafficGoal x the minimum: the largest excess and its cause.
std::string explain_traffic(const NetworkPlan& p, const DeviceParams& params) {
  const uint64_t an = p.array_n;
  // Instruction fetch alone: 16 bytes per instruction against the minimum.
  const uint64_t fetch = 16 * p.traffic.instructions;
  uint64_t best_excess = 0;
  std::string why;
  const uint64_t ub_bytes = uint64_t{params.ub_depth} * an;
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const NetworkLayerPlan& lp = p.layers[l];
    const uint64_t wbytes = lp.k_blocks * lp.n_blocks * an * an;
    const uint64_t act = p.mp * lp.k_blocks * an;  // the layer's input tensor, whole batch
    if (lp.weight_reads > 1 && (lp.weight_reads - 1) * wbytes > best_excess) {
      best_excess = (lp.weight_reads - 1) * wbytes;
      why = fmt::format("layer {} ({}x{}) reads its weights {} times: one pass per M tile of {} rows, and the batch's "
                        "{}-wide activations ({} bytes) do not fit the UB ({} bytes) in fewer tiles without spilling more",
                        l, lp.k, lp.n, lp.weight_reads, p.m_tile, lp.k, act, ub_bytes);
    }
    if (lp.input_reads > 1 && (lp.input_reads - 1) * act > best_excess) {
      best_excess = (lp.input_reads - 1) * act;
      why = fmt::format("layer {} ({}x{}) reads its spilled input {} times: an M tile's {} k-blocks of {} rows do not "
                        "fit the {} UB input slots",
                        l, lp.k, lp.n, lp.input_reads, lp.k_blocks, p.m_tile, p.in_slots);
    }
    if (l > 0 && p.tensor_home[l] == TensorHome::kHost && 2 * act > best_excess) {
      best_excess = 2 * act;
      why = fmt::format("the {}-wide activations between layers {} and {} ({} bytes for the batch) do not fit the UB "
                        "({} bytes) beside the other tensors: spilled to host memory and read back",
                        lp.k, l - 1, l, act, ub_bytes);
    }
  }
  // Rows and tiles are padded to N columns: weight tiles, the input's k-blocks and the final
  // output's n-blocks move whole, whatever the model's widths.
  const NetworkLayerPlan& first = p.layers.front();
  const NetworkLayerPlan& last = p.layers.back();
  const uint64_t out_elem = last.final_int32 ? 4 : 1;
  uint64_t padding = p.mp * first.k_blocks * an - p.batch * first.k;
  padding += (p.mp * last.n_blocks * an - p.batch * last.n) * out_elem;
  for (const NetworkLayerPlan& lp : p.layers) padding += lp.k_blocks * lp.n_blocks * an * an - lp.k * lp.n;
  if (padding > best_excess) {
    best_excess = padding;
    why = fmt::format("padding to the {}-wide array: weight tiles, input k-blocks and output n-blocks move whole "
                      "({} bytes beyond the model's own widths)",
                      an, padding);
  }
  // An int32 final layer starts its accumulators from the bias: one bias row per output row and
  // n-block is loaded into the ACC (host stride 0), M x 4N bytes per n-block.
  const uint64_t bias_rows = last.final_int32 ? p.mp * last.n_blocks * 4 * an : 0;
  if (bias_rows > best_excess) {
    best_excess = bias_rows;
    why = fmt::format("the int32 output layer preloads its accumulators with the bias, one {}-byte row per output "
                      "row and n-block ({} bytes; the device has no on-chip row broadcast yet)",
                      4 * an, bias_rows);
  }
  if (fetch > best_excess) {
    why = fmt::format("instruction fetch: {} instructions x 16 bytes ({} bytes; at least 2 per {}-byte weight tile: "
                      "LOADW and MATMUL) against {} minimum bytes",
                      p.traffic.instructions, fetch, an * an, p.traffic.min_bytes);
  }
  return fmt::format("bytes moved {:.2f}x the minimum: {}", p.traffic.ratio(), why);
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

  // Param slots: bias, mult, shift and, when any layer maps its results through a table (ACTIVATE
  // `lut`), the table's rows.
  const bool any_lut = std::any_of(net.layers.begin(), net.layers.end(), [](const nn::QLayer& l) { return !l.lut.empty(); });
  p.param_slot_rows = 3 + (any_lut ? lut_rows(an) : 0);
  const uint64_t param_rows = 2 * p.param_slot_rows;
  // Largest M tile: two ACC strips plus the param slots; four UB chunks (the all-spilled minimum).
  const uint64_t acc_cap =
      params.acc_depth > param_rows ? round_down(std::min<uint64_t>((params.acc_depth - param_rows) / 2, kMaxRowsField), m_align) : 0;
  const uint64_t ub_cap = round_down(params.ub_depth / 4, m_align);
  uint64_t m_cap = std::min({p.mp, acc_cap, ub_cap});
  if (options.max_m_tile > 0) m_cap = std::min(m_cap, std::max(m_align, round_down(options.max_m_tile, m_align)));
  if (m_cap == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("network: UB depth {} / ACC depth {} cannot hold tiles of {} rows", params.ub_depth,
                            params.acc_depth, m_align));
  }

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
    lp.lut = !l.lut.empty();
    lp.param_rows = 3 + (lp.lut ? lut_rows(an) : 0);
    woff += lp.k_blocks * lp.n_blocks * an * an;
    poff += lp.n_blocks * lp.param_rows * 4 * an;
    p.layers.push_back(lp);
  }
  p.weight_bytes = woff;
  p.param_bytes = poff;
  p.w_slots = std::min<uint32_t>(params.wb_depth / params.array_n, kMaxWSlots);
  if (p.w_slots == 0) throw Error(ErrorKind::kUnsupported, fmt::format("WB depth {} holds no weight tile", params.wb_depth));

  // The search (docs/network_compiler.md, "How the planner decides"). A candidate is an M tile
  // (one per tile count T, from the fewest tiles the ACC and UB allow up), a loop order (layer by
  // layer over the whole batch, or every layer per M tile: tile_outer) and a residency: along two
  // paths -- from "every tensor resident" and from "every fusable layer fused" (with force_spill:
  // every tensor on the host) -- tensors are spilled largest first, and every residency on a path
  // that fits the UB and the ACC is a candidate, as is the same residency with its spilled tensors
  // fused where a layer can be. Each candidate's traffic is computed exactly (traffic_of); the
  // cheapest wins, ties going to the earlier candidate (fewer M tiles, layer order, unfused). The
  // search stops at the first candidate that reads every weight and input once and spills nothing.
  const uint64_t t_min = (p.mp + m_cap - 1) / m_cap;
  const uint64_t t_max = (p.mp + m_align - 1) / m_align;
  std::vector<uint64_t> counts;
  for (uint64_t t = t_min; t <= t_max; t = t < t_min + 64 ? t + 1 : t + (t + 7) / 8) counts.push_back(t);
  std::optional<NetworkPlan> best;
  // The residencies of one (M tile, loop order); true when a minimal plan was found.
  auto search = [&](NetworkPlan& c) -> bool {
    // Two spill paths: from "all resident", and from "every layer that can be fused, fused".
    for (int path = 0; path < 2; ++path) {
      std::vector<TensorHome> home(nl, options.force_spill ? TensorHome::kHost : TensorHome::kResident);
      if (path == 1) {
        if (options.force_spill) break;
        home = with_streams(c, params, home, TensorHome::kResident);
      }
      for (;;) {
        // The residency itself, and the same with its spilled tensors fused where possible.
        for (int variant = 0; variant < 2; ++variant) {
          const std::vector<TensorHome> h = variant == 0 ? home : with_streams(c, params, home, TensorHome::kHost);
          if (variant == 1 && (h == home || options.force_spill)) break;
          if (!layout(c, params, h)) continue;
          ++p.candidates;
          c.traffic = traffic_of(c);
          if (!best || c.traffic.bytes() < best->traffic.bytes()) best = c;
          // Nothing spilled and the weights read once: the minimum for this compiler.
          bool minimal = c.m_tiles == 1;
          for (size_t t = 1; t < nl; ++t) minimal = minimal && h[t] != TensorHome::kHost;
          for (const NetworkLayerPlan& lp : c.layers) minimal = minimal && lp.input_reads <= 1;
          if (minimal) return true;
        }
        size_t victim = nl;
        for (size_t t = 0; t < nl; ++t) {
          if (home[t] == TensorHome::kResident &&
              (victim == nl || c.layers[t].k_blocks >= c.layers[victim].k_blocks)) {
            victim = t;
          }
        }
        if (victim == nl) break;
        home[victim] = TensorHome::kHost;
      }
    }
    return false;
  };
  uint64_t last_m_tile = 0;
  bool done = false;
  for (uint64_t tc : counts) {
    NetworkPlan c = p;
    c.m_tile = round_up((p.mp + tc - 1) / tc, m_align);
    if (c.m_tile == last_m_tile) continue;
    last_m_tile = c.m_tile;
    c.m_tiles = (p.mp + c.m_tile - 1) / c.m_tile;
    for (int order = 0; order < 2 && !done; ++order) {
      if (order == 1 && c.m_tiles == 1) break;  // one M tile: both orders are the same program
      c.tile_outer = order == 1;
      done = search(c);
    }
    if (done) break;
  }
  if (!best) throw Error(ErrorKind::kInternal, "plan_network: no plan fits the UB");
  const uint32_t candidates = p.candidates;
  p = std::move(*best);
  p.candidates = candidates;

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
  const bool final_int8 = !p.layers.back().final_int32;
  p.output_bytes = p.mp * p.layers.back().n_blocks * an * (final_int8 ? 1 : 4);
  if (p.traffic.ratio() > kTrafficGoal) p.traffic_note = explain_traffic(p, params);
  return p;
}

}  // namespace tpuw::runtime
