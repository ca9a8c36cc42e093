// Private: the model-independent half of SimDevice. The model-specific half (ModelImpl<Top>,
// sim_model.h) derives from it; only sim_models.cpp (generated) sees verilated headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tpuw/sim/sim_device.h"

namespace tpuw::sim {

class SimDevice::Impl {
 public:
  Impl(const SimDeviceConfig& config, const DeviceParams& params)
      : config_(config),
        params_(params),
        mem_(config.memory.base, config.memory.size, config.memory.mapped),
        slave_(mem_, config.memory, params.dma_data_w / 8) {}
  virtual ~Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  /// Clock n cycles.
  virtual void tick(uint64_t n) = 0;
  /// Clock until irq_o or max_cycles; returns cycles run.
  virtual uint64_t run(uint64_t max_cycles) = 0;
  /// Clock until the AXI4-Lite master is idle or `timeout` cycles passed; false on timeout.
  virtual bool run_axil(uint64_t timeout) = 0;
  virtual bool irq() const noexcept = 0;
  /// rst_ni low for `cycles` cycles with the host side idle (nothing in flight afterwards).
  virtual void hw_reset(unsigned cycles) = 0;
  /// Throws SimError(kAssertion) once when the model reported an error since the last check.
  virtual void check_model_errors() = 0;
  /// (Re)arm the waveform window; closes an open file first.
  virtual void set_wave(const std::string& path, uint64_t from, uint64_t to) = 0;
  virtual void stop_wave() = 0;
  virtual bool wave_active() const noexcept = 0;

  const SimDeviceConfig config_;
  const DeviceParams params_;
  HostMemory mem_;
  AxiSlave slave_;
  AxilMaster axil_;
  uint64_t cycle_ = 0;
  bool hang_ = false;  // fault injection: the clock keeps counting, the model is not evaluated
};

namespace detail {
/// Implemented in the generated sim_models.cpp: the model of configuration `params`.
std::unique_ptr<SimDevice::Impl> make_model(const SimDeviceConfig& config, const DeviceParams& params);
}  // namespace detail

}  // namespace tpuw::sim
