// Errors of the simulation layer. sim/ sits below host/ and does not include it, so it has its own
// exception type; host/src/backends/rtl_backend.cpp maps SimErrorKind onto tpuw::ErrorKind.
#pragma once

#include <stdexcept>
#include <string>

namespace tpuw::sim {

enum class SimErrorKind {
  kInvalidArgument,  // bad configuration (unknown array size, zero memory size, ...)
  kOutOfRange,       // a CPU-side host-memory access outside [base, base+size)
  kBusError,         // an AXI4-Lite register access answered SLVERR or DECERR
  kTimeout,          // the device did not answer an AXI4-Lite access in time
  kIo,               // waveform file could not be written
  kAssertion,        // an RTL assertion (or $stop/$error) fired in the device model
  kOutOfMemory,      // the host process could not allocate the model's memory
};

class SimError : public std::runtime_error {
 public:
  SimError(SimErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  SimErrorKind kind() const noexcept { return kind_; }

 private:
  SimErrorKind kind_;
};

}  // namespace tpuw::sim
