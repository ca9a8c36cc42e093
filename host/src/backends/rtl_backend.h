// Private to tpuw_backends: the rtl backend's factory. The class itself lives in rtl_backend.cpp so
// that nothing above this folder sees the simulation layer's headers.
#pragma once

#include <memory>
#include <vector>

#include "tpuw/backend.h"

namespace tpuw::backends {

/// Array sizes of the verilated configurations.
std::vector<unsigned> rtl_array_sizes();

/// A verilated tpu_top clocked by tpuw::sim::SimDevice; SimError is mapped onto tpuw::Error.
std::unique_ptr<Backend> make_rtl_backend(const BackendConfig& config);

}  // namespace tpuw::backends
