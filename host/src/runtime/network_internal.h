// Internal to the network compiler: constants shared by its files (network_plan.cpp,
// network_emit.cpp, network_pack.cpp, network_run.cpp). See tpuw/runtime/network.h.
#pragma once

#include <cstdint>

namespace tpuw::runtime::netdetail {

constexpr uint32_t kMaxWSlots = 64;     // WB weight-tile ring slots (at most)
constexpr uint64_t kLookahead = 8;      // loads placed at most this many compute instructions early
constexpr uint64_t kParamRows = 6;      // ACC: 2 param slots x (bias, mult, shift)
constexpr uint64_t kPageAlign = 4096;   // host images are page-aligned

}  // namespace tpuw::runtime::netdetail
