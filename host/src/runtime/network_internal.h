// Internal to the network compiler: constants shared by its files (network_plan.cpp,
// network_emit.cpp, network_pack.cpp, network_run.cpp). See tpuw/runtime/network.h.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "program_builder.h"
#include "tpuw/runtime/network.h"

namespace tpuw::runtime::netdetail {

constexpr uint32_t kMaxWSlots = 64;     // WB weight-tile ring slots (at most)
constexpr uint64_t kLookahead = 8;      // loads placed at most this many compute instructions early
constexpr uint64_t kPageAlign = 4096;   // host images are page-aligned

/// The order the program runs (layer, M tile) pairs in: layer by layer over the whole batch, or
/// (tile_outer) every layer on one M tile before the next. A layer fused into its predecessor
/// (tensor_home[l] == kStreamed) runs inside the predecessor's pair and has none of its own.
inline std::vector<std::pair<size_t, uint64_t>> network_order(const NetworkPlan& p) {
  std::vector<std::pair<size_t, uint64_t>> order;
  const size_t nl = p.layers.size();
  auto own = [&](size_t l) { return l == 0 || p.tensor_home[l] != TensorHome::kStreamed; };
  if (p.tile_outer) {
    for (uint64_t mt = 0; mt < p.m_tiles; ++mt) {
      for (size_t l = 0; l < nl; ++l) {
        if (own(l)) order.emplace_back(l, mt);
      }
    }
  } else {
    for (size_t l = 0; l < nl; ++l) {
      for (uint64_t mt = 0; mt < p.m_tiles && own(l); ++mt) order.emplace_back(l, mt);
    }
  }
  return order;
}

/// First UB row of block (mt, kb) of resident tensor t: all M tiles side by side, or one M tile's
/// blocks (tile_outer: the region is reused by every M tile).
inline uint64_t resident_row(const NetworkPlan& p, size_t t, uint64_t mt, uint64_t kb) {
  const uint64_t kbn = p.layers[t].k_blocks;
  return p.tensor_ub_row[t] + ((p.tile_outer ? 0 : mt * kbn) + kb) * p.m_tile;
}

/// Instruction counts, exact DMA bytes and the compute occupancy estimate of each layer of a merged
/// program (tag = layer index), as attribute_layers takes them.
std::vector<LayerProgramStats> layer_stats(const detail::MergedProgram& merged, size_t layers, uint64_t an);

/// What attribute_layers needs of a layer besides its instructions.
struct LayerDims {
  uint64_t m = 0, k = 0, n = 0;
  uint64_t min_bytes = 0;
};

/// attribute_layers for any layer chain on an array of `array_n` (the int8 network and bf16 inference).
std::vector<LayerReport> attribute_layer_dims(uint32_t array_n, const std::vector<LayerDims>& dims,
                                              const std::vector<LayerProgramStats>& stats, const PerfCounters& perf);

}  // namespace tpuw::runtime::netdetail
