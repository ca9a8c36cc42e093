#include "tpuw/sim/sim_device.h"

#include <fmt/format.h>

#include <utility>

#include "sim_device_impl.h"

namespace tpuw::sim {

namespace {

std::string sizes_text() {
  std::string s;
  for (const auto& p : kDeviceConfigs) s += fmt::format("{}{}", s.empty() ? "" : ", ", p.array_n);
  return s;
}

const char* resp_name(uint8_t resp) {
  switch (resp) {
    case kAxiOkay: return "OKAY";
    case kAxiExOkay: return "EXOKAY";
    case kAxiSlvErr: return "SLVERR";
    default: return "DECERR";
  }
}

}  // namespace

SimDevice::SimDevice(const SimDeviceConfig& config) {
  const DeviceParams* p = find_device_config(config.array_n);
  if (p == nullptr) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("SimDevice: array size {} was not built; available sizes: {}",
                               config.array_n, sizes_text()));
  }
  impl_ = detail::make_model(config, *p);
  if (!impl_) {
    throw SimError(SimErrorKind::kInvalidArgument,
                   fmt::format("SimDevice: no verilated model for array size {}; available sizes: {}",
                               config.array_n, sizes_text()));
  }
}

SimDevice::~SimDevice() = default;
SimDevice::SimDevice(SimDevice&&) noexcept = default;
SimDevice& SimDevice::operator=(SimDevice&&) noexcept = default;

std::vector<unsigned> SimDevice::available_array_sizes() {
  std::vector<unsigned> v;
  for (const auto& p : kDeviceConfigs) v.push_back(p.array_n);
  return v;
}

const DeviceParams& SimDevice::params() const noexcept { return impl_->params_; }

AxilResult SimDevice::try_read_reg(uint32_t offset) {
  impl_->axil_.start_read(offset);
  if (!impl_->run_axil(impl_->config_.reg_timeout_cycles)) {
    const char* what = impl_->axil_.waiting_for();
    impl_->axil_.abort();
    impl_->check_model_errors();
    throw SimError(SimErrorKind::kTimeout,
                   fmt::format("SimDevice: register read at offset {:#05x}: no {} from the device within "
                               "{} cycles (cycle {})",
                               offset, what, impl_->config_.reg_timeout_cycles, impl_->cycle_));
  }
  impl_->check_model_errors();
  return impl_->axil_.result();
}

uint8_t SimDevice::try_write_reg(uint32_t offset, uint32_t value, uint8_t strb) {
  impl_->axil_.start_write(offset, value, strb);
  if (!impl_->run_axil(impl_->config_.reg_timeout_cycles)) {
    const char* what = impl_->axil_.waiting_for();
    impl_->axil_.abort();
    impl_->check_model_errors();
    throw SimError(SimErrorKind::kTimeout,
                   fmt::format("SimDevice: register write of {:#010x} at offset {:#05x}: no {} from the "
                               "device within {} cycles (cycle {})",
                               value, offset, what, impl_->config_.reg_timeout_cycles, impl_->cycle_));
  }
  impl_->check_model_errors();
  return impl_->axil_.result().resp;
}

uint32_t SimDevice::read_reg(uint32_t offset) {
  const AxilResult r = try_read_reg(offset);
  if (!r.ok()) {
    throw SimError(SimErrorKind::kBusError,
                   fmt::format("SimDevice: register read at offset {:#05x} answered {}", offset,
                               resp_name(r.resp)));
  }
  return r.data;
}

void SimDevice::write_reg(uint32_t offset, uint32_t value) {
  const uint8_t resp = try_write_reg(offset, value);
  if (resp != kAxiOkay && resp != kAxiExOkay) {
    throw SimError(SimErrorKind::kBusError,
                   fmt::format("SimDevice: register write of {:#010x} at offset {:#05x} answered {}",
                               value, offset, resp_name(resp)));
  }
}

HostMemory& SimDevice::memory() noexcept { return impl_->mem_; }
const HostMemory& SimDevice::memory() const noexcept { return impl_->mem_; }
void SimDevice::mem_write(uint64_t addr, const void* src, size_t bytes) { impl_->mem_.write(addr, src, bytes); }
void SimDevice::mem_read(uint64_t addr, void* dst, size_t bytes) const { impl_->mem_.read(addr, dst, bytes); }

bool SimDevice::irq() const noexcept { return impl_->irq(); }

uint64_t SimDevice::run(uint64_t max_cycles) {
  const uint64_t n = impl_->run(max_cycles);
  impl_->check_model_errors();
  return n;
}

void SimDevice::reset() {
  if (impl_->hang_) return;  // a hung device does not take the reset either
  impl_->hw_reset(impl_->config_.reset_cycles);
}

void SimDevice::tick(uint64_t n) {
  impl_->tick(n);
  impl_->check_model_errors();
}

uint64_t SimDevice::cycle() const noexcept { return impl_->cycle_; }

void SimDevice::inject_memory_fault(bool on) noexcept { impl_->slave_.set_fail_all(on); }
void SimDevice::inject_hang(bool on) noexcept { impl_->hang_ = on; }
bool SimDevice::memory_fault_injected() const noexcept { return impl_->slave_.fail_all(); }
bool SimDevice::hang_injected() const noexcept { return impl_->hang_; }

void SimDevice::start_wave(const std::string& path, uint64_t from, uint64_t to) {
  impl_->set_wave(path, from, to);
}
void SimDevice::stop_wave() { impl_->stop_wave(); }
bool SimDevice::wave_active() const noexcept { return impl_->wave_active(); }

const AxiSlaveStats& SimDevice::axi_stats() const noexcept { return impl_->slave_.stats(); }

}  // namespace tpuw::sim
