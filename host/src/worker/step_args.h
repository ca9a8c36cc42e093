// Internal to tpuw_worker: the argument check every multi-device trainer's step() starts with.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "tpuw/compiler/training.h"
#include "tpuw/error.h"

namespace tpuw::worker::detail {

/// Throws Error(kInvalidArgument), naming `who`, unless `inputs` holds `rows` rows of the model's
/// input features, `labels` one class per row in [0, classes) and 1 <= rows <= batch. Checked on the
/// calling thread before any device work is queued, so a bad call changes no device's state.
inline void check_step_args(std::string_view who, const compiler::TrainModel& model, int64_t batch,
                            std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) {
  const int64_t in = model.input_features, classes = model.classes();
  if (rows < 1 || rows > batch || inputs.size() != static_cast<uint64_t>(rows * in) ||
      labels.size() != static_cast<uint64_t>(rows)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: {} input values and {} labels for {} rows of {} features (batch {})", who,
                            inputs.size(), labels.size(), rows, in, batch));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = labels[static_cast<size_t>(r)];
    if (y < 0 || y >= classes) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("label {} of row {} is not in [0, {})", y, r, classes));
    }
  }
}

}  // namespace tpuw::worker::detail
