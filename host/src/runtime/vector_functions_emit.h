// Internal to the runtime: emitting a VecFunction (tpuw/runtime/vector_functions.h) on ACC rows.
#pragma once

#include <cstdint>

#include "step_builder.h"
#include "tpuw/runtime/vector_functions.h"

namespace tpuw::runtime::detail {

/// Appends f's VECTOR instructions over `rows` ACC rows: register 0 at `acc_row`, register r > 0 at
/// `scratch_row + (r - 1) * stride` (stride >= rows). Returns the ACC row of the result.
uint64_t emit_vec_function(StepBuilder& sb, const VecFunction& f, uint64_t acc_row, uint64_t scratch_row,
                           uint64_t stride, uint64_t rows);

}  // namespace tpuw::runtime::detail
