// The `ref` backend: a bit-exact C++ model of tpu_top behind the Backend interface.
//
// Same register map (docs/isa.md), same fetch / decode / validate / dispatch rules, the same
// three bounded queues and four token counters, FENCE and fault semantics as the RTL
// (docs/architecture.md), with its own host memory. Results are bit-identical to the RTL; the
// cycle count is an analytic estimate whose constants all live in PerfModel below (the model
// is described in docs/perf_model.md; calibration against the RTL = changing those numbers).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tpuw/backend.h"
#include "tpuw/device_configs.h"
#include "tpuw/sim_control.h"

namespace tpuw::ref {

/// Every timing constant of the analytic cycle model. Defaults are estimates from the
/// micro-architecture description; see docs/perf_model.md for the rationale of each and for
/// how to calibrate against the RTL. Host memory latency and bandwidth come from
/// HostMemoryConfig, the array size, DMA width and queue depth from DeviceParams.
struct PerfModel {
  // Command processor.
  unsigned doorbell_to_fetch = 2;     // register write -> first AR of the instruction fetch
  unsigned fetch_burst_instrs = 16;   // instructions per fetch burst (prefetch buffer size)
  unsigned decode_cycles = 1;         // fetch buffer -> decoded and dispatched, per instruction
  unsigned issue_cycles = 1;          // queue FIFO head -> engine (token check + handshake)

  // DMA engines (LOAD: AR/R, STORE: AW/W/B; read and write channels are independent).
  unsigned dma_setup = 2;             // per instruction: address generation before the first AR/AW
  unsigned dma_burst_gap = 0;         // idle data-bus cycles between two bursts of one channel
  unsigned local_write_latency = 2;   // last R beat -> row written into UB/WB/ACC
  unsigned local_read_latency = 2;    // STORE: row request -> data ready for the W channel
  bool dma_pipelined = true;          // next LOAD/STORE may start before the previous is done

  // MXU (weight-stationary, double-buffered weights).
  unsigned mxu_fill_per_n = 2;        // fill/drain latency = mxu_fill_per_n * N + mxu_fill_extra
  unsigned mxu_fill_extra = 2;        //   (skew in, array depth, de-skew out, ACC write)
  unsigned loadw_extra = 1;           // LOADW shifter busy = N + loadw_extra cycles
  unsigned matmul_issue = 1;          // compute engine: cycles to accept a MATMUL
  unsigned wb_read_latency = 1;       // WB row read -> shifter, before the first shift cycle

  // Activation unit.
  unsigned act_pipeline = 6;          // ACTIVATE = rows + act_pipeline (ACC read, bias, mult,
                                      //   shift/round, saturate, UB write); same in bf16 mode

  // ISA 1.1 (bf16 MATMUL runs at the int8 rate: one row, i.e. one UB row pair, per cycle).
  unsigned transpose_pipeline = 2;    // TRANSPOSE = rows + N + transpose_pipeline (read `rows` tile
                                      //   rows into the transpose buffer, then write N rows; a tile
                                      //   row is a UB row pair in bf16 mode)
  unsigned vector_pipeline = 4;       // VECTOR = rows + vector_pipeline (ACC reads, fp32 op, ACC
                                      //   write; COLSUM too: one row read per cycle)

  // FENCE.
  unsigned fence_overhead = 2;        // drain detected -> AW issued; plus 1 beat + write latency
};

/// Build options of the modelled device beyond DeviceParams (the tpu_top parameters that change
/// the instruction set, not the sizes).
struct RefConfig {
  /// The RTL parameter EnableBf16: with it off the device has no bf16 MXU mode, no fp32 ACTIVATE
  /// and no VECTOR unit: FEATURES.BF16 reads 0, a set `bf16` mode bit (bit 14 of LOADW, MATMUL,
  /// ACTIVATE, TRANSPOSE) is ILLEGAL_FIELD (FAULT_INFO 14) and VECTOR is ILLEGAL_OPCODE.
  bool enable_bf16 = true;
  /// The RTL parameter EnableLut: with it off FEATURES.LUT reads 0 and ACTIVATE `lut` (bit 15) is
  /// ILLEGAL_FIELD (FAULT_INFO 15).
  bool enable_lut = true;
};

class RefDevice final : public Backend, public SimControl {
 public:
  /// Any array_n >= 1 is accepted; the depths must be >= 1 and dma_data_w a power of two >= 8.
  /// Throws Error(kInvalidArgument) otherwise.
  RefDevice(const DeviceParams& params, const HostMemoryConfig& memory, const PerfModel& model = {},
            const RefConfig& config = {});
  ~RefDevice() override;
  RefDevice(const RefDevice&) = delete;
  RefDevice& operator=(const RefDevice&) = delete;

  std::string_view name() const override { return "ref"; }

  /// Undefined offsets (not in the register map, unaligned, >= 4096) throw
  /// Error(kInvalidArgument) naming the offset: the RTL answers SLVERR there.
  /// Writes to read-only registers are ignored, as in the RTL.
  uint32_t read_reg(uint32_t offset) override;
  void write_reg(uint32_t offset, uint32_t value) override;

  uint64_t mem_base() const override;
  uint64_t mem_size() const override;
  void mem_map(uint64_t addr, uint64_t bytes) override;
  uint64_t mem_mapped() const override;
  /// Throws Error(kInvalidArgument) when the range is not mapped host memory.
  void mem_write(uint64_t addr, const void* src, size_t bytes) override;
  void mem_read(uint64_t addr, void* dst, size_t bytes) override;

  /// Power-on state: registers at their reset values (DMA window [0, 0xFFFFFFFF], IRQ_ENABLE 0),
  /// queues, tokens and the MXU's weight registers cleared; memories kept, time keeps counting.
  void reset() override;

  /// Runs one slice of model time (set_wait_slice, default 20000 cycles) unless irq is high.
  bool wait_irq(double timeout_s) override;
  SimControl* sim_control() override { return this; }

  // SimControl
  /// Level of the interrupt line.
  bool irq();
  uint64_t run(uint64_t max_cycles) override;
  uint64_t cycles() const override;
  void set_wait_slice(uint64_t cycles) override;
  /// The ref model has no signals to trace: Error(kUnsupported).
  void start_wave(const std::string& path, uint64_t from, uint64_t to) override;
  void stop_wave() override {}
  /// Fault injection: a memory fault refuses every device access to host memory (AXI_ERROR
  /// fault); a hang lets run() pass time without progress and fails register accesses (kTimeout).
  void inject_memory_fault(bool on) override;
  void inject_hang(bool on) override;

  const DeviceParams& params() const;
  const PerfModel& perf_model() const;
  const RefConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpuw::ref
