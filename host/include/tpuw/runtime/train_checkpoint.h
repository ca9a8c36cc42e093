// Training checkpoints (`tpuw train --checkpoint DIR`, `--resume DIR`): a directory holding the
// whole training state, so a resumed run gives bit-identical weights.
//
//   DIR/manifest.json              {"format": "tpuw-train-checkpoint", "version": 1, "step",
//                                  "epoch", "position", "epoch_loss_sum", "epoch_rows", "rng",
//                                  "trainer", "options": {...}, "params": [{"name", "file",
//                                  "shape"}], "momentum": [...]}
//   DIR/s<STEP>-p<I>.npy           parameter I (float32, the initializer's own shape)
//   DIR/s<STEP>-m<I>.npy           its momentum buffer
//
// Atomic: every .npy is written through an AtomicFile (tpuw/file_io.h) under a name that carries
// the step, then manifest.json (the commit point) is replaced atomically, then the files of older
// checkpoints are removed. A crash at any moment leaves a complete older or newer checkpoint.
// Initializer names are kept in the manifest only (they may hold '/' or ':'), never in file names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tpuw/runtime/trainer.h"

namespace tpuw::runtime {

struct Checkpoint {
  TrainState state;              // params, momentum, steps taken
  int64_t epoch = 0;             // the epoch in progress (0-based)
  int64_t position = 0;          // steps of that epoch already taken
  double epoch_loss_sum = 0.0;   // sum of rows * batch loss over those steps
  int64_t epoch_rows = 0;        // rows of those steps
  std::string rng;               // shuffling generator state at the start of the epoch (hex)
  std::string trainer;           // Trainer::name() that wrote it
  nlohmann::ordered_json options = nlohmann::ordered_json::object();  // the run's options
};

/// Writes `c` into `dir` (created when missing); `shapes` gives each parameter's dims (a
/// parameter without an entry is written 1-D). Error(kBadFile) naming the file on a write failure.
void save_checkpoint(const std::filesystem::path& dir, const Checkpoint& c,
                     const std::map<std::string, std::vector<int64_t>>& shapes);

/// Reads a checkpoint; Error(kBadFile) "DIR/manifest.json: ..." when it is missing, malformed, or
/// names a file that is missing or does not match.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

}  // namespace tpuw::runtime
