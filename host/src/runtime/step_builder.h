// Internal to the runtime: composing several phases (bf16 GEMMs, vector passes) into one device
// program. The local memories are tracked at tile granularity (a UB/WB chunk is one bf16 tile row
// block of 2*ArrayN rows, an ACC chunk ArrayN rows), so phases with different tilings that reuse
// the same rows are ordered by the program builder's hazard tokens. Device-memory buffers are
// resources too: a LOAD that reads what an earlier STORE of the same program wrote (a layer's
// output feeding the next phase) is ordered behind it through a COMPUTE NOP, and a STORE that
// overwrites what an earlier LOAD read, likewise (the builder only links adjacent queues).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "program_builder.h"
#include "tpuw/device_configs.h"
#include "tpuw/runtime/gemm_bf16.h"

namespace tpuw::runtime::detail {

class StepBuilder {
 public:
  StepBuilder(const DeviceParams& params, size_t host_buffers);

  Builder& builder() { return b_; }
  uint32_t array_n() const { return an_; }
  uint32_t beat() const { return beat_; }
  const DeviceParams& params() const { return params_; }

  /// Resources covering local rows [row, row + rows) of a memory.
  std::vector<size_t> ub(uint64_t row, uint64_t rows) const;
  std::vector<size_t> wb(uint64_t row, uint64_t rows) const;
  std::vector<size_t> acc(uint64_t row, uint64_t rows) const;
  size_t host(size_t buffer) const { return host0_ + buffer; }

  /// LOAD into `mem` (local rows from the transfer's row bytes); `host_buf` is the device-memory
  /// buffer read, if it is one of the program's buffers.
  void load(spec::Mem mem, const Transfer& t, std::optional<size_t> host_buf = std::nullopt);
  /// STORE from `mem` to `host_buf` (if tracked).
  void store(spec::Mem mem, const Transfer& t, std::optional<size_t> host_buf = std::nullopt);
  /// A COMPUTE instruction reading and writing local resources.
  void compute(isa::Instr in, const std::vector<size_t>& reads, const std::vector<size_t>& writes,
               bool is_matmul = false);

  MergedProgram finish();

 private:
  enum class HostState : uint8_t { kNone, kLoaded, kStored };
  std::vector<size_t> range(size_t base, uint64_t chunk, uint64_t row, uint64_t rows) const;
  uint64_t local_rows(spec::Mem mem, const Transfer& t) const;

  DeviceParams params_;
  uint32_t an_, beat_;
  uint64_t ub_chunk_, wb_chunk_, acc_chunk_;
  size_t ub0_, wb0_, acc0_, host0_;
  std::vector<HostState> host_state_;
  Builder b_;
};

/// Device-memory buffers (StepBuilder host buffer indices) of a GEMM's operands, when tracked.
struct Bf16GemmHostBufs {
  std::optional<size_t> a, b, c, bias, z;
};
// (With spec.sgd, master/momentum/copy are read and written by their own strip only: no tracking.)

/// A caller's epilogue on each finished fp32 strip of a GEMM (one M tile x one column block of
/// ArrayN columns, strip = m tile * n_blocks + column block), instead of storing C. `prefetch(s)`
/// is called while an earlier strip computes (just after the middle fold of strip s - 1, or
/// before the first fold for strip 0) to emit strip s's loads; `finish(s, acc_row)` after strip s's last MATMUL,
/// with the product in ACC rows [acc_row, acc_row + rows of its M tile). The epilogue may use the
/// UB rows from gemm_ub_rows(plan) and the ACC rows from gemm_acc_rows(plan) on.
struct Bf16GemmEpilogue {
  /// Optional: called one fold before `prefetch(s)` (the place for Builder::bridge of the rows
  /// prefetch reloads, so that its NOP is done by the time the LOADs are).
  std::function<void(uint64_t strip)> bridge;
  std::function<void(uint64_t strip)> prefetch;
  std::function<void(uint64_t strip, uint64_t acc_row)> finish;
};

/// Local rows the GEMM of `plan` uses (from row 0).
uint64_t gemm_ub_rows(const Bf16GemmPlan& plan);
uint64_t gemm_acc_rows(const Bf16GemmPlan& plan);

/// Appends the bf16 GEMM of `plan` to `sb` (the program of compile_gemm_bf16), or with
/// `epilogue.finish` set, the fp32 product of a GEMM without accumulate, ReLU, Z or SGD epilogue
/// (with a bias: the bias-preset sum) handed to it strip by strip. With bf16_out the plan reserves
/// the two UB output buffers (the last 4 * m_tile of gemm_ub_rows) for the caller.
void emit_gemm_bf16(StepBuilder& sb, const Bf16GemmPlan& plan, const Bf16GemmAddrs& addrs,
                    const Bf16GemmHostBufs& bufs = {}, const Bf16GemmEpilogue& epilogue = {});

}  // namespace tpuw::runtime::detail
