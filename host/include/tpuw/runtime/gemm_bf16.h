// bf16 GEMM on a TPU Worker device (ISA 1.1): C (fp32) = op(A) . op(B) (+ C), op = identity or
// transpose, A and B bf16 in device memory, fp32 accumulation (docs/numerics.md), optional fused
// epilogue (bias, ReLU, bf16 output) by ACTIVATE bf16. The building block of training
// (docs/training.md): dX = dY . W^T uses a transposed B (LOADW transpose), dW = X^T . dY a
// transposed A (TRANSPOSE on UB tiles); the host never transposes anything.
//
// Device-memory layout ("padded matrix"): a logical [R, C] matrix is stored row-major with
// round_up(R, ArrayN) rows and round_up(C, ArrayN) columns, the padding zero. Row stride =
// element bytes * padded columns. bf16 elements are 2 bytes (little-endian upper half of the
// fp32), fp32 elements 4 bytes. Every operand tile is then one strided LOAD (a bf16 row of ArrayN
// elements is a UB/WB row pair) and every output strip one strided STORE: no host repacking.
//   A: [M, K] (trans_a: stored [K, M]);  B: [K, N] (trans_b: stored [N, K]);
//   C: [M, N] fp32 (read first when accumulate), or [M, N] bf16 with the bf16 epilogue;
//   bias: [N] fp32 (one padded row); Z: [M, N] fp32 (the ACC before the epilogue, z_out).
//
// The program (program_builder.h does the tokens): for each M tile (a multiple of ArrayN rows),
// for each output strip of ArrayN columns, for each K block in increasing k ("fold"):
//   LOAD  B tile (kb, nb) -> WB slot (ring)       [trans_b: rows of B^T's tile, LOADW transpose]
//   LOAD  A block (mt, kb) -> UB slot if not there [trans_a: A^T tiles LOADed to a scratch pair
//                                                   and TRANSPOSEd into the slot, ArrayN rows each]
//   LOADW bf16 WB slot
//   MATMUL bf16 UB slot -> ACC strip buffer (swap, accumulate = kb > 0 || accumulate)
// then STORE ACC -> C (fp32), or ACTIVATE bf16 (relu) ACC -> UB out buffer, STORE -> C (bf16)
// (and STORE ACC -> Z). ACC holds two strip buffers (double buffered); with `bias` a strip starts
// as the bias row in every row (LOAD, host stride 0). K folds accumulate in increasing k, so the
// result is the contract's `acc + s` chain, reproduced by gemm_bf16_host.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"
#include "tpuw/runtime/gemm.h"

namespace tpuw::runtime {

/// What to compute. shape is the logical product: op(A) [M, K], op(B) [K, N], C [M, N].
struct Bf16GemmSpec {
  GemmShape shape;
  bool trans_a = false;     ///< A is stored [K, M]; op(A) = A^T (TRANSPOSE on the device)
  bool trans_b = false;     ///< B is stored [N, K]; op(B) = B^T (LOADW transpose)
  bool accumulate = false;  ///< C (fp32) is read and the product added to it: C = C + op(A) op(B)
  bool bias = false;        ///< the ACC starts as the fp32 bias row broadcast to every row (one LOAD
                            ///< with host stride 0) and every fold is added to it: C = b + op(A) op(B)
  bool bf16_out = false;    ///< epilogue: ACTIVATE bf16 (relu) and bf16 C instead of fp32 C
  bool relu = false;        ///< bf16_out only: ReLU before the rounding
  bool z_out = false;       ///< bf16_out only: also STORE the fp32 ACC (before ReLU) to Z [M, N]
  /// SGD epilogue (training, docs/training.md): C is the gradient of a parameter stored [M, N]
  /// fp32 at `master` with momentum at `momentum` and bf16 working copy at `copy`; instead of
  /// storing C, each strip updates them: d = w*wd + g (wd != 0), v = v*momentum + d and
  /// w = v*(-lr) + w (momentum != 0) or w = d*(-lr) + w, copy = bf16(w). fp32 output only.
  bool sgd = false;
  float lr = 0.0f, momentum = 0.0f, weight_decay = 0.0f;
};

/// Tiling decisions for one spec on one device configuration.
struct Bf16GemmPlan {
  Bf16GemmSpec spec;
  uint32_t array_n = 0;
  uint32_t beat = 0;
  uint64_t mp = 0, kp = 0, np = 0;  ///< padded sizes (multiples of array_n)
  uint64_t m_tile = 0;              ///< rows per M tile (multiple of array_n)
  uint64_t m_tiles = 0;
  uint64_t k_blocks = 0, n_blocks = 0;
  bool a_resident = true;           ///< the K extent of an M tile stays in the UB
  uint32_t a_slots = 0;             ///< UB slots of 2 * m_tile rows (bf16 row pairs)
  uint32_t w_slots = 0;             ///< WB slots of 2 * array_n rows
  uint64_t folds = 0;

  uint64_t rows_of_tile(uint64_t mt) const { return std::min(m_tile, mp - mt * m_tile); }
  /// Bytes of the padded operands in device memory.
  uint64_t a_bytes() const { return 2 * mp * kp; }
  uint64_t b_bytes() const { return 2 * kp * np; }
  uint64_t c_bytes() const { return (spec.bf16_out ? 2 : 4) * mp * np; }
  uint64_t z_bytes() const { return 4 * mp * np; }
  uint64_t bias_bytes() const { return 4 * np; }
  uint64_t macs() const { return spec.shape.m * spec.shape.k * spec.shape.n; }
};

/// Chooses the tiling. Throws Error(kInvalidArgument) for a zero dimension or an epilogue option
/// without bf16_out, Error(kUnsupported) when the configuration cannot hold one tile.
Bf16GemmPlan plan_gemm_bf16(const DeviceParams& params, const Bf16GemmSpec& spec);

/// Host addresses of the padded operands (beat-aligned). bias only with spec.bias, z with z_out.
struct Bf16GemmAddrs {
  uint64_t a = 0, b = 0, c = 0, bias = 0, z = 0;
  uint64_t master = 0, momentum = 0, copy = 0;  ///< spec.sgd only (c is then not written)
};

/// Compiles the program (without the final FENCE: the driver appends it).
GemmProgram compile_gemm_bf16(const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs);

namespace bf16 {
/// fp32 -> bf16 bits, docs/numerics.md rule 7 (flush subnormals, round to nearest even, NaN -> 0x7FC0).
uint16_t from_float(float x);
/// bf16 bits -> fp32 (exact; rule 1 flushes a subnormal, rule 5 canonical NaN).
float to_float(uint16_t b);
/// x rounded to bf16 precision and back (from_float then to_float): how `tpuw gemm --dtype bf16`
/// and the trainer turn fp32 operands into bf16 ones.
float round(float x);
/// One fp32 addition of the device (rules 1-6).
float add(float a, float b);
/// One exact bf16 x bf16 product as the MXU forms it (rules 1, 3, 5, 6).
float mul_exact(float a, float b);
}  // namespace bf16

/// Zero-padded device layout of a row-major [rows, cols] matrix (see the header comment):
/// bf16 bits (round-to-nearest-even) or fp32 bits.
std::vector<uint16_t> pad_bf16(std::span<const float> m, uint64_t rows, uint64_t cols, uint32_t array_n);
std::vector<float> pad_f32(std::span<const float> m, uint64_t rows, uint64_t cols, uint32_t array_n);
/// The logical [rows, cols] part of a padded matrix.
std::vector<float> unpad_f32(std::span<const float> p, uint64_t rows, uint64_t cols, uint32_t array_n);
std::vector<float> unpad_bf16(std::span<const uint16_t> p, uint64_t rows, uint64_t cols, uint32_t array_n);

/// The exact contract on the host: what the device computes for `spec` on an array of `array_n`,
/// bit for bit (products exact, column sums k = 0 .. ArrayN-1 per K block from +0 including the
/// zero padding, folds added in increasing k, epilogue). a, b are the stored matrices (row-major,
/// logical shapes per the spec), already bf16 values; c_in the fp32 C when accumulating; bias [N].
/// Returns C [M, N] as fp32 (bf16_out: the bf16 values widened); `z`, when given, receives the
/// fp32 ACC before the epilogue.
std::vector<float> gemm_bf16_host(const Bf16GemmSpec& spec, uint32_t array_n, std::span<const float> a,
                                  std::span<const float> b, std::span<const float> c_in = {},
                                  std::span<const float> bias = {}, std::vector<float>* z = nullptr);

struct Bf16GemmResult {
  std::vector<float> c;  ///< [M, N]
  std::vector<float> z;  ///< [M, N] with z_out
  Bf16GemmPlan plan;
  PerfCounters perf;
  uint64_t cycles = 0;
  double utilization = 0;  ///< M*K*N / (N^2 * cycles)
  uint64_t instructions = 0;
  double wall_s = 0;
};

/// Runs the GEMM on `device`. a, b: the stored matrices (row-major; rounded to bf16 here), c_in:
/// [M, N] fp32 when accumulating, bias: [N] with spec.bias. Throws Error(kUnsupported) when the
/// device lacks FEATURES.BF16 (or TRANSPOSE for a transposed operand), Error(kInvalidArgument) for
/// spans of the wrong size, and whatever the driver throws.
Bf16GemmResult gemm_bf16(Device& device, const Bf16GemmSpec& spec, std::span<const float> a,
                         std::span<const float> b, std::span<const float> c_in = {},
                         std::span<const float> bias = {}, const GemmOptions& options = {});

}  // namespace tpuw::runtime
