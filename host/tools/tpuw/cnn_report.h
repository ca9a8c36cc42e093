// What the two CNN paths of `tpuw run` share (cmd_run_cnn.cpp: int8, cmd_run_cnn_bf16.cpp: bf16):
// the input images, the float model interpreted on the CPU, the per-layer figures summed over the
// batches and the report made of them (the human lines and the --json fields). What differs between
// the precisions (quantization and calibration, the --check contract) stays in the callers; the
// precision's name ("int8" / "bf16") is a parameter where the report says it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cmd_run_cnn.h"
#include "tpuw/compiler/ir.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/trace.h"
#include "tpuw/worker/collective.h"
#include "tpuw/worker/strategies.h"

namespace tpuw::cli {

/// A model input: [batch, C, H, W] with C, H, W known, or (image false, a model with several
/// inputs) a vector [batch, C] (h = w = 1) that joins the dense head.
struct CnnInput {
  std::string name;  // the graph input's
  uint64_t c = 0, h = 0, w = 0;
  bool image = true;
  std::string file;  // the --input file it was read from (load_cnn_inputs)
  uint64_t features() const { return c * h * w; }
};

struct CnnImages {
  std::vector<float> x;  // [rows][C*H*W] (NCHW per row); several inputs: every input's side by side
  uint64_t rows = 0;
};

/// [rows, C, H, W] or [rows, C*H*W] (a single image [C, H, W] is one row), float32, uint8 or int8;
/// a vector input [rows, C]; `what` names the option in errors ("--input").
CnnImages load_cnn_images(const std::string& path, const CnnInput& s, const char* what);

/// The graph inputs of a CNN model (compiler::cnn_inputs, with C, H, W known): one image, or
/// several images and vectors. Throws Error(kUnsupported) naming the input otherwise.
std::vector<CnnInput> cnn_model_inputs(const compiler::Graph& g, const std::string& model);

/// --input / --calibrate (`args` as given, `flag` for errors): FILE or NAME=FILE for a model with
/// one input, NAME=FILE per input for several (match_named_inputs), each checked against its
/// input's shape, all with the same rows, laid side by side in each row in graph order (nothing
/// added or rescaled). Sets each input's file when `files` is true.
CnnImages load_cnn_inputs(const std::vector<std::string>& args, std::vector<CnnInput>& ins, const char* flag,
                          bool files);

/// The first image input (what the one-input report lines describe).
const CnnInput& first_image(const std::vector<CnnInput>& ins);

/// Several inputs: the line naming every input, its shape, its file and its bytes in host memory
/// (`bytes_per_value`: 1 for int8, 2 for bf16); nothing for one input.
void print_cnn_inputs(const CnnRunOpts& o, const std::vector<CnnInput>& ins, uint64_t rows, unsigned bytes_per_value);
/// The --json "inputs" array (name, file, shape, features, bytes; `scales` when not empty).
nlohmann::ordered_json cnn_inputs_json(const std::vector<CnnInput>& ins, uint64_t rows, unsigned bytes_per_value,
                                       const std::vector<float>& scales);

/// The float model: the optimized graph interpreted on the CPU (double accumulation), in chunks so
/// the intermediate activations of a large input stay small.
std::vector<float> cnn_float_outputs(const compiler::Graph& og, const CnnImages& in, uint64_t features,
                                     uint32_t classes);

/// check_output("--output", output) (cli_common.h): exit 2 when --output cannot be written.
void check_output_path(const std::string& output);
/// The same for --trace, and a --trace that is the --output file.
void check_trace_path(const std::string& trace, const std::string& output);

/// Host memory for a batch of `rows` images whose layers need `need` bytes: with 8 MiB of slack,
/// rounded up to MiB, at least 64 MiB; throws Error(kInvalidArgument) above 4 GiB.
uint64_t cnn_memory_size(uint64_t need, uint64_t rows);

/// One row of the per-layer report, summed over the batches.
struct LayerRow : LayerCounters {
  std::string name, kind;  // kind: conv (convolutions and average pools), maxpool (on the device),
                           // maxpool_host (a device without the VECTOR unit) or dense
  std::string shape;       // conv: CxHxW -> OxHoxWo, kernel; dense: m x k x n
  uint64_t macs = 0;
  bool relu = false;
};

/// A CNN run summed over its batches: the convolution / pooling layers' rows, then the dense head's.
struct CnnTotals {
  std::vector<LayerRow> layers;
  size_t convs = 0;
  PerfCounters perf;  // every program's PERF counters
  uint64_t macs = 0, min_bytes = 0, instructions = 0;
  double wall = 0;                          // seconds in the runs (several devices: the whole run's wall)
  uint64_t rows = 0, chunk = 0, chunks = 0;  // images, rows per batch, batches
  std::optional<worker::StrategyReport> strategy;  // --devices/--strategy: what each device did
  std::vector<std::string> events;                 // the Worker's: failures, resets, retries
  uint64_t failures = 0;                           // task runs that ended in a device fault / timeout
  std::vector<nlohmann::ordered_json> ranks;       // under mpirun (rank 0, gather_cnn_ranks): each rank's line

  CnnTotals(size_t conv_layers, size_t dense_layers, uint64_t rows, uint64_t batch);

  /// One batch of convolution / pooling layer i (host: a max pool on the host; max_pool: a max pool
  /// on the device) and what its program counted.
  void add_conv(size_t i, const std::string& name, const nn::ConvGeometry& gm, bool relu, bool host,
                uint64_t layer_macs, const PerfCounters& p, uint64_t layer_min_bytes, uint64_t layer_instructions,
                bool max_pool = false);
  /// One batch of dense layer i of the head (`name`: the compiled layer's, when the report has none).
  void add_dense(size_t i, const runtime::LayerReport& lr, const std::string& name, bool relu);
  /// One batch of the head's program as a whole.
  void add_head(const PerfCounters& p, uint64_t head_min_bytes, uint64_t head_instructions);
};

/// How the batches of a CNN run (both precisions): on one device in --batch chunks, or with
/// --devices/--strategy data-parallel over a tpuw::worker::Worker (worker::run_micro_batches:
/// micro-batches of --batch rows, 0 = automatic, contiguous ranges per device, a faulted device's
/// range retried on another). Rows are independent in every CNN layer, so the output is the same
/// bits for any device count and micro-batch.
///   chunking: sets t.chunk / t.chunks (call before sizing host memory with t.chunk);
///   run:      runs micro-batch j (rows [r0, r0+rows)) on `dev` (index `device`), keeps its result
///             by j and answers its counters; called from the device's thread;
///   absorb:   takes micro-batch j's kept result into the totals, in order j = 0, 1, ...
/// `memory` is the host memory one device needs for t.chunk rows. Sets t.wall (and t.strategy);
/// returns the device's ARRAY_N. `trace` (may be null): host spans per micro-batch on "device D
/// driver" (one device: "main"); the run callback lays its programs on the device (trace_cnn_program).
using CnnRunFn = std::function<worker::MicroBatchUse(Device& dev, unsigned device, uint64_t j, uint64_t r0, uint64_t rows)>;
using CnnAbsorbFn = std::function<void(uint64_t j, uint64_t r0, uint64_t rows)>;
void cnn_chunking(const CnnRunOpts& o, CnnTotals& t);
unsigned run_cnn_batches(const CnnRunOpts& o, CnnTotals& t, uint64_t memory, const CnnRunFn& run,
                         const CnnAbsorbFn& absorb, runtime::Trace* trace);
/// `mpirun -np P tpuw run CNN.onnx` (docs/scaling.md): rank r runs the images
/// [r * rows / P, (r + 1) * rows / P) -- on its --devices K through run_cnn_batches like one rank --
/// and rank 0 gathers every rank's outputs in rank order, then checks, scores, writes and reports as
/// one rank would. Every rank has read the same files and (int8) calibrated on the same rows (the
/// whole --calibrate set, or the whole input), so every rank compiles the same network bit for bit.
struct CnnRanks {
  std::unique_ptr<worker::Collective> mpi;  // null: not under mpirun (one rank, every image)
  uint64_t rank = 0, size = 1;
  uint64_t first = 0, rows = 0;             // this rank's images: [first, first + rows)
  std::chrono::steady_clock::time_point t0;  // when every rank was up
  bool root() const { return rank == 0; }
};
/// Under mpirun: opens MPI (o.mpi_timeout) and waits until every rank is up; otherwise every image
/// on this one rank. Call after every input has been checked (a bad file fails alike on every rank).
CnnRanks cnn_ranks(const CnnRunOpts& o, uint64_t rows);

/// Under mpirun, after this rank's run: sends every rank this rank's `parts` (its images' share of
/// each output, the same list on every rank), its totals t and its trace, or `error` (its run's
/// failure; kind in `kind`) when not empty. Every rank then throws "rank R: ..." (the first failed
/// rank's error and kind) when one failed. On rank 0 returns each part concatenated over the ranks
/// in rank order -- the bytes one rank's run would have -- and t summed over the ranks (every image,
/// the job's wall time, the per-rank lines in t.ranks), and writes --trace with every rank's tracks;
/// the other ranks get {}.
std::vector<std::vector<uint8_t>> gather_cnn_ranks(const CnnRunOpts& o, CnnRanks& r, CnnTotals& t,
                                                   const std::vector<std::span<const uint8_t>>& parts,
                                                   const std::string& error, ErrorKind kind, runtime::Trace* trace);

/// A vector's bytes (a part for gather_cnn_ranks), and back.
template <class T>
std::span<const uint8_t> byte_span(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}
template <class T>
std::vector<T> from_bytes(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

/// --trace: one device program (a convolution, pooling, function or dense-head program) on device
/// `device`'s tracks, `perf` its PERF counters; nothing when `trace` is null or the program ran on the
/// host (no cycles).
void trace_cnn_program(runtime::Trace* trace, Device& dev, unsigned device, const std::string& name,
                       const PerfCounters& perf);

/// With several graph outputs each goes to OUT.NAME.npy (characters other than letters, digits,
/// '_', '-' and '.' in NAME become '_'); `output` empty: none.
std::string named_output_file(const std::string& output, const std::string& name);

/// How far the device's output is from the float model's (--check).
struct FloatAgreement {
  double max_diff = 0, max_abs = 0, argmax = 0;  // max |y - yf|, max |yf|, rows whose argmax agree
  bool class_scores = true;                      // false: a feature map, no argmax (argmax stays 0)
  nlohmann::ordered_json check_json() const;     // the --json "check" object (argmax null: no classes)
  /// ", argmax agrees on X% of the rows" for class scores; empty for a feature map.
  std::string argmax_phrase() const;
};
/// `class_scores` false (a model without a classification head): no argmax agreement.
FloatAgreement compare_with_float(const std::vector<float>& y, const std::vector<float>& yf, uint32_t classes,
                                  bool class_scores = true);

/// The --json report up to "host_op"; `precision` is "int8" or "bf16". "input_shape": [C, H, W] of
/// a model with one input; with several, {"NAME": [C, H, W] or [C] (a vector), ...} for every input.
nlohmann::ordered_json cnn_json(const CnnRunOpts& o, const char* precision, unsigned array_n, const CnnTotals& t,
                                const std::vector<CnnInput>& ins, uint32_t classes, const std::string& host_op);
/// The rest of the --json report: "layers" to "output" (check: null without --check).
void add_cnn_json_results(nlohmann::ordered_json& j, const CnnRunOpts& o, const char* precision, unsigned array_n,
                          const CnnTotals& t, size_t label_rows, double acc_dev, double acc_float,
                          const nlohmann::ordered_json& check);

/// The first line: the model, its inputs (every one's shape) and layers, and `output` (what a row of
/// the output is).
void print_cnn_header(const CnnRunOpts& o, const std::vector<CnnInput>& ins, size_t conv_layers, size_t dense_layers,
                      const std::string& host_op, const std::string& output);
/// The run's line (several devices: and each device's share, busy time and the overlap), the
/// per-layer table and the totals.
void print_cnn_layers(const CnnRunOpts& o, const char* precision, unsigned array_n, const CnnTotals& t);
/// The accuracy line (--labels), `check_line` (--check; printed when not empty) and the --output line.
void print_cnn_tail(const CnnRunOpts& o, const char* precision, size_t label_rows, double acc_dev, double acc_float,
                    const std::string& check_line, const std::vector<uint64_t>& out_shape);

}  // namespace tpuw::cli
