// MPI for `tpuw train --devices K --strategy mirrored` and `tpuw run` (dense and CNN) under mpirun
// (docs/scaling.md): a worker::Collective over MPI_COMM_WORLD, built only when CMake's
// find_package(MPI) finds it (TPUW_WITH_MPI). Only the main thread calls MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>
#include <vector>

#include "tpuw/worker/collective.h"

namespace tpuw::cli {

/// Whether this process was started by mpirun with more than one rank (OpenMPI's
/// OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1).
bool launched_by_mpirun();

/// Whether tpuw was built with MPI.
bool mpi_built();

/// An MPI session: MPI_Init on creation, MPI_Finalize on destruction (MPI_Abort instead after a
/// collective timed out, so no rank is left waiting). allgather() waits at most timeout_seconds
/// for every rank, then throws Error(kTimeout). Throws Error(kUnsupported) when built without MPI.
std::unique_ptr<worker::Collective> open_mpi(double timeout_seconds);

/// One rank's message in `tpuw run`'s allgather (dense and CNN paths): a JSON header (status,
/// figures, trace) and raw bytes (the rank's outputs).
std::vector<uint8_t> pack_rank(const nlohmann::ordered_json& head, std::span<const uint8_t> bytes);
/// The inverse of pack_rank; throws Error(kInternal) naming `rank` for a malformed message.
std::pair<nlohmann::ordered_json, std::span<const uint8_t>> unpack_rank(const std::vector<uint8_t>& msg, size_t rank);

}  // namespace tpuw::cli
