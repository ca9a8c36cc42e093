// Internal to the runtime: the max-pool program emitter shared by int8 (compile_max_pool), bf16
// (compile_max_pool_bf16) and the pools with ONNX's Indices output (compile_max_pool_indices,
// through MaxPoolHooks); tpuw/runtime/maxpool.h describes the program.
#pragma once

#include <cstdint>

#include "program_builder.h"
#include "tpuw/runtime/conv.h"

namespace tpuw::runtime::detail {

/// One strip of the max-pool program (one channel block of one tile of images), as the hooks see it.
struct MaxPoolStrip {
  Builder& b;
  uint64_t tile = 0, ob = 0, nimg = 0;  // the tile, the channel block, its images
  uint64_t sb = 0;                      // the strip buffer (strip % plan.buffers)
  uint64_t r = 0, s = 0;                // ACC rows of the strip's R (the max) and S (a tap) buffers
  size_t r_res = 0, s_res = 0;          // their builder resources
  uint64_t rows = 0;                    // nimg * acc_rows: the strip's rows in R and in S
};

/// What a variant adds to the plain max-pool program. The emitter lays out the ACC as
/// [R 0 | R 1 | S 0 | S 1 | the hooks' acc_rows() | params (int8)] and numbers the hooks' builder
/// resources after its own; every method but acc_rows and resources may emit instructions.
class MaxPoolHooks {
 public:
  virtual ~MaxPoolHooks() = default;
  /// ACC rows and builder resources of the variant.
  virtual uint64_t acc_rows() const { return 0; }
  virtual size_t resources() const { return 0; }
  /// Called once before anything is emitted: where the variant's ACC rows and resources start.
  virtual void place(uint64_t /*acc_row*/, size_t /*first_resource*/) {}
  /// Strips in channel-block-major order (every tile of block 0, then of block 1, ...; each strip
  /// loads only its block of the input) instead of tile-major: for a variant with per-block state.
  virtual bool blocks_outer() const { return false; }
  /// int8: ACTIVATE adds the param rows' bias (the plain pool's bias row is 0 and unused).
  virtual bool int8_bias() const { return false; }
  /// At the start of a strip, before its first MATMUL.
  virtual void begin_strip(const MaxPoolStrip&) {}
  /// Before image i's MATMUL of `tap` into `dst` (R for tap 0, S after): returns true when the
  /// MATMUL is to accumulate onto what the hook wrote there.
  virtual bool before_matmul(const MaxPoolStrip&, uint64_t /*tap*/, uint64_t /*i*/, uint64_t /*dst*/) { return false; }
  /// After image i's MATMUL of `tap`.
  virtual void after_matmul(const MaxPoolStrip&, uint64_t /*tap*/, uint64_t /*i*/) {}
  /// After every image's MATMUL of tap > 0: folds S into R. Returns false to keep the plain
  /// pool's step (one VECTOR IMAX, bf16 MAX, R = max(R, S) over the strip).
  virtual bool combine(const MaxPoolStrip&, uint64_t /*tap*/) { return false; }
  /// After the STORE of image i's output row oy, whose block row (in pixels of every output) is
  /// `out_row` = ((img * o_blocks + ob) * ho + oy) * wo_stored.
  virtual void store_row(const MaxPoolStrip&, uint64_t /*i*/, uint64_t /*oy*/, uint64_t /*out_row*/) {}
};

/// The max pool's program for `plan` (without the FENCE): int8 (IMAX, param rows at param_addr) or
/// bf16 (UB row pairs, MAX, ACTIVATE bf16; param_addr unused); `hooks` add a variant's steps.
ConvProgram emit_max_pool(const ConvPlan& plan, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                          uint64_t param_addr, uint64_t out_addr, MaxPoolHooks* hooks = nullptr);

}  // namespace tpuw::runtime::detail
