// MPI for `tpuw train --devices K --strategy mirrored` under mpirun (docs/scaling.md): a
// worker::Collective over MPI_COMM_WORLD, built only when CMake's find_package(MPI) finds it
// (TPUW_WITH_MPI). Only the main thread calls MPI.
#pragma once

#include <memory>

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

}  // namespace tpuw::cli
