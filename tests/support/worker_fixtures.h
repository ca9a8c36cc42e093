// Worker options shared by the multi-device trainer tests (tests/unit/worker).
#pragma once

#include <cstdint>

#include "tpuw/worker/worker.h"

namespace tpuw::test {

/// `devices` ref devices of array_n x array_n, no retries (a fault must show), 20 s per-task timeout.
inline worker::WorkerOptions ref_worker_options(unsigned devices, uint32_t array_n = 16) {
  worker::WorkerOptions o;
  o.backend = "ref";
  o.config.array_n = array_n;
  o.devices = devices;
  o.max_attempts = 1;
  o.device_options.timeout_seconds = 20.0;
  return o;
}

}  // namespace tpuw::test
