// GEMM on a TPU Worker device: C[M,N] (int32) = A[M,K] (int8) . B[K,N] (int8), any M, K, N >= 1.
//
// The host repacks the operands into device-friendly, zero-padded layouts in host memory:
//   A: per M tile, K blocks of [rows x ArrayN] int8, each contiguous (one LOAD per block)
//   B: ArrayN x ArrayN weight tiles, contiguous, in the order the program consumes them
//   C: per M tile, column strips of [rows x ArrayN] int32 (one STORE per strip)
// and compiles one device program:
//   - A blocks are LOADed into UB slots; when the whole K extent of an M tile fits in the UB
//     ("A resident"), it stays there for all output column strips and is reloaded block by block
//     only when the next M tile needs the slot; otherwise blocks stream through a ring of UB slots.
//   - weight tiles are LOADed into a ring of WB slots; per fold: LOADW(tile) then
//     MATMUL(swap=1, accumulate = k>0), so LOADW(t+1) follows MATMUL(t) and shifts in while it streams.
//   - the ACC holds two output strips (double buffer); a finished strip is STOREd while the next
//     one computes.
//   - dependency tokens (pop/push flags) order every conflicting access between the LOAD, COMPUTE
//     and STORE queues, derived from the buffer hazards (RAW, WAR) of the program's sequential
//     meaning; the program gives the same result on any legal timing.
// See docs in gemm.cpp for the token derivation and the instruction placement rules.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"

namespace tpuw::runtime {

struct GemmShape {
  uint64_t m = 0;
  uint64_t k = 0;
  uint64_t n = 0;
};

/// Tiling decisions for one shape on one device configuration.
struct GemmPlan {
  GemmShape shape;
  uint32_t array_n = 0;
  uint32_t beat = 0;        // DMA beat bytes
  uint64_t mp = 0, kp = 0, np = 0;  // padded sizes (M to the row alignment, K and N to array_n)
  uint64_t m_tile = 0;      // rows per M tile (<= acc_depth / 2)
  uint64_t m_tiles = 0;
  uint64_t k_blocks = 0;    // kp / array_n
  uint64_t n_blocks = 0;    // np / array_n
  bool a_resident = true;   // the K extent of an M tile fits in the UB
  uint32_t a_slots = 0;     // UB slots of m_tile rows
  uint32_t w_slots = 0;     // WB weight-tile slots
  uint64_t folds = 0;       // m_tiles * n_blocks * k_blocks

  uint64_t rows_of_tile(uint64_t mt) const { return std::min(m_tile, mp - mt * m_tile); }
  uint64_t a_bytes() const { return mp * kp; }
  uint64_t b_bytes() const { return kp * np; }
  uint64_t c_bytes() const { return 4 * mp * np; }
};

/// Chooses the tiling. Throws Error(kInvalidArgument) for a zero dimension or a shape whose padded
/// sizes overflow 64 bits (afterwards a_bytes() + b_bytes() + c_bytes() + 4 GiB fits in 64 bits),
/// Error(kUnsupported) when the configuration cannot hold even one minimal tile.
GemmPlan plan_gemm(const DeviceParams& params, const GemmShape& shape);

/// A compiled program (without the final FENCE: the driver appends it).
struct GemmProgram {
  GemmPlan plan;
  std::vector<isa::Word> code;
  std::vector<uint64_t> fold_index;  // program index of every fold's MATMUL, increasing
  uint64_t loads = 0, loadws = 0, matmuls = 0, stores = 0;
};

/// Compiles the program for packed operands at host addresses a_addr, b_addr and c_addr
/// (beat-aligned; 4 KiB-aligned is fastest).
GemmProgram compile_gemm(const GemmPlan& plan, uint64_t a_addr, uint64_t b_addr, uint64_t c_addr);

/// Host-side repacking (row-major A [M,K], B [K,N]; C [M,N]).
std::vector<int8_t> pack_a(const GemmPlan& plan, std::span<const int8_t> a);
std::vector<int8_t> pack_b(const GemmPlan& plan, std::span<const int8_t> b);
std::vector<int32_t> unpack_c(const GemmPlan& plan, std::span<const int32_t> c_packed);

/// Plain CPU product (int32 accumulation with two's-complement wrap, like the device). Throws
/// Error(kInvalidArgument) when the spans do not hold M*K and K*N elements (products checked).
std::vector<int32_t> gemm_cpu(std::span<const int8_t> a, std::span<const int8_t> b, const GemmShape& shape);

struct GemmOptions {
  /// Called while the device runs with the fraction of folds dispatched (0..1).
  std::function<void(double)> progress;
};

struct GemmResult {
  std::vector<int32_t> c;     // [M, N] row-major
  GemmPlan plan;
  PerfCounters perf;          // PERF_* after the run (cleared before it)
  uint64_t cycles = 0;        // PERF_CYCLES
  double utilization = 0;     // M*K*N / (N^2 * cycles)
  uint64_t min_bytes = 0;     // M*K + K*N + 4*M*N
  uint64_t instructions = 0;  // program length including the FENCE
  uint64_t sim_cycles = 0;    // backend clock cycles that passed (includes register accesses)
  double wall_s = 0;          // wall time of submit + wait
};

/// Runs the GEMM on `device`. a: M*K int8, b: K*N int8 (row-major). Throws Error(kInvalidArgument)
/// for a zero dimension or spans of the wrong size, and whatever the driver throws.
GemmResult gemm(Device& device, std::span<const int8_t> a, std::span<const int8_t> b, const GemmShape& shape,
                const GemmOptions& options = {});

}  // namespace tpuw::runtime
