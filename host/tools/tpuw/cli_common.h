// Pieces shared by the tpuw subcommands: the backend option (every name tpuw::backend_names()
// knows), the device options of info/exec/gemm (--array-n, --json, --wave*) and the backend
// configuration they give, the PERF counters as JSON, the multi-device options (--devices,
// --strategy) and the report of a strategy run (tpuw/worker/strategies.h) as text and JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/energy.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/trace.h"
#include "tpuw/runtime/trainer.h"
#include "tpuw/worker/strategies.h"

namespace tpuw {
class OutputSet;
class StagedOutput;
}  // namespace tpuw

namespace CLI {
class App;
class Validator;
class Option;
}  // namespace CLI

namespace tpuw::cli {

/// The values of an input .npy (`path` for messages) as floats: float32 (every element finite, or
/// kBadFile naming the element), uint8 or int8; any other dtype is kBadFile. Shared by the MLP and
/// CNN paths of `tpuw run`, which check the shape themselves.
std::vector<float> input_values(const npy::Array& a, const std::string& path);

/// The file of each graph input of a model with several (`names`, in their order) from `args`
/// given as NAME=FILE (one per input; `flag` is "--input" or "--calibrate"). Throws
/// Error(kInvalidArgument) naming the input for an unnamed file, an unknown or repeated name and a
/// missing input. Shared by the dense and CNN paths of `tpuw run`.
std::vector<std::string> match_named_inputs(const std::vector<std::string>& args, const std::vector<std::string>& names,
                                            const char* flag);

/// Integer class labels [rows] (or [rows, 1]) in uint8, int8, int32 or int64 (NumPy's default,
/// PyTorch's labels), each in [0, classes); anything else is kBadFile naming the file and the row.
std::vector<int64_t> load_class_labels(const std::string& path, uint64_t rows, uint32_t classes);

/// The fraction of rows whose argmax over `classes` outputs equals the label (0 without labels).
double accuracy(std::span<const float> y, uint32_t classes, const std::vector<int64_t>& labels);

/// Exit codes of tpuw (main.cpp's header explains them).
enum Exit : int { kOk = 0, kOther = 1, kBadInput = 2, kMismatchExit = 3, kDeviceExit = 4 };

/// The exit code for an error of this kind (a model, tensor or shape the device cannot run is bad
/// input, like a malformed file).
int exit_code(ErrorKind kind);

/// --backend: one of tpuw::backend_names(), described.
CLI::Option* add_backend_option(CLI::App* sub, std::string& backend);

struct MultiOpts {
  unsigned devices = 1;      // --devices K
  std::string strategy;      // --strategy (empty: not given)
  CLI::Option* devices_opt = nullptr;
};

/// --devices K and --strategy NAME (one of `strategies`; the first is the default).
void add_multi_options(CLI::App* sub, MultiOpts& m, const std::vector<std::string>& strategies, const std::string& help);

/// The multi-device path is taken when --devices or --strategy is given.
bool multi_selected(const MultiOpts& m);

// Options shared by the subcommands that open a device (info, exec, gemm).
struct DeviceOpts {
  std::string backend = "rtl";
  unsigned array_n = 16;
  bool json = false;
  std::string wave;
  uint64_t wave_from = 0;
  uint64_t wave_to = UINT64_MAX;
  CLI::Option* array_n_opt = nullptr;
  MultiOpts multi;
};

/// The N of the device that was opened (its ARRAY_N register: a serial board decides its own size).
/// A --array-n given on the command line (`given`) that differs is refused with
/// Error(kInvalidArgument) naming both; reports then print the device's N, never the flag's default.
unsigned device_array_n(const Device& dev, unsigned requested, bool given);

/// --backend, --array-n, --json and (with `wave`) --wave, --wave-from, --wave-to.
void add_device_options(CLI::App* sub, DeviceOpts& o, bool wave);

/// The backend configuration of these options with `mem_bytes` of host memory; throws
/// kInvalidArgument for a waveform on several devices, on a backend other than rtl, or with
/// --wave-to before --wave-from.
BackendConfig backend_config(const DeviceOpts& o, uint64_t mem_bytes = 64ull << 20);

/// Writes a file complete or not at all: a temporary beside the target, renamed when every write
/// succeeded (tpuw/file_io.h).
void write_file(const std::filesystem::path& p, std::span<const uint8_t> bytes);

// ---- output files (README.md, "Output files") ---------------------------------------------------
// Every subcommand checks each output path with check_output() before any work (exit 2 for a bad
// one: a missing or unwritable directory, a directory, device, FIFO or socket, a link to one),
// stages its outputs in one tpuw::OutputSet as they are produced, and commits the set only when
// the command succeeded: on any non-zero exit no output appears and nothing that existed is
// touched.

/// check_output_path(path, option) when `path` is not empty (options that were not given).
void check_output(const std::string& option, const std::string& path);

/// The same path given to two output options: one would overwrite the other.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& option_paths);

/// Stages a .npy (npy::serialize) / a Chrome trace (runtime::write_trace_json's text) in `outs`.
void stage_npy(OutputSet& outs, const std::string& path, const npy::Array& a);
void stage_trace(OutputSet& outs, const std::string& path, const nlohmann::ordered_json& trace);

/// --wave FILE: checked like any output, then, because Verilator's FST writer writes by name (it
/// unlinks the name first, creates NAME.hier beside it, mmaps temporaries and checks none of its
/// writes), pointed at a file in a private directory of ours beside FILE (tpuw::StagedOutput), so
/// nothing the writer does can touch anything else; `o.wave` is replaced by that path. Refuses
/// (exit 1) when the file size limit or the free space of FILE's directory or /tmp is below
/// kWaveMinBytes. Installs the SIGBUS handler that removes the staged files and reports. No-op
/// without --wave.
inline constexpr uint64_t kWaveMinBytes = uint64_t{64} << 20;
StagedOutput* stage_wave(OutputSet& outs, DeviceOpts& o);

/// Closes the device's waveform (the FST file is complete on disk) and checks it can be trusted:
/// no write past the file size limit happened (SIGXFSZ was seen) and the disk is not full; throws
/// Error(kResource) otherwise (the staged file is then removed with `outs`). No-op when `wave` is
/// null.
void finish_wave(Device& dev, const StagedOutput* wave);

/// Signal handling of main(): SIGXFSZ only sets a flag (a write past `ulimit -f` then fails with
/// EFBIG and is reported), SIGBUS (an mmap'ed file that could not grow, in the FST writer) removes
/// the staged waveform and exits 1 with a message instead of dying with a core.
void install_signal_handlers();

/// "tpuw <project version> (ISA <major>.<minor>)": `tpuw --version` and the `tpuw_version` key of
/// every --json report.
std::string version_string();

/// The check of every unsigned integer option: decimal digits only, at most 2^64 - 1. CLI11 2.1.2
/// converts "-1" to 2^64 - 1 and wraps values past 2^64 (issue 14, class 2).
CLI::Validator unsigned_check();

/// The same for every signed integer option: an optional '-' and decimal digits, within int64 (CLI11
/// 2.1.2 clamps "99999999999999999999999" to 2^63 - 1 and reads "010" as octal); the range of each
/// option is checked by its command, with the option's own message.
CLI::Validator signed_check();

/// The most devices any subcommand opens (--devices of info, gemm, run and train).
inline constexpr unsigned kMaxDevices = 64;

/// Every PERF counter by name.
nlohmann::ordered_json perf_json(const PerfCounters& p);

/// --energy-table FILE: picojoules per event overriding the default table (docs/energy.md).
void add_energy_option(CLI::App* sub, std::string& path);
/// The table of --energy-table (the default one when `path` is empty); loaded before any work, so
/// a bad file is exit 2 with nothing run.
runtime::EnergyTable energy_table(const std::string& path);
/// Adds "energy" (runtime::Energy::to_json), "tops_per_w" (2 x useful MACs per joule) and
/// "energy_table" to a --json report.
void add_energy_json(nlohmann::ordered_json& j, const runtime::Energy& e, uint64_t useful_macs,
                     const runtime::EnergyTable& table);

/// --check of a bf16 run: the device's fp32 output `y` (before the host operator) against the CPU
/// bf16 model's `golden`, bit for bit; throws Error(kMismatch) naming the first output that differs.
void check_bf16_output(const std::vector<float>& golden, const std::vector<float>& y, uint32_t classes,
                       const std::string& backend);

/// A layer's counters summed over the batches of a run: what the per-layer reports of tpuw run
/// (dense models and CNNs) print.
struct LayerCounters {
  uint64_t cycles = 0, rd_bytes = 0, wr_bytes = 0, min_bytes = 0;
  uint64_t mxu_active = 0, weight_stall = 0, weight_shift = 0, dma_wait = 0, act_busy = 0, instructions = 0;
  uint64_t vector_cycles = 0;  // the VECTOR unit's busy cycles (bf16 activation functions): rows + 4 per op

  /// Adds one batch of a dense layer (a layer of run_network's / run_network_bf16's report).
  void add(const runtime::LayerReport& lr);
  /// Adds one program's PERF counters, its least bytes and its instructions (a convolution's).
  void add(const PerfCounters& p, uint64_t least_bytes, uint64_t program_instructions);
  /// These counters as PerfCounters (instret: the instructions), for the energy model.
  PerfCounters perf() const;
};

/// Per-device report lines ("  device i: ..."), with utilization = macs / (N^2 * cycles).
void print_strategy_report(const worker::StrategyReport& r, uint32_t array_n);

/// {"devices", "strategy", "wall_s", "overlap", "micro_batch", "micro_batches", "per_device": [...],
///  "stages" and "steady_s" (pipeline)}.
nlohmann::ordered_json strategy_report_json(const worker::StrategyReport& r, uint32_t array_n);

/// --trace of tpuw train: one training step that ran on the host from `begin_ns` to now, and (a
/// device trainer) its cycles on device 0 split into forward / backward / update as the trainer
/// reports them (docs/tracing.md). No-op without a trace.
void trace_train_step(runtime::Trace* trace, const std::string& device_name, int64_t step, int64_t begin_ns,
                      const runtime::TrainStepReport& rep);

}  // namespace tpuw::cli
