// Training checkpoints (`tpuw train --checkpoint DIR`, `--resume DIR`): a directory holding the
// whole training state, so a resumed run gives bit-identical weights. docs/training.md
// "Checkpoint format" is the reference; in short (version 2):
//
//   DIR/manifest.json        the newest generation: {"format": "tpuw-train-checkpoint",
//                            "version": 2, "generation", "step", "epoch", "position",
//                            "epoch_loss_sum", "epoch_rows", "rng", "trainer", "options": {...},
//                            "params": [{"name", "file", "shape", "bytes", "sha256"}],
//                            "momentum": [...], "sha256"}
//   DIR/manifest.prev.json   the generation before it, in the same format
//   DIR/g<GEN>-p<I>.npy      parameter I of generation GEN (float32, the initializer's shape)
//   DIR/g<GEN>-m<I>.npy      its momentum buffer
//
// Checksums: every tensor file's size and SHA-256 are in the manifest; the manifest's last member,
// "sha256", is the SHA-256 of every byte of manifest.json before the line that holds it.
//
// Crash consistency: a save writes the new generation's tensor files (each through an AtomicFile:
// temporary in DIR, fsync, rename, fsync of DIR), then replaces manifest.json (the commit point),
// then writes the manifest it replaced, if that checked out, to manifest.prev.json, then removes
// the files neither manifest names: two distinct complete generations exist at every instant. File names carry a generation number one above any in the
// directory, so a save never overwrites a file that a manifest names. A kill -9 at any instant
// leaves manifest.json naming a complete generation. A checkpoint that does not check out (torn by
// a power loss, truncated, edited, a file missing) is detected when it is read, and the previous
// generation is used instead (Checkpoint::fallback says why).
//
// Initializer names are kept in the manifest only (they may hold '/' or ':'), never in file names.
// Version 1 checkpoints (manifest.json without checksums, files s<STEP>-p<I>.npy) are still read.
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
  // Set by load_checkpoint (save_checkpoint ignores them):
  int64_t generation = 0;        // 0 for a version 1 checkpoint
  std::filesystem::path manifest;  // the manifest it was read from
  std::string fallback;          // why the newest generation was not used; empty when it was
};

/// Writes `c` into `dir` (created when missing) as a new generation, keeping the previous one;
/// `shapes` gives each parameter's dims (a parameter without an entry is written 1-D).
/// Error(kBadFile) naming the file on a write failure (kResource when the disk is full); the
/// checkpoints already in `dir` are then intact.
void save_checkpoint(const std::filesystem::path& dir, const Checkpoint& c,
                     const std::map<std::string, std::vector<int64_t>>& shapes);

/// Reads the newest generation that checks out (manifest checksum, every value in range, every
/// tensor file present with its recorded size and checksum, float32 of its recorded shape): that
/// of manifest.json, else that of manifest.prev.json (with `fallback` set). Error(kBadFile)
/// "DIR/manifest.json: ..." when neither does, naming what is wrong with each.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

/// Checks a loaded checkpoint against the run that resumes it (rows training rows, `batch` rows
/// per step, `epochs` epochs; `param_sizes` the model's parameters and their element counts):
/// 0 <= position <= steps per epoch, step == epoch x steps per epoch + position, epoch <= epochs,
/// epoch_rows == min(position x batch, rows), the loss sum 0 at position 0, the parameters and
/// momentum buffers exactly the model's. Error(kBadFile) "MANIFEST: ..." otherwise.
void check_resume(const Checkpoint& c, int64_t rows, int64_t batch, int64_t epochs,
                  const std::map<std::string, uint64_t>& param_sizes);

}  // namespace tpuw::runtime
