// Internal to the runtime: the max-pool program emitter shared by int8 (compile_max_pool) and
// bf16 (compile_max_pool_bf16); tpuw/runtime/maxpool.h describes the program.
#pragma once

#include <cstdint>

#include "tpuw/runtime/conv.h"

namespace tpuw::runtime::detail {

/// The max pool's program for `plan` (without the FENCE): int8 (IMAX, param rows at param_addr) or
/// bf16 (UB row pairs, MAX, ACTIVATE bf16; param_addr unused).
ConvProgram emit_max_pool(const ConvPlan& plan, bool bf16, bool relu, uint64_t in_addr, uint64_t w_addr,
                          uint64_t param_addr, uint64_t out_addr);

}  // namespace tpuw::runtime::detail
