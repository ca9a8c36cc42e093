// tpuw train MODEL.onnx --input X.npy --labels Y.npy --epochs E --batch B --lr LR [--momentum M]
//            [--weight-decay WD] --output TRAINED.onnx [--backend rtl|ref|host] [--validate XV.npy
//            --validate-labels YV.npy] [--checkpoint DIR [--checkpoint-every STEPS]] [--resume DIR]
//            [--shuffle --seed S] [--limit N] [--json] [--progress]
//            [--devices K --strategy mirrored|pipeline [--chunks C]]
//
//   1. check every option and input before anything runs (exit 2, nothing written): the model is
//      trainable (runtime::describe_trainable names the node otherwise), inputs float32 with the
//      model's input shape and finite, labels integer classes of the model, the same row count
//   2. build the trainer: HostFloatTrainer (host) or runtime::make_device_trainer (rtl, ref), or
//      with --devices K a worker::MirroredTrainer or worker::PipelineTrainer on a K-device
//      worker::Worker (docs/scaling.md)
//   3. --resume: the checkpoint's state and position (tpuw/runtime/train_checkpoint.h)
//   4. epochs of steps of --batch rows (the last one partial) in file order or, with --shuffle, in
//      the order of a seeded Fisher-Yates shuffle per epoch; checkpoints as asked; a loss that is
//      not finite stops training (exit 3) and leaves the last checkpoint as it was
//   5. the model with its trained initializers -> --output (atomic), and the report
#include "cmd_train.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.h"
#include "mpi_collective.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/onnx_writer.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/cnn_trainer.h"
#include "tpuw/runtime/device_trainer_factory.h"
#include "tpuw/runtime/host_float_trainer.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/train_checkpoint.h"
#include "tpuw/sha256.h"
#include "tpuw/sim_control.h"
#include "tpuw/worker/mirrored_trainer.h"
#include "tpuw/worker/pipeline_trainer.h"
#include "tpuw/worker/worker.h"

namespace tpuw::cli {

struct TrainOpts {
  std::string model, input, labels, output, validate, validate_labels, checkpoint, resume, trace;
  std::string backend = "ref";
  unsigned array_n = 16;
  int64_t epochs = 1;
  int64_t batch = 64;
  float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f;
  int64_t checkpoint_every = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t limit = 0;
  int64_t max_steps = 0;
  bool json = false, progress = false, quiet = false;
  unsigned devices = 0;             // 0: one device, the fused step; K: mirrored on K devices
  std::string strategy = "mirrored";
  int64_t chunks = 4;               // gradient chunks per batch (mirrored)
  std::string inject_fault;         // testing: "DEVICE:STEP:PHASE", a memory fault before that program
  double mpi_timeout = 120.0;       // seconds a rank waits for the others in the gradient exchange
};

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxOnnxBytes = uint64_t{2} << 30;
// --chunks: each chunk is one gradient part per step and per replica (its own programs and host
// buffers); more than this many per batch is a typing error, never a useful reduction order.
constexpr int64_t kMaxTrainChunks = 1024;

// ---- data -------------------------------------------------------------------------------------

struct Data {
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t rows = 0;
};

std::string model_shape(const std::vector<int64_t>& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size(); ++i) parts.push_back(s[i] < 0 ? (i == 0 ? "N" : "?") : std::to_string(s[i]));
  return fmt::format("({})", fmt::join(parts, ", "));
}

// Inputs: float32 [N, features] or [N, <the model input's other dimensions>], every value finite.
std::vector<float> load_inputs(const std::string& path, const runtime::TrainableModel& m, const char* opt,
                               int64_t& rows) {
  const npy::Array a = npy::load(path);
  const std::string want = fmt::format("float32 {} (the model input '{}') or (N, {})", model_shape(m.input_shape),
                                       m.input_name, m.input_features);
  if (a.dtype != npy::DType::kFloat32) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}; {} needs {}", path, npy::to_string(a.dtype), opt, want));
  }
  bool ok = a.rank() >= 2;
  uint64_t feat = 1;
  for (size_t i = 1; i < a.rank(); ++i) feat *= a.shape[i];
  ok = ok && feat == static_cast<uint64_t>(m.input_features);
  if (ok && a.rank() != 2) {
    ok = a.rank() == m.input_shape.size();
    for (size_t i = 1; ok && i < a.rank(); ++i) ok = m.input_shape[i] < 0 || static_cast<uint64_t>(m.input_shape[i]) == a.shape[i];
  }
  if (!ok) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), opt, want));
  }
  if (a.shape[0] == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: has no rows", path));
  rows = static_cast<int64_t>(a.shape[0]);
  const auto v = a.view<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: row {} feature {} is {} (inputs must be finite)", path, i / feat,
                                                   i % feat, v[i]));
    }
  }
  return {v.begin(), v.end()};
}

// Labels: integer class indices [N] (int64, int32, uint8 or int8), each in [0, classes).
std::vector<int64_t> load_labels(const std::string& path, int64_t rows, int64_t classes, const std::string& inputs) {
  const npy::Array a = npy::load(path);
  std::vector<int64_t> y;
  switch (a.dtype) {
    case npy::DType::kInt64: { const auto v = a.view<int64_t>(); y.assign(v.begin(), v.end()); break; }
    case npy::DType::kInt32: { const auto v = a.view<int32_t>(); y.assign(v.begin(), v.end()); break; }
    case npy::DType::kUint8: { const auto v = a.view<uint8_t>(); y.assign(v.begin(), v.end()); break; }
    case npy::DType::kInt8: { const auto v = a.view<int8_t>(); y.assign(v.begin(), v.end()); break; }
    default:
      throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}; labels must be integer class indices (int64, int32 "
                                                   "or uint8)", path, npy::to_string(a.dtype)));
  }
  if (a.rank() != 1) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; labels must be a 1-D array (N,)", path,
                                                 npy::shape_string(a.shape)));
  }
  if (static_cast<int64_t>(y.size()) != rows) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {} labels, but {} has {} rows", path, y.size(), inputs, rows));
  }
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 0 || y[i] >= classes) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: label {} of row {} is out of range: the model has {} classes "
                                                   "(0..{})", path, y[i], i, classes, classes - 1));
    }
  }
  return y;
}

Data load_data(const std::string& x, const std::string& y, const runtime::TrainableModel& m, const char* xopt,
               int64_t limit) {
  Data d;
  d.x = load_inputs(x, m, xopt, d.rows);
  d.y = load_labels(y, d.rows, m.classes, x);
  if (limit > 0 && limit < d.rows) {
    d.rows = limit;
    d.x.resize(static_cast<size_t>(limit * m.input_features));
    d.y.resize(static_cast<size_t>(limit));
  }
  return d;
}

// ---- shuffling: SplitMix64 and Fisher-Yates, fully specified (std::shuffle is not) -----------

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The epoch's order: rows 0..N-1, shuffled (for i = N-1 .. 1: swap i with floor(r * (i + 1) / 2^64))
// when `shuffle`; advances `rng` by N-1 draws.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  for (int64_t i = n - 1; i > 0; --i) {
    const unsigned __int128 p = static_cast<unsigned __int128>(splitmix64(rng)) * static_cast<unsigned __int128>(i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(p >> 64)]);
  }
  return order;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

// ---- reporting --------------------------------------------------------------------------------

struct EpochRecord {
  int64_t epoch = 0;  // 1-based
  double loss = 0.0;
  std::optional<double> accuracy;
  double seconds = 0.0;
  int64_t steps = 0;  // steps taken in this run
};

class Progress {
 public:
  Progress(bool on, int64_t epoch, int64_t epochs, int64_t steps) : on_(on), epoch_(epoch), epochs_(epochs), steps_(steps) {}
  void update(int64_t done, double loss, bool force = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && shown_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    shown_ = true;
    constexpr int kWidth = 30;
    const int fill = steps_ == 0 ? kWidth : static_cast<int>(kWidth * done / steps_);
    fmt::print(stderr, "\repoch {}/{} [{}{}] {}/{} steps, loss {:.4f}", epoch_, epochs_, std::string(static_cast<size_t>(fill), '#'),
               std::string(static_cast<size_t>(kWidth - fill), '.'), done, steps_, loss);
    std::fflush(stderr);
  }
  void done() {
    if (on_ && shown_) fmt::print(stderr, "\n");
  }

 private:
  bool on_;
  int64_t epoch_, epochs_, steps_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_;
};

double accuracy(runtime::Trainer& t, const Data& d, int64_t features) {
  int64_t ok = 0;
  const int64_t b = t.batch(), c = t.classes();
  for (int64_t r0 = 0; r0 < d.rows; r0 += b) {
    const int64_t rows = std::min(b, d.rows - r0);
    const std::span<const float> x(d.x.data() + r0 * features, static_cast<size_t>(rows * features));
    const std::vector<float> z = t.logits(x, rows);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j) {
        if (z[static_cast<size_t>(r * c + j)] > z[static_cast<size_t>(r * c + best)]) best = j;
      }
      ok += best == d.y[static_cast<size_t>(r0 + r)];
    }
  }
  return static_cast<double>(ok) / static_cast<double>(d.rows);
}

// A float option as the user wrote it (0.05, not 0.05000000074505806).
json short_float(float f) { return json::parse(fmt::format("{}", f)); }

json options_json(const TrainOpts& o, int64_t rows) {
  return {{"model", o.model}, {"input", o.input}, {"labels", o.labels}, {"rows", rows}, {"batch", o.batch},
          {"epochs", o.epochs}, {"lr", short_float(o.lr)}, {"momentum", short_float(o.momentum)},
          {"weight_decay", short_float(o.weight_decay)},
          {"shuffle", o.shuffle}, {"seed", o.seed}, {"limit", o.limit}, {"backend", o.backend},
          {"devices", o.devices}, {"chunks", o.devices > 0 ? json(o.chunks) : json(nullptr)}};
}

template <typename T>
void hash_values(Sha256& h, const std::vector<T>& v) {
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)));
}

// Under mpirun every rank reads the model, the data and the checkpoint itself: a rank given
// another file of the same shape would silently train on mixed data (issue 29). Every rank sends
// the SHA-256 of what it read (the values it trains on, after --limit) and of the options that
// shape the run; any difference from rank 0 is refused on every rank (exit 2), naming the ranks.
void check_same_inputs(worker::Collective& mpi, const TrainOpts& o, const std::vector<uint8_t>& model_bytes,
                       const Data& train, const std::optional<Data>& val, const runtime::Checkpoint* ck) {
  json mine = json::array();
  auto add = [&](const std::string& what, const std::string& file, Sha256 h) {
    mine.push_back({{"what", what}, {"file", file}, {"sha256", h.hex()}});
  };
  Sha256 hm;
  hm.update(model_bytes);
  add("the model", o.model, std::move(hm));
  Sha256 hx, hy;
  hash_values(hx, train.x);
  hash_values(hy, train.y);
  add("--input", o.input, std::move(hx));
  add("--labels", o.labels, std::move(hy));
  if (val) {
    Sha256 vx, vy;
    hash_values(vx, val->x);
    hash_values(vy, val->y);
    add("--validate", o.validate, std::move(vx));
    add("--validate-labels", o.validate_labels, std::move(vy));
  }
  if (ck != nullptr) {
    Sha256 hc;
    hc.update(fmt::format("{} {} {} {} {} {:a}|", ck->state.steps, ck->epoch, ck->position, ck->rng, ck->epoch_rows,
                          ck->epoch_loss_sum));
    for (const auto* m : {&ck->state.params, &ck->state.momentum}) {
      for (const auto& [name, v] : *m) {
        hc.update(name);
        hash_values(hc, v);
      }
    }
    add("the --resume checkpoint", ck->manifest.string(), std::move(hc));
  }
  Sha256 ho;
  ho.update(fmt::format("batch {} epochs {} lr {:a} momentum {:a} wd {:a} shuffle {} seed {} limit {} max-steps {} "
                        "chunks {} strategy {}", o.batch, o.epochs, o.lr, o.momentum, o.weight_decay, o.shuffle, o.seed,
                        o.limit, o.max_steps, o.chunks, o.strategy));
  add("the training options", "--batch, --epochs, --lr, ...", std::move(ho));
  const std::string text = mine.dump();
  const std::vector<std::vector<uint8_t>> all =
      mpi.allgather(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  const json first = json::parse(all[0].begin(), all[0].end(), nullptr, false);
  std::vector<std::string> diffs;
  for (size_t r = 1; r < all.size(); ++r) {
    const json other = json::parse(all[r].begin(), all[r].end(), nullptr, false);
    if (!first.is_array() || !other.is_array() || other.size() != first.size()) {
      diffs.push_back(fmt::format("rank {} reads other files than rank 0 (e.g. --validate on one rank only)", r));
      continue;
    }
    for (size_t i = 0; i < first.size(); ++i) {
      if (other[i]["sha256"] == first[i]["sha256"]) continue;
      diffs.push_back(fmt::format("{} differs between rank 0 ({}, sha256 {}) and rank {} ({}, sha256 {})",
                                  first[i]["what"].get<std::string>(), first[i]["file"].get<std::string>(),
                                  first[i]["sha256"].get<std::string>().substr(0, 16), r,
                                  other[i]["file"].get<std::string>(), other[i]["sha256"].get<std::string>().substr(0, 16)));
    }
  }
  if (!diffs.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("under mpirun every rank must train on the same model, data and options: {}; nothing was "
                            "trained", fmt::join(diffs, "; ")));
  }
}

int train_command(const TrainOpts& o) {
  // ---- options and inputs: all checked before anything runs or is written ---------------------
  // The outputs first (exit 2): --output and --trace can be created, --checkpoint is (or can be
  // made) a directory that takes files. They are staged and committed together at the end.
  check_output("--output", o.output);
  check_output("--trace", o.trace);
  check_distinct_outputs({{"--output", o.output}, {"--trace", o.trace}});
  if (!o.checkpoint.empty()) check_output_dir(o.checkpoint, "--checkpoint");
  if (o.batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("--batch {}: must be at least 1", o.batch));
  if (o.epochs < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("--epochs {}: must be at least 1", o.epochs));
  if (o.checkpoint_every < 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--checkpoint-every {}: must be >= 0", o.checkpoint_every));
  }
  if (o.max_steps < 0) throw Error(ErrorKind::kInvalidArgument, fmt::format("--max-steps {}: must be >= 0", o.max_steps));
  if (o.limit < 0) throw Error(ErrorKind::kInvalidArgument, fmt::format("--limit {}: must be >= 0", o.limit));
  if (o.validate.empty() != o.validate_labels.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--validate and --validate-labels go together");
  }
  const runtime::SgdConfig sgd{o.lr, o.momentum, o.weight_decay};
  runtime::check_sgd_config(sgd);
  const bool pipeline = o.strategy == "pipeline";
  if (o.devices > kMaxDevices) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--devices {}: at most {} devices (as info, gemm and run)", o.devices, kMaxDevices));
  }
  if (o.chunks > kMaxTrainChunks) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--chunks {}: at most {} chunks per batch", o.chunks, kMaxTrainChunks));
  }
  if (o.devices > 0) {
    if (o.strategy != "mirrored" && !pipeline) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--strategy {}: expected mirrored or pipeline", o.strategy));
    }
    if (o.backend == "host") throw Error(ErrorKind::kInvalidArgument, "--devices needs a device backend (rtl or ref)");
    if (pipeline) {
      // --chunks is the micro-batch count: the same chunks, the same fixed sum, the same weights as
      // --strategy mirrored --chunks C on any K.
      if (o.chunks < 1 || o.chunks > o.batch) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--chunks {}: the micro-batches per batch must be in [1, --batch {}]", o.chunks, o.batch));
      }
      if (!o.inject_fault.empty()) {
        throw Error(ErrorKind::kUnsupported,
                    "--inject-fault: pipeline training does not recover from device faults (each stage holds the only "
                    "copy of its layers); use --strategy mirrored, or resume a pipeline run from a --checkpoint");
      }
      if (launched_by_mpirun()) {
        throw Error(ErrorKind::kUnsupported, "--strategy pipeline runs in one process: not under mpirun (use mirrored)");
      }
    } else if (o.chunks < 1 || o.chunks > o.batch || o.chunks % o.devices != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--chunks {}: must be in [1, --batch {}] and a multiple of --devices {}", o.chunks,
                              o.batch, o.devices));
    }
  } else if (!o.inject_fault.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--inject-fault needs --devices");
  }
  if (launched_by_mpirun() && o.devices == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "started by mpirun with several ranks: use --devices K --strategy mirrored (K devices per rank)");
  }
  if (!(o.mpi_timeout > 0) || !std::isfinite(o.mpi_timeout)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--mpi-timeout {}: must be finite and > 0", o.mpi_timeout));
  }
  const std::unique_ptr<runtime::Trace> trace = o.trace.empty() ? nullptr : std::make_unique<runtime::Trace>();
  const std::vector<uint8_t> model_bytes = read_file_bounded(o.model, kMaxOnnxBytes, "an ONNX model");
  compiler::Graph graph0 = compiler::import_onnx_graph(model_bytes, o.model);
  const bool cnn = compiler::has_conv(graph0);  // CNNs: runtime/cnn_trainer.h (one device, bf16)
  runtime::TrainableModel tm =
      cnn ? runtime::describe_trainable_cnn(std::move(graph0)) : runtime::describe_trainable(std::move(graph0));
  const std::map<std::string, compiler::Dims> shapes = tm.param_dims;
  const int64_t features = tm.input_features;
  const Data train = load_data(o.input, o.labels, tm, "--input", o.limit);
  std::optional<Data> val;
  if (!o.validate.empty()) val = load_data(o.validate, o.validate_labels, tm, "--validate", 0);
  std::optional<runtime::Checkpoint> ck;
  if (!o.resume.empty()) {
    ck = runtime::load_checkpoint(o.resume);
    if (!ck->fallback.empty()) {
      fmt::print(stderr, "tpuw: warning: --resume {}: the newest checkpoint is not usable ({}); resuming from the "
                         "previous one, {} (step {})\n", o.resume, ck->fallback, ck->manifest.string(), ck->state.steps);
    }
    const json& co = ck->options;
    auto same = [&](const char* key, const json& now, const char* opt) {
      if (!co.contains(key) || co[key] != now) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--resume {}: the checkpoint was made with {} {}, this run has {}", o.resume, opt,
                                co.contains(key) ? co[key].dump() : "(none)", now.dump()));
      }
    };
    same("rows", train.rows, "training rows");
    same("batch", o.batch, "--batch");
    same("shuffle", o.shuffle, "--shuffle");
    if (o.shuffle) same("seed", o.seed, "--seed");
    std::map<std::string, uint64_t> sizes;
    for (const auto& [name, dims] : shapes) {
      uint64_t n = 1;
      for (const int64_t d : dims) n *= static_cast<uint64_t>(d);
      sizes[name] = n;
    }
    runtime::check_resume(*ck, train.rows, o.batch, o.epochs, sizes);
  }

  // ---- the trainer ------------------------------------------------------------------------------
  // Under mpirun: every rank reads the model, the data and a --resume checkpoint itself and trains
  // its chunks; rank 0 alone writes the output and checkpoints and prints the report.
  std::unique_ptr<worker::Collective> mpi;  // outlives the worker and the trainer (declared first)
  if (o.devices > 0 && launched_by_mpirun()) mpi = open_mpi(o.mpi_timeout);
  const int rank = mpi ? mpi->rank() : 0;
  if (mpi) check_same_inputs(*mpi, o, model_bytes, train, val, ck ? &*ck : nullptr);
  std::unique_ptr<worker::Worker> workers;  // outlives the trainer
  std::unique_ptr<runtime::Trainer> trainer;
  auto compile_span = runtime::Trace::scope(trace.get(), trace ? trace->host_thread("main") : runtime::Trace::Track{},
                                            "compile + upload parameters");
  worker::MirroredTrainer* mirrored = nullptr;
  worker::PipelineTrainer* piped = nullptr;
  if (cnn) {
    if (o.devices > 0 || o.backend == "host") {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: a CNN trains on one device in bf16 (--backend rtl or ref, without --devices)",
                              o.model));
    }
    runtime::DeviceTrainerOptions dto;
    dto.backend = o.backend;
    dto.array_n = o.array_n;
    dto.batch = o.batch;
    dto.sgd = sgd;
    trainer = runtime::make_cnn_trainer(o.model, dto);
  } else if (o.devices > 0 && pipeline) {
    compiler::TrainModel model = compiler::build_training_model(compiler::import_onnx_graph(model_bytes, o.model));
    if (o.devices > model.layers.size()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--devices {} --strategy pipeline: the model has {} layers, at most one stage per layer",
                              o.devices, model.layers.size()));
    }
    worker::WorkerOptions wo;
    wo.backend = o.backend;
    wo.devices = o.devices;
    wo.max_attempts = 1;  // a stage's variables exist only on its device: no retry elsewhere
    wo.config.array_n = o.array_n;
    const uint64_t need = worker::PipelineTrainer::memory_bytes(model, o.batch, o.chunks, o.array_n) + (16ull << 20);
    wo.config.memory.size =
        std::max<uint64_t>(wo.config.memory.size, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
    workers = std::make_unique<worker::Worker>(wo);
    auto pt = std::make_unique<worker::PipelineTrainer>(*workers, std::move(model), o.batch, sgd,
                                                        worker::PipelineOptions{.micro_batches = o.chunks});
    piped = pt.get();
    trainer = std::move(pt);
  } else if (o.devices > 0) {
    compiler::TrainModel model = compiler::build_training_model(compiler::import_onnx_graph(model_bytes, o.model));
    worker::WorkerOptions wo;
    wo.backend = o.backend;
    wo.devices = o.devices;
    wo.max_attempts = 1;  // the mirrored trainer reloads and redoes a failed part itself
    wo.config.array_n = o.array_n;
    const uint64_t need = worker::MirroredTrainer::memory_bytes(model, o.batch, o.chunks, o.array_n) + (16ull << 20);
    wo.config.memory.size =
        std::max<uint64_t>(wo.config.memory.size, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
    worker::MirroredOptions mo;
    mo.chunks = o.chunks;
    mo.collective = mpi.get();
    if (trace) {
      // --trace: each device thread, the reducer and the ranks' exchange on their own host tracks
      // (docs/tracing.md); the gradient traffic (gather, sum, broadcast, exchange) in category
      // "all-reduce".
      runtime::Trace* t = trace.get();
      mo.trace = [t](const std::string& track, const std::string& name, std::chrono::steady_clock::time_point a,
                     std::chrono::steady_clock::time_point b) {
        const bool comm = name.starts_with("gather") || name.starts_with("sum") || name.starts_with("broadcast") ||
                          name.starts_with("exchange");
        const std::string thread = track.starts_with("device ") ? track + " driver" : track;
        t->host_span(t->host_thread(thread), name, comm ? "all-reduce" : "host", t->ns_at(a), t->ns_at(b));
      };
    }
    if (!o.inject_fault.empty()) {
      const size_t a = o.inject_fault.find(':'), b = o.inject_fault.find(':', a == std::string::npos ? a : a + 1);
      if (a == std::string::npos || b == std::string::npos) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--inject-fault {}: expected DEVICE:STEP:PHASE", o.inject_fault));
      }
      const unsigned dev = static_cast<unsigned>(std::stoul(o.inject_fault.substr(0, a)));
      const int64_t step = std::stoll(o.inject_fault.substr(a + 1, b - a - 1));
      auto fired = std::make_shared<std::atomic<bool>>(false);
      // PHASE "exit:P": the process exits (status 1) before P, as a crashed rank would.
      std::string phase = o.inject_fault.substr(b + 1);
      const bool exit = phase.rfind("exit:", 0) == 0;
      if (exit) phase = phase.substr(5);
      mo.fault_hook = [dev, step, phase, exit, fired](worker::DeviceSlot& slot, int64_t st, const std::string& ph) {
        if (slot.index != dev || st != step || ph != phase || fired->exchange(true)) return;
        if (exit) std::_Exit(1);
        if (SimControl* sim = slot.device.backend().sim_control()) sim->inject_memory_fault(true);
      };
    }
    workers = std::make_unique<worker::Worker>(wo);
    auto mt = std::make_unique<worker::MirroredTrainer>(*workers, std::move(model), o.batch, sgd, mo);
    mirrored = mt.get();
    trainer = std::move(mt);
  } else if (o.backend == "host") {
    trainer = std::make_unique<runtime::HostFloatTrainer>(std::move(tm), o.batch, sgd);
  } else {
    runtime::DeviceTrainerOptions dto;
    dto.backend = o.backend;
    dto.array_n = o.array_n;
    dto.batch = o.batch;
    dto.sgd = sgd;
    trainer = runtime::make_device_trainer(o.model, dto);
  }
  compile_span.end();
  uint64_t rng = o.seed;
  int64_t epoch0 = 0, pos0 = 0;
  if (ck) {
    trainer->load_state(ck->state);
    epoch0 = ck->epoch;
    pos0 = ck->position;
    rng = std::stoull(ck->rng, nullptr, 16);  // 16 hex digits (load_checkpoint checks)
  }

  // ---- training ---------------------------------------------------------------------------------
  const int64_t steps_per_epoch = (train.rows + o.batch - 1) / o.batch;
  const bool show = rank == 0 && !o.quiet && (o.progress || isatty(fileno(stderr)) != 0);
  std::vector<EpochRecord> epochs;
  int64_t steps_run = 0, last_ck_step = ck ? ck->state.steps : -1;
  uint64_t cycles = 0, fwd = 0, bwd = 0, upd = 0, upd_busy = 0, loss_bytes = 0, layout_bytes = 0, macs = 0;
  double util_cycles = 0.0, loss_s = 0.0, train_s = 0.0;
  std::vector<float> xb(static_cast<size_t>(o.batch * features));
  std::vector<int64_t> yb(static_cast<size_t>(o.batch));
  auto save = [&](int64_t epoch, int64_t position, uint64_t rng_state, double lsum, int64_t lrows) {
    runtime::Checkpoint c;
    c.state = trainer->state();
    c.epoch = epoch;
    c.position = position;
    c.epoch_loss_sum = lsum;
    c.epoch_rows = lrows;
    c.rng = hex64(rng_state);
    c.trainer = trainer->name();
    c.options = options_json(o, train.rows);
    if (rank == 0) runtime::save_checkpoint(o.checkpoint, c, shapes);  // the replicas are identical
    last_ck_step = c.state.steps;
  };
  bool stopped = false;  // --max-steps reached
  int64_t global = ck ? ck->state.steps : 0;  // steps taken, resumed ones included
  for (int64_t e = epoch0; e < o.epochs && !stopped; ++e) {
    const uint64_t rng_start = rng;
    const std::vector<int64_t> order = epoch_order(train.rows, o.shuffle, rng);
    const bool resumed_epoch = ck && e == epoch0;
    double lsum = resumed_epoch ? ck->epoch_loss_sum : 0.0;
    int64_t lrows = resumed_epoch ? ck->epoch_rows : 0;
    EpochRecord rec;
    rec.epoch = e + 1;
    Progress bar(show, e + 1, o.epochs, steps_per_epoch);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = resumed_epoch ? pos0 : 0; s < steps_per_epoch; ++s) {
      if (o.max_steps > 0 && global >= o.max_steps) {
        stopped = true;
        break;
      }
      const int64_t r0 = s * o.batch, rows = std::min(o.batch, train.rows - r0);
      for (int64_t r = 0; r < rows; ++r) {
        const auto src = static_cast<size_t>(order[static_cast<size_t>(r0 + r)]);
        std::copy_n(train.x.data() + src * static_cast<size_t>(features), features, xb.data() + r * features);
        yb[static_cast<size_t>(r)] = train.y[src];
      }
      const int64_t step_ns = trace ? trace->now_ns() : 0;
      const runtime::TrainStepReport rep = trainer->step(std::span<const float>(xb.data(), static_cast<size_t>(rows * features)),
                                                         std::span<const int64_t>(yb.data(), static_cast<size_t>(rows)), rows);
      ++global;
      if (mirrored != nullptr && trace) {
        // One device track per replica with its own programs' cycles (the step report gives the
        // slowest replica's); the host span of the step as for one device.
        runtime::TrainStepReport host_only = rep;
        host_only.cycles = 0;
        trace_train_step(trace.get(), "", global, step_ns, host_only);
        const auto& dc = mirrored->last_step().device_cycles;
        for (unsigned d = 0; d < dc.size(); ++d) {
          const uint64_t c = dc[d].forward + dc[d].backward + dc[d].update;
          trace->device_phases(d, fmt::format("mirrored replica N={}", o.array_n), "program", fmt::format("step {}", global),
                               c, {{"forward", dc[d].forward}, {"backward", dc[d].backward}, {"update", dc[d].update}},
                               {{"cycles", c}, {"note", "this replica's forward (chunks), backward and update programs"}});
        }
      } else {
        trace_train_step(trace.get(), fmt::format("{} N={}", trainer->name(), o.array_n), global, step_ns, rep);
      }
      if (!std::isfinite(rep.loss)) {
        bar.done();
        fmt::print(stderr, "tpuw: error: the loss became {} at step {} (epoch {}, batch {} of {}); training stopped, {} "
                           "not written{}\n", std::isnan(rep.loss) ? "NaN" : "infinite", global, e + 1, s + 1, steps_per_epoch, o.output,
                   o.checkpoint.empty() ? ""
                   : last_ck_step >= 0 ? fmt::format("; the last checkpoint ({}, step {}) is kept", o.checkpoint, last_ck_step)
                                       : fmt::format("; no checkpoint was written to {} yet", o.checkpoint));
        return kMismatchExit;
      }
      lsum += rep.loss * static_cast<double>(rows);
      lrows += rows;
      ++steps_run;
      ++rec.steps;
      cycles += rep.cycles;
      fwd += rep.forward_cycles;
      bwd += rep.backward_cycles;
      upd += rep.update_cycles;
      upd_busy += rep.update_busy_cycles;
      loss_bytes += rep.host_loss_bytes;
      layout_bytes += rep.host_layout_bytes;
      loss_s += rep.host_loss_seconds;
      macs += rep.macs;
      util_cycles += rep.utilization * static_cast<double>(rep.cycles);
      bar.update(s + 1, lsum / static_cast<double>(lrows));
      const bool reached = o.max_steps > 0 && global >= o.max_steps;
      if (!o.checkpoint.empty() &&
          ((o.checkpoint_every > 0 && global % o.checkpoint_every == 0) || (reached && s + 1 < steps_per_epoch))) {
        save(e, s + 1, rng_start, lsum, lrows);
      }
      if (reached) {
        stopped = true;
        break;
      }
    }
    if (stopped && rec.steps == 0) {
      bar.done();
      break;
    }
    bar.update(rec.steps, lrows > 0 ? lsum / static_cast<double>(lrows) : 0.0, true);
    bar.done();
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_s += rec.seconds;
    rec.loss = lrows > 0 ? lsum / static_cast<double>(lrows) : 0.0;
    if (val) rec.accuracy = accuracy(*trainer, *val, features);
    epochs.push_back(rec);
    if (!o.json && rank == 0) {
      fmt::print("epoch {}/{}: loss {:.6f}{}, {:.2f} s, {:.1f} steps/s\n", rec.epoch, o.epochs, rec.loss,
                 rec.accuracy ? fmt::format(", validation accuracy {:.2f}% ({} rows)", 100.0 * *rec.accuracy, val->rows) : "",
                 rec.seconds, rec.seconds > 0 ? static_cast<double>(rec.steps) / rec.seconds : 0.0);
      std::fflush(stdout);
    }
    const bool epoch_done = lrows == train.rows;
    if (!o.checkpoint.empty() && epoch_done && last_ck_step != global &&
        (o.checkpoint_every == 0 || stopped || e + 1 == o.epochs)) {
      // The end of an epoch (every one with --checkpoint-every 0, else the last): the next epoch
      // starts at position 0 with the generator as it is now.
      save(e + 1, 0, rng, 0.0, 0);
    }
  }
  const runtime::TrainState st = trainer->state();

  // ---- the trained model --------------------------------------------------------------------------
  const std::vector<uint8_t> out = compiler::replace_float_initializers(model_bytes, o.model, st.params);
  OutputSet outs;  // the trained model and --trace: renamed into place together, after both are written
  if (rank == 0) outs.add(o.output, out, "the trained model");
  if (trace && mpi) {
    // Every rank's timeline in one file (a collective: every rank takes part), written by rank 0.
    const std::string mine = trace->to_json().dump();
    const std::vector<std::vector<uint8_t>> all =
        mpi->allgather(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()));
    if (rank == 0) {
      std::vector<nlohmann::ordered_json> traces;
      for (const std::vector<uint8_t>& b : all) {
        traces.push_back(nlohmann::ordered_json::parse(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())));
      }
      stage_trace(outs, o.trace, runtime::merge_rank_traces(traces));
    }
  } else if (trace) {
    stage_trace(outs, o.trace, trace->to_json());
  }
  outs.commit();

  const double per = steps_run > 0 ? 1.0 / static_cast<double>(steps_run) : 0.0;
  const double utilization = cycles > 0 ? util_cycles / static_cast<double>(cycles) : 0.0;
  const double steps_per_s = train_s > 0 ? static_cast<double>(steps_run) / train_s : 0.0;
  if (rank != 0) {  // every rank reports, on stderr (rank 0's report is the output)
    const worker::MirroredStats& ms = mirrored->totals();
    fmt::print(stderr, "rank {} of {}: {} steps, {:.1f} steps/s, {} devices, communication {:.3f} ms/step ({:.0f} bytes "
                       "from other ranks per step), {} recoveries\n",
               rank, mpi->size(), steps_run, steps_per_s, o.devices, 1e3 * ms.comm_seconds() * per,
               static_cast<double>(ms.exchange_bytes) * per, ms.recoveries);
    for (const std::string& ev : mirrored->events()) fmt::print(stderr, "rank {}:   {}\n", rank, ev);
    return kOk;
  }
  if (o.json) {
    json j;
    j["backend"] = o.backend;
    j["trainer"] = trainer->name();
    j["model"] = o.model;
    j["output"] = o.output;
    j["rows"] = train.rows;
    j["batch"] = o.batch;
    j["lr"] = short_float(o.lr);
    j["momentum"] = short_float(o.momentum);
    j["weight_decay"] = short_float(o.weight_decay);
    j["shuffle"] = o.shuffle;
    j["resumed_from"] = ck ? json(o.resume) : json(nullptr);
    j["steps"] = steps_run;
    j["total_steps"] = st.steps;
    json je = json::array();
    for (const EpochRecord& r : epochs) {
      json x = {{"epoch", r.epoch}, {"loss", r.loss}};
      if (r.accuracy) x["accuracy"] = *r.accuracy;
      x["seconds"] = r.seconds;
      x["steps"] = r.steps;
      je.push_back(x);
    }
    j["epochs"] = je;
    j["validation_rows"] = val ? json(val->rows) : json(nullptr);
    j["cycles_per_step"] = static_cast<double>(cycles) * per;
    j["forward_cycles_per_step"] = static_cast<double>(fwd) * per;
    j["backward_cycles_per_step"] = static_cast<double>(bwd) * per;
    j["update_cycles_per_step"] = static_cast<double>(upd) * per;
    j["update_busy_cycles_per_step"] = static_cast<double>(upd_busy) * per;
    j["host_loss_bytes_per_step"] = static_cast<double>(loss_bytes) * per;
    j["host_layout_bytes_per_step"] = static_cast<double>(layout_bytes) * per;
    j["host_loss_seconds_per_step"] = loss_s * per;
    j["macs_per_step"] = static_cast<double>(macs) * per;
    j["utilization"] = utilization;
    j["steps_per_s"] = steps_per_s;
    j["seconds"] = train_s;
    j["checkpoint"] = o.checkpoint.empty() ? json(nullptr) : json(o.checkpoint);
    if (mirrored != nullptr) {
      const worker::MirroredStats& ms = mirrored->totals();
      j["devices"] = o.devices;
      j["strategy"] = o.strategy;
      j["chunks"] = o.chunks;
      j["chunk_rows"] = mirrored->chunk_rows();
      j["gather_bytes_per_step"] = static_cast<double>(ms.gather_bytes) * per;
      j["broadcast_bytes_per_step"] = static_cast<double>(ms.broadcast_bytes) * per;
      j["comm_seconds_per_step"] = ms.comm_seconds() * per;
      j["hidden_seconds_per_step"] = ms.hidden_seconds * per;
      j["hidden_fraction"] = ms.hidden_fraction();
      j["reduce_seconds_per_step"] = ms.reduce_seconds * per;
      j["reduce_hidden_fraction"] = ms.reduce_hidden_fraction();
      j["recoveries"] = ms.recoveries;
      j["ranks"] = mpi ? mpi->size() : 1;
      j["exchange_bytes_per_step"] = static_cast<double>(ms.exchange_bytes) * per;
      j["exchange_seconds_per_step"] = ms.exchange_seconds * per;
      j["shard_bytes_per_step"] = static_cast<double>(ms.shard_bytes) * per;
      j["shard_seconds_per_step"] = ms.shard_seconds * per;
      j["events"] = mirrored->events();
    }
    if (piped != nullptr) {
      // Busy fractions of the steady state: the last full-batch step (every full step has the same
      // cycles); the totals include a short last batch.
      const worker::PipelineStats& ps = piped->last_full_step().steps > 0 ? piped->last_full_step() : piped->totals();
      const worker::PipelineStats& pt = piped->totals();
      j["devices"] = o.devices;
      j["strategy"] = o.strategy;
      j["chunks"] = o.chunks;
      j["micro_batches"] = piped->micro_batches();
      j["micro_rows"] = piped->micro_rows();
      json js = json::array();
      for (const worker::PipelineStage& sg : piped->stages()) {
        js.push_back({{"device", sg.device},
                      {"layers", {sg.first_layer, sg.first_layer + sg.layers - 1}},
                      {"macs_per_row", sg.macs_per_row},
                      {"busy_cycles_per_step", ps.steps > 0 ? static_cast<double>(ps.busy_cycles[sg.device]) /
                                                                  static_cast<double>(ps.steps)
                                                            : 0.0},
                      {"busy_fraction", ps.busy_fraction(sg.device)}});
      }
      j["stages"] = js;
      j["steady_cycles_per_step"] =
          static_cast<double>(ps.step_cycles) / static_cast<double>(std::max<int64_t>(ps.steps, 1));
      j["bubble_fraction"] = ps.bubble_fraction();
      j["boundary_bytes_per_step"] = static_cast<double>(pt.boundary_bytes) * per;
      j["stash_bytes_per_step"] = static_cast<double>(pt.stash_bytes) * per;
      j["gather_bytes_per_step"] = static_cast<double>(pt.gather_bytes) * per;
    }
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  fmt::print("{}: {} steps on {} ({}), {:.1f} steps/s", o.model, steps_run, o.backend, trainer->name(), steps_per_s);
  if (cycles > 0) {
    fmt::print("; per step {:.0f} cycles (forward {:.0f}, backward {:.0f}, update {:.0f}), MXU utilization {:.3f}, "
               "host loss {:.0f} bytes {:.3f} ms\n", static_cast<double>(cycles) * per, static_cast<double>(fwd) * per,
               static_cast<double>(bwd) * per, static_cast<double>(upd) * per, utilization,
               static_cast<double>(loss_bytes) * per, 1e3 * loss_s * per);
  } else {
    fmt::print(" (no device cycles: fp32 on the CPU)\n");
  }
  if (mirrored != nullptr) {
    const worker::MirroredStats& ms = mirrored->totals();
    if (mpi) {
      fmt::print("{} MPI ranks x {} devices: per step {:.0f} bytes from the other ranks, {:.3f} ms in the exchange\n",
                 mpi->size(), o.devices, static_cast<double>(ms.exchange_bytes) * per, 1e3 * ms.exchange_seconds * per);
    }
    fmt::print("mirrored on {} devices, {} chunks of {} rows: per step gradients {:.0f} bytes gathered, {:.0f} bytes "
               "broadcast; communication {:.3f} ms, {:.3f} ms of it hidden behind the backward pass ({:.0f}%; of the "
               "{:.3f} ms reduction {:.0f}%); {} recoveries\n",
               o.devices, o.chunks, mirrored->chunk_rows(), static_cast<double>(ms.gather_bytes) * per,
               static_cast<double>(ms.broadcast_bytes) * per, 1e3 * ms.comm_seconds() * per,
               1e3 * ms.hidden_seconds * per, 100.0 * ms.hidden_fraction(), 1e3 * ms.reduce_seconds * per,
               100.0 * ms.reduce_hidden_fraction(), ms.recoveries);
    for (const std::string& ev : mirrored->events()) fmt::print("  {}\n", ev);
  }
  if (piped != nullptr) {
    const worker::PipelineStats& ps = piped->last_full_step().steps > 0 ? piped->last_full_step() : piped->totals();
    const worker::PipelineStats& pt = piped->totals();
    std::string stages;
    for (const worker::PipelineStage& sg : piped->stages()) {
      stages += fmt::format("{}device {} layers {}-{} busy {:.3f}", stages.empty() ? "" : ", ", sg.device,
                            sg.first_layer, sg.first_layer + sg.layers - 1, ps.busy_fraction(sg.device));
    }
    fmt::print("pipeline on {} devices, {} micro-batches of {} rows: {} (steady state, {:.0f} cycles per step); bubble "
               "{:.3f}; per step {:.0f} bytes across stage boundaries, {:.0f} bytes stashed\n",
               o.devices, piped->micro_batches(), piped->micro_rows(), stages,
               static_cast<double>(ps.step_cycles) / static_cast<double>(std::max<int64_t>(ps.steps, 1)),
               ps.bubble_fraction(), static_cast<double>(pt.boundary_bytes) * per, static_cast<double>(pt.stash_bytes) * per);
  }
  if (!o.checkpoint.empty()) fmt::print("checkpoint: {} (step {})\n", o.checkpoint, st.steps);
  fmt::print("trained model -> {} ({} initializers updated)\n", o.output, st.params.size());
  return kOk;
}

}  // namespace

TrainCommand::TrainCommand(CLI::App& app) : opts_(std::make_shared<TrainOpts>()) {
  TrainOpts* o = opts_.get();
  auto* sub = app.add_subcommand("train", "train an ONNX model (dense layers, ReLU) with SGD; writes the same model "
                                          "with trained float32 initializers");
  sub_ = sub;
  sub->add_option("MODEL", o->model, "ONNX model (.onnx): Gemm/MatMul (+ bias Add) (+ Relu), Flatten/Reshape")->required();
  sub->add_option("-i,--input", o->input, "training inputs, float32 .npy (N, ...the model input) or (N, features)")
      ->required();
  sub->add_option("--labels", o->labels, "class labels, integer .npy (N,) (int64, int32 or uint8)")->required();
  sub->add_option("-o,--output", o->output, "write the trained model here (.onnx; the input model's initializer "
                                            "names and shapes)")->required();
  sub->add_option("--epochs", o->epochs, "passes over the training rows")->check(signed_check())->capture_default_str();
  sub->add_option("--batch", o->batch, "rows per SGD step (the last step of an epoch takes the rest)")
      ->check(signed_check())
      ->capture_default_str();
  sub->add_option("--lr", o->lr, "learning rate (finite, > 0)")->capture_default_str();
  sub->add_option("--momentum", o->momentum, "SGD momentum (>= 0; torch.optim.SGD semantics)")->capture_default_str();
  sub->add_option("--weight-decay", o->weight_decay, "L2 weight decay added to the gradient (>= 0)")->capture_default_str();
  const std::vector<std::string> backends = {"rtl", "ref", "host"};
  sub->add_option("--backend", o->backend,
                  "rtl (verilated device), ref (reference model of the device), host (fp32 on the CPU)")
      ->check(CLI::IsMember(backends))
      ->capture_default_str();
  sub->add_option("--array-n", o->array_n, "MXU size N of the device configuration (rtl, ref)")
      ->check(unsigned_check())
      ->capture_default_str();
  sub->add_option("--validate", o->validate, "validation inputs (.npy like --input): accuracy after every epoch");
  sub->add_option("--validate-labels", o->validate_labels, "validation labels (.npy like --labels)");
  sub->add_option("--checkpoint", o->checkpoint, "write the training state into this directory (see --checkpoint-every)");
  sub->add_option("--checkpoint-every", o->checkpoint_every,
                  "checkpoint every STEPS steps (0: at the end of every epoch); always at the end")
      ->check(signed_check())
      ->capture_default_str();
  sub->add_option("--resume", o->resume, "continue from a checkpoint directory (same rows, --batch, --shuffle/--seed)");
  sub->add_flag("--shuffle", o->shuffle, "a new random row order every epoch (default: file order)");
  sub->add_option("--seed", o->seed, "seed of --shuffle")->check(unsigned_check())->capture_default_str();
  sub->add_option("--limit", o->limit, "train on the first N rows only (0: all)")->check(signed_check())->capture_default_str();
  sub->add_option("--max-steps", o->max_steps,
                  "stop after this many steps in total, counting the resumed ones (0: no limit); the output and a "
                  "checkpoint are written as at the end")
      ->check(signed_check())
      ->capture_default_str();
  sub->add_option("--trace", o->trace,
                  "write a timeline as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing): each step on the "
                  "host and its forward/backward/update cycles on the device (docs/tracing.md)");
  sub->add_flag("--json", o->json, "print one JSON object instead of the human-readable report");
  sub->add_flag("--progress", o->progress, "show the progress bar on stderr even when it is not a terminal");
  sub->add_flag("-q,--quiet", o->quiet, "no progress bar");
  sub->add_option("--devices", o->devices,
                  "train on K devices (rtl, ref; docs/scaling.md): mirrored variables, or pipeline stages; 0: one "
                  "device, the fused step")
      ->check(unsigned_check())
      ->capture_default_str();
  sub->add_option("--strategy", o->strategy, "multi-device strategy: mirrored (replicas, batch sharded) or pipeline (layers "
                  "split into stages, GPipe micro-batches)")->capture_default_str();
  sub->add_option("--chunks", o->chunks,
                  "gradient chunks per batch with --devices (mirrored: a multiple of K; pipeline: the micro-batches): "
                  "the fixed reduction order, the same weights for every K and either strategy")
      ->check(signed_check())
      ->capture_default_str();
  sub->add_option("--mpi-timeout", o->mpi_timeout,
                  "under mpirun: seconds a rank waits for the others in the gradient exchange before it ends the job")
      ->capture_default_str();
  sub->add_option("--inject-fault", o->inject_fault, "")->group("");  // testing: DEVICE:STEP:[exit:]PHASE
}

bool TrainCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int TrainCommand::execute() const {
  try {
    return train_command(*opts_);
  } catch (const Error& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return kOther;
  }
}

}  // namespace tpuw::cli
