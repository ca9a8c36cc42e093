// Per-pixel requantization groups of a convolution program (tpuw/runtime/conv.h): the ACTIVATE of
// an output strip split into runs of ACC rows that share a group (an average pool whose divisor
// varies by pixel, a Pad's constant border; docs/network_compiler.md).
#include <fmt/format.h>

#include "tpuw/error.h"
#include "tpuw/runtime/conv.h"

namespace tpuw::runtime {

void set_pixel_groups(ConvPlan& p, const QConv2d& layer) {
  if (layer.extra_groups() != p.extra_groups) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv '{}': {} requantization groups, the plan has {}", layer.name,
                                                         layer.extra_groups(), p.extra_groups));
  }
  if (!layer.pixel_group.empty() && layer.pixel_group.size() != p.ho * p.wo) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("conv '{}': {} pixel groups for {}x{} output pixels", layer.name,
                                                         layer.pixel_group.size(), p.ho, p.wo));
  }
  p.pixel_group = layer.pixel_group;
}

std::vector<ActivateRun> activate_runs(const ConvPlan& p, uint64_t images) {
  const uint64_t total = images * p.acc_rows;
  if (p.pixel_group.empty()) return {ActivateRun{0, total, 0}};
  // Walk the rows; a row that is never stored (ox >= wo) takes the current run's group.
  std::vector<ActivateRun> runs;
  for (uint64_t r = 0; r < total; ++r) {
    const uint64_t l = r % p.acc_rows, oy = l / p.wq, ox = l % p.wq;
    const bool stored = ox < p.wo && oy < p.ho;
    if (!stored) {
      if (runs.empty()) runs.push_back(ActivateRun{r, 0, 0});
      ++runs.back().rows;
      continue;
    }
    const uint16_t grp = p.pixel_group[oy * p.wo + ox];
    if (runs.empty() || runs.back().group != grp) {
      // A run that so far holds only unstored rows adopts the group.
      const bool adopt = !runs.empty() && [&] {
        for (uint64_t k = runs.back().row; k < r; ++k) {
          const uint64_t lk = k % p.acc_rows;
          if (lk % p.wq < p.wo && lk / p.wq < p.ho) return false;
        }
        return true;
      }();
      if (adopt) {
        runs.back().group = grp;
      } else {
        runs.push_back(ActivateRun{r, 0, grp});
      }
    }
    ++runs.back().rows;
  }
  return runs;
}

}  // namespace tpuw::runtime
