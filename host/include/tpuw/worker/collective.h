// What mirrored training needs from a multi-process transport (MPI in `tpuw train` when built with
// it; an in-process one in the tests): every rank's bytes, in rank order. The worker library does
// not depend on MPI; the tool implements this interface over it (host/tools/tpuw/mpi_collective.*).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tpuw::worker {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every rank's `mine` (sizes may differ), indexed by rank. Collective: every rank calls it the
  /// same number of times. Throws Error(kTimeout) naming the ranks that did not answer in time.
  virtual std::vector<std::vector<uint8_t>> allgather(std::span<const uint8_t> mine) = 0;
};

}  // namespace tpuw::worker
