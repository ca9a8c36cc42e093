// tpuw run MODEL.onnx --input X.npy [--output Y.npy] [--labels L.npy] [--calibrate C.npy] ...
//
//   1. import the ONNX model (tpuw/nn/onnx_import.h) and read the tensors; nothing is written
//      unless every step succeeds (exit 2 for bad input, before the device is opened)
//   2. quantize it to int8 (tpuw/nn/quantize.h) with the calibration rows (default: the input);
//      --precision bf16 skips this: the float network runs in bf16 (tpuw/runtime/network_bf16.h)
//   3. compile and run it on the device in batches of --batch rows (tpuw/runtime/network.h)
//   4. dequantize on the host (int8), apply the host operator, write Y.npy (float32 [batch, outputs])
//   5. report per layer: shape, cycles, utilization, bytes moved vs minimum, and where the cycles
//      went (PERF counters: MXU active, weight stall, weight shift, DMA wait, activation busy);
//      with --labels, the accuracy of the device (int8 or bf16) and of the float model;
//      --trace FILE: the timeline as Chrome trace-event JSON (tpuw/runtime/trace.h, docs/tracing.md).
//   With --devices K / --strategy data|pipeline the rows run on K devices (tpuw/worker/strategies.h,
//   --batch is then the micro-batch) and the report gives each device's share, busy time and the
//   overlap instead of the per-layer table.
//   A CNN (cmd_run_cnn.cpp, cmd_run_cnn_bf16.cpp) takes --devices K too: its images in micro-batches
//   over a Worker (cnn_report.h run_cnn_batches; --strategy data only), the per-layer table kept.
//   Under `mpirun -np P` the rows are split into P contiguous blocks, one per rank, and gathered on
//   rank 0, which alone writes and reports (run_ranks below, docs/scaling.md); a CNN's images the
//   same way (cnn_report.h CnnRanks, gather_cnn_ranks).
#include "cmd_run.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/numerics.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/trace.h"
#include "tpuw/worker/strategies.h"
#include "cli_common.h"
#include "cmd_run_cnn.h"
#include "cmd_run_cnn_bf16.h"
#include "mpi_collective.h"

namespace tpuw::cli {

struct RunOpts {
  std::string model, input, output, labels, calibrate, trace;  // input, calibrate: the files, joined for reports
  std::vector<std::string> inputs, calibrates;  // as given: FILE or NAME=FILE (several graph inputs), repeatable
  std::string backend = "rtl";
  std::string precision = "int8";  // int8 (quantized, calibrated) or bf16 (no calibration)
  unsigned array_n = 16;
  uint64_t batch = 0;  // 0: the whole input in one run (several devices: automatic micro-batch)
  bool json = false;
  bool quiet = false;
  bool check = false;
  MultiOpts multi;
  double mpi_timeout = 120.0;     // under mpirun: seconds a rank waits for the others
  std::string inject_rank_fail;   // hidden, tests: "R" (rank R's run fails) or "R:exit" (rank R exits)
  std::string inject_fault;       // hidden, tests: "J" (a CNN on several devices: the device running micro-batch J faults, once)
  OutputSet* outputs = nullptr;   // --output and --trace, staged; committed by RunCommand::execute on success
  CLI::Option* array_n_opt = nullptr;  // given on the command line: a device of another N is refused
  std::string energy_table;       // --energy-table FILE
  runtime::EnergyTable table;     // loaded from it before any work (run_command)
};

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// One graph input and the file its rows came from (reports).
struct InputFile {
  std::string name, file;
  uint64_t features = 0;
};

// A float tensor [rows, features] read from .npy (float32, uint8 or int8); with several graph
// inputs their rows side by side (files: each input's file, in row order).
struct Rows {
  std::vector<float> x;
  uint64_t rows = 0;
  std::vector<InputFile> files;
};

std::string model_shape_string(const std::vector<int64_t>& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size(); ++i) parts.push_back(s[i] < 0 ? (i == 0 ? "batch" : "?") : std::to_string(s[i]));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Rows load_rows(const std::string& path, uint64_t f, const std::vector<int64_t>& shape, const std::string& what) {
  const npy::Array a = npy::load(path);
  Rows r;
  const std::string want = fmt::format("[rows, {}] or the model input's shape {}", f, model_shape_string(shape));
  if (a.rank() == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: a scalar; {} needs {}", path, what, want));
  uint64_t feat = 1;
  for (size_t i = 1; i < a.rank(); ++i) feat *= a.shape[i];
  if (a.rank() == 1) {
    if (a.shape[0] != f) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), what, want));
    }
    r.rows = 1;
  } else {
    // Any [rows, ...] whose row has the model's feature count (rows are flattened, like the
    // model's own Flatten); with the model input's rank, the dimensions must also match.
    bool ok = feat == f;
    if (ok && a.rank() == shape.size()) {
      for (size_t i = 1; i < a.rank(); ++i) {
        ok = ok && (shape[i] < 0 || static_cast<uint64_t>(shape[i]) == a.shape[i]);
      }
    }
    if (!ok) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), what, want));
    }
    r.rows = a.shape[0];
  }
  if (r.rows == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {} has no rows", path, npy::shape_string(a.shape)));
  r.x = input_values(a, path);
  return r;
}

// The rows of --input (or --calibrate) for the model: one FILE (or NAME=FILE with the input's
// name) for a model with one input; for several graph inputs one NAME=FILE per input, each
// checked against its input's shape, all with the same row count, then laid side by side in
// each row (the device's input buffer; nothing is added or rescaled on the host).
Rows load_inputs(const std::vector<std::string>& args, const nn::FloatNetwork& net, const char* flag) {
  auto split = [](const std::string& a) -> std::pair<std::string, std::string> {
    const size_t eq = a.find('=');
    if (eq == std::string::npos) return {"", a};
    return {a.substr(0, eq), a.substr(eq + 1)};
  };
  if (net.input_parts.empty()) {
    if (args.size() != 1) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{} given {} times; the model has one input '{}'", flag,
                                                           args.size(), net.input_name));
    }
    auto [name, path] = split(args[0]);
    if (!name.empty() && name != net.input_name) {
      std::error_code ec;
      if (fs::exists(args[0], ec)) {
        name.clear();
        path = args[0];
      } else {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}: the model has no input '{}' (its input is '{}')",
                                                             flag, args[0], name, net.input_name));
      }
    }
    Rows r = load_rows(path, net.input_features, net.input_shape, flag);
    r.files = {InputFile{net.input_name, path, net.input_features}};
    return r;
  }
  std::vector<std::string> names;
  for (const nn::InputPart& p : net.input_parts) names.push_back(p.name);
  const std::vector<std::string> path = match_named_inputs(args, names, flag);
  std::vector<Rows> part(path.size());
  for (size_t k = 0; k < path.size(); ++k) {
    const nn::InputPart& p = net.input_parts[k];
    part[k] = load_rows(path[k], p.features, p.shape, fmt::format("{} {}", flag, p.name));
    if (part[k].rows != part[0].rows) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{} {}={}: {} rows, but input '{}' ({}) has {}; every input of the model shares the "
                              "batch axis (the same row count)", flag, p.name, path[k], part[k].rows,
                              net.input_parts[0].name, path[0], part[0].rows));
    }
  }
  Rows r;
  r.rows = part[0].rows;
  r.x.reserve(r.rows * net.input_features);
  for (uint64_t row = 0; row < r.rows; ++row) {
    for (size_t k = 0; k < part.size(); ++k) {
      const uint64_t f = net.input_parts[k].features;
      r.x.insert(r.x.end(), part[k].x.begin() + static_cast<std::ptrdiff_t>(row * f),
                 part[k].x.begin() + static_cast<std::ptrdiff_t>((row + 1) * f));
    }
  }
  for (size_t k = 0; k < path.size(); ++k) r.files.push_back({net.input_parts[k].name, path[k], net.input_parts[k].features});
  return r;
}

// Per-layer figures summed over the batches.
struct LayerTotals : LayerCounters {
  std::string name;
  uint64_t m = 0, k = 0, n = 0;
  bool relu = false, int32_output = false;
};

double util(uint64_t macs, uint32_t n, uint64_t cycles) {
  return cycles == 0 ? 0.0 : static_cast<double>(macs) / (static_cast<double>(n) * n * static_cast<double>(cycles));
}

std::string pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// The device's int32 output against the CPU integer model (--check).
void check_raw(const RunOpts& o, const nn::QNetwork& q, const std::vector<int8_t>& x_q, uint64_t rows,
               const std::vector<int32_t>& raw, uint32_t classes) {
  const std::vector<int32_t> golden = nn::forward_int_raw(q, x_q, rows);
  for (size_t i = 0; i < golden.size(); ++i) {
    if (golden[i] != raw[i]) {
      throw Error(ErrorKind::kMismatch, fmt::format("mismatch: output[{}, {}] (int32 before dequantization): {} = {}, cpu = {}",
                                                    i / classes, i % classes, o.backend, raw[i], golden[i]));
    }
  }
}

// The final float outputs (after the host operators) against the CPU reference's, bit for bit.
void check_final(const RunOpts& o, const std::vector<float>& golden, const std::vector<float>& y, uint32_t classes,
                 const char* what) {
  for (size_t i = 0; i < golden.size() && i < y.size(); ++i) {
    if (num::to_bits(golden[i]) != num::to_bits(y[i])) {
      throw Error(ErrorKind::kMismatch,
                  fmt::format("mismatch: output[{}, {}] (after the host operators): {} = {} (0x{:08x}), {} = {} "
                              "(0x{:08x})", i / classes, i % classes, o.backend, y[i], num::to_bits(y[i]), what,
                              golden[i], num::to_bits(golden[i])));
    }
  }
}

// What the one- and several-device paths do with the device's int32 output: dequantize it, --check
// it against the CPU integer model, score --labels (int8 on the device and the float model), and
// write --output.
struct RunOutputs {
  json check_json = nullptr;
  double acc_int8 = 0, acc_float = 0;
};

// The features of output i ([rows, features] as written).
uint32_t output_cols(const nn::FloatNetwork& net, size_t i) {
  return net.outputs.empty() ? net.output_features() : net.outputs.at(i).cols;
}

// The model's outputs from the last layer's rows y after the network's own host operators: y itself,
// or for a model with several outputs each one's columns and host operators (nn::split_outputs).
std::vector<std::vector<float>> model_outputs(const nn::FloatNetwork& net, std::vector<float> y, uint64_t rows) {
  if (net.outputs.empty()) return {std::move(y)};
  return nn::split_outputs(net, y, rows);
}

// The file output i goes to: --output itself for one output; for several, out.npy -> out.NAME.npy
// (a name's characters other than letters, digits, '_', '-' and '.' become '_').
std::string output_file(const RunOpts& o, const nn::FloatNetwork& net, size_t i) {
  if (o.output.empty() || net.outputs.empty()) return o.output;
  std::string name = net.outputs.at(i).name;
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) c = '_';
  }
  const fs::path p(o.output);
  const std::string stem = p.extension() == ".npy" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / fmt::format("{}.{}.npy", stem, name)).string();
}

// --check, --labels (on the first output) and --output of the final outputs: `outs` from the
// device, `golden` from the CPU reference (compared bit for bit when --check), `flt` the float
// model's (for its accuracy).
void finish_model_outputs(const RunOpts& o, const nn::FloatNetwork& net, const Rows& in,
                          const std::vector<std::vector<float>>& outs, const std::vector<std::vector<float>>* golden,
                          const std::vector<int64_t>& labels, RunOutputs& r, const char* what) {
  if (golden != nullptr) {
    for (size_t i = 0; i < outs.size(); ++i) check_final(o, golden->at(i), outs[i], output_cols(net, i), what);
  }
  if (!labels.empty()) {
    r.acc_int8 = accuracy(outs[0], output_cols(net, 0), labels);
    r.acc_float = accuracy(model_outputs(net, nn::forward_float(net, in.x, in.rows), in.rows)[0], output_cols(net, 0),
                           labels);
  }
  if (o.output.empty()) return;
  for (size_t i = 0; i < outs.size(); ++i) {
    stage_npy(*o.outputs, output_file(o, net, i), npy::Array::from<float>({in.rows, output_cols(net, i)}, outs[i]));
  }
}

RunOutputs finish_outputs(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork& q,
                          const std::vector<int8_t>& x_q, const Rows& in, const std::vector<int32_t>& raw,
                          const std::vector<int64_t>& labels) {
  const uint32_t classes = net.output_features();
  const std::vector<std::vector<float>> outs = model_outputs(net, nn::dequantize_output(q, raw, in.rows), in.rows);
  RunOutputs r;
  std::vector<std::vector<float>> golden;
  if (o.check) {
    check_raw(o, q, x_q, in.rows, raw, classes);
    // The CPU reference applies the same dequantization and host operators: the final outputs are
    // equal bit for bit too.
    golden = model_outputs(net, nn::dequantize_output(q, nn::forward_int_raw(q, x_q, in.rows), in.rows), in.rows);
    r.check_json = json{{"cpu", "equal"}};
  }
  finish_model_outputs(o, net, in, outs, o.check ? &golden : nullptr, labels, r, "cpu integer model");
  return r;
}

// --devices K / --strategy: the rows on K devices through a Worker (tpuw/worker/strategies.h).
// The host operators after the device program, for the reports: each reads the rows that came
// back from the device (int32 or fp32) or that the operator before it wrote, and writes fp32 rows.
struct HostRow {
  std::string name, op;
  uint64_t features = 0, rd_bytes = 0, wr_bytes = 0;
  std::string output;  // the graph output it computes (a model with several)
  bool before = false; // on the raw input rows, before the device program (FloatNetwork::input_steps)
};

std::vector<HostRow> host_rows(const nn::FloatNetwork& net, uint64_t rows) {
  const uint64_t f = net.output_features(), bytes = rows * f * 4;
  std::vector<HostRow> r;
  const uint64_t in_bytes = rows * uint64_t{net.input_features} * 4;
  for (const nn::HostStep& st : net.input_steps) {
    r.push_back({st.name, nn::host_op_name(st.op), net.input_features, in_bytes, in_bytes, "", true});
  }
  if (net.host_op != nn::HostOp::kNone) r.push_back({"softmax", nn::host_op_name(net.host_op), f, bytes, bytes, ""});
  for (const nn::HostStep& st : net.host_steps) r.push_back({st.name, nn::host_op_name(st.op), f, bytes, bytes, ""});
  for (const nn::NetOutput& out : net.outputs) {
    const uint64_t b = rows * out.cols * 4;
    for (const nn::HostStep& st : out.host_steps) {
      r.push_back({st.name, nn::host_op_name(st.op), out.cols, b, b, out.name});
    }
  }
  return r;
}

// The host operators of one output (the only one: "" for a model with several): "softmax",
// "layernorm -> logsoftmax", or "none".
std::string host_ops_string(const nn::FloatNetwork& net, const std::string& output = "");

// A model with several outputs: "'probs': softmax; 'logp': logsoftmax" (those with host operators).
std::string all_host_ops_string(const nn::FloatNetwork& net) {
  std::vector<std::string> parts;
  for (const nn::NetOutput& out : net.outputs) {
    const std::string h = host_ops_string(net, out.name);
    if (h != "none") parts.push_back(fmt::format("'{}': {}", out.name, h));
  }
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, "; "));
}

// The host operators on the graph input, before the device ("none" without).
std::string input_ops_string(const nn::FloatNetwork& net) {
  std::vector<std::string> ops;
  for (const nn::HostStep& st : net.input_steps) ops.push_back(nn::host_op_name(st.op));
  return ops.empty() ? "none" : fmt::format("{}", fmt::join(ops, " -> "));
}

std::string host_ops_string(const nn::FloatNetwork& net, const std::string& output) {
  if (output.empty() && !net.outputs.empty()) return all_host_ops_string(net);
  std::vector<std::string> host;
  for (const HostRow& h : host_rows(net, 0)) {
    if (h.output == output && !h.before) host.push_back(h.op);
  }
  return host.empty() ? "none" : fmt::format("{}", fmt::join(host, " -> "));
}

// A model with several outputs: "'logits' [batch, 10], 'probs' [batch, 10] (softmax on the host)".
std::string outputs_string(const nn::FloatNetwork& net) {
  std::vector<std::string> parts;
  for (const nn::NetOutput& out : net.outputs) {
    const std::string host = host_ops_string(net, out.name);
    parts.push_back(fmt::format("'{}' [batch, {}]{}", out.name, out.cols,
                                host == "none" ? "" : fmt::format(" ({} on the host)", host)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The model lines both the one-device and the several-device reports start with.
// q is null for bf16 (no quantization).
// The bytes of one input's rows in the device's input buffer (int8: 1 per value, bf16: 2).
uint64_t input_bytes(const RunOpts& o, const InputFile& f, uint64_t rows) {
  return rows * f.features * (o.precision == "bf16" ? 2 : 1);
}

void print_model_header(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork* q, const Rows& in,
                        const Rows& cal) {
  const uint32_t classes = net.output_features();
  const std::string host = host_ops_string(net);
  const std::string pre = net.input_steps.empty() ? "" : fmt::format(" -> {} (host)", input_ops_string(net));
  if (!net.input_parts.empty()) {
    // Several graph inputs: each one's file and its bytes in the input buffer.
    std::vector<std::string> parts;
    for (size_t k = 0; k < in.files.size(); ++k) {
      const InputFile& f = in.files[k];
      parts.push_back(fmt::format("'{}' {} from {} ({} bytes)", f.name, model_shape_string(net.input_parts[k].shape),
                                  f.file, input_bytes(o, f, in.rows)));
    }
    fmt::print("{}: {} graph inputs, side by side in each row of the input buffer: {}\n", o.model,
               net.input_parts.size(), fmt::join(parts, ", "));
  }
  if (!net.outputs.empty()) {
    fmt::print("{}: input '{}' {}{} -> {} dense layer{} [batch, {}] -> {} outputs: {}\n", o.model, net.input_name,
               model_shape_string(net.input_shape), pre, net.layers.size(), net.layers.size() == 1 ? "" : "s", classes,
               net.outputs.size(), outputs_string(net));
  } else {
    fmt::print("{}: input '{}' {}{} -> {} dense layer{}{} -> '{}' [batch, {}]\n", o.model, net.input_name,
               model_shape_string(net.input_shape), pre, net.layers.size(), net.layers.size() == 1 ? "" : "s",
               host == "none" ? "" : fmt::format(" -> {} (host)", host), net.output_name, classes);
  }
  if (q == nullptr) {
    fmt::print("bf16: input and weights rounded to bf16 (round-to-nearest-even), fp32 accumulation and bias, bf16 "
               "activations between layers, fp32 outputs; no calibration\n");
    return;
  }
  std::string scales = fmt::format("input scale {:.6g}", q->input_scale);
  if (!q->input_part_scales.empty()) {
    std::vector<std::string> s;
    for (size_t k = 0; k < q->input_part_scales.size() && k < net.input_parts.size(); ++k) {
      s.push_back(fmt::format("'{}' {:.6g}", net.input_parts[k].name, q->input_part_scales[k]));
    }
    scales = fmt::format("input scales {}", fmt::join(s, ", "));
  }
  fmt::print("int8: {}, activation scales calibrated on {} ({} rows)\n", scales,
             o.calibrate.empty() ? o.input + " (the input itself; use --calibrate)" : o.calibrate, cal.rows);
}

// The model and input keys both JSON reports start with.
// q is null for bf16: no input_scale / calibration keys.
json model_json(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork* q, const Rows& in, uint64_t batch,
                uint64_t batches, const Rows& cal) {
  json j;
  j["model"] = o.model;
  j["input"] = o.input;
  // Every graph input: its name, file, features and bytes in the device's input buffer.
  json ins = json::array();
  for (size_t k = 0; k < in.files.size(); ++k) {
    const InputFile& f = in.files[k];
    json e = {{"name", f.name}, {"file", f.file}, {"features", f.features}, {"bytes", input_bytes(o, f, in.rows)}};
    if (q != nullptr && k < q->input_part_scales.size()) e["scale"] = q->input_part_scales[k];
    ins.push_back(std::move(e));
  }
  j["inputs"] = ins;
  j["tpuw_version"] = version_string();
  j["backend"] = o.backend;
  j["precision"] = o.precision;
  j["array_n"] = o.array_n;
  j["rows"] = in.rows;
  j["batch"] = batch;
  j["batches"] = batches;
  j["input_features"] = net.input_features;
  j["output_features"] = net.output_features();
  j["host_op"] = host_ops_string(net);
  j["input_host_op"] = input_ops_string(net);
  json hs = json::array();
  for (const HostRow& h : host_rows(net, in.rows)) {
    json e = {{"name", h.name}, {"op", h.op}, {"on", "host"}, {"m", in.rows}, {"features", h.features},
              {"rd_bytes", h.rd_bytes}, {"wr_bytes", h.wr_bytes}, {"before_device", h.before}};
    if (!h.output.empty()) e["output"] = h.output;
    hs.push_back(std::move(e));
  }
  j["host_ops"] = hs;
  // Every graph output: its name, features, host operators and file (--output).
  json outs = json::array();
  const size_t n_out = net.outputs.empty() ? 1 : net.outputs.size();
  for (size_t i = 0; i < n_out; ++i) {
    const std::string name = net.outputs.empty() ? net.output_name : net.outputs[i].name;
    const std::string file = output_file(o, net, i);
    outs.push_back({{"name", name}, {"features", output_cols(net, i)},
                    {"host_op", host_ops_string(net, net.outputs.empty() ? "" : name)},
                    {"file", file.empty() ? json(nullptr) : json(file)}});
  }
  j["outputs"] = outs;
  if (q != nullptr) {
    j["input_scale"] = q->input_scale;
    j["calibration"] = o.calibrate.empty() ? o.input : o.calibrate;
    j["calibration_rows"] = cal.rows;
  }
  return j;
}

// The accuracy, check and output keys both JSON reports end with.
void add_result_json(json& j, const RunOpts& o, size_t label_rows, double acc_int8, double acc_float,
                     const json& check_json) {
  if (label_rows > 0) {
    j["accuracy"] = {{"labels", o.labels}, {"rows", label_rows}, {o.precision, acc_int8}, {"float", acc_float}};
  } else {
    j["accuracy"] = nullptr;
  }
  j["check"] = check_json;
  j["output"] = o.output.empty() ? json(nullptr) : json(o.output);
}

// The accuracy, check and output lines both human reports end with.
void print_result_tail(const RunOpts& o, const nn::FloatNetwork& net, size_t label_rows, double acc_int8, double acc_float, uint64_t rows,
                       uint32_t classes) {
  if (label_rows > 0) {
    fmt::print("accuracy on {} ({} rows): {} on {} {:.2f}%, float model {:.2f}% ({:+.2f} points)\n", o.labels,
               label_rows, o.precision, o.backend, 100.0 * acc_int8, 100.0 * acc_float, 100.0 * (acc_int8 - acc_float));
  }
  if (o.check) {
    fmt::print("check: device output equals the CPU {} model bit for bit\n",
               o.precision == "bf16" ? "bf16 (docs/numerics.md contract)" : "integer");
  }
  if (o.output.empty()) return;
  if (net.outputs.empty()) {
    fmt::print("output -> {} (float32, ({}, {}))\n", o.output, rows, classes);
    return;
  }
  for (size_t i = 0; i < net.outputs.size(); ++i) {
    fmt::print("output '{}' -> {} (float32, ({}, {}))\n", net.outputs[i].name, output_file(o, net, i), rows,
               net.outputs[i].cols);
  }
}

int run_multi(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork& q, const std::vector<int8_t>& x_q,
              const Rows& in, const std::vector<int64_t>& labels, const Rows& cal, runtime::Trace* trace) {
  const uint32_t classes = net.output_features();
  const worker::Strategy strategy = worker::parse_strategy(o.multi.strategy.empty() ? "data" : o.multi.strategy).value();
  const DeviceParams* params = find_device_config(o.array_n);
  // Host memory per device: the weights plus two micro-batches' images (the default micro-batch is
  // at most 256 rows).
  const uint64_t mb = std::min<uint64_t>(o.batch == 0 ? 256 : o.batch, in.rows);
  const runtime::NetworkPlan plan = runtime::plan_network(*params, q, mb);
  const uint64_t need = plan.weight_bytes + plan.param_bytes +
                        2 * (plan.input_bytes + plan.spill_bytes + plan.output_bytes + 4 * 4096) + (8ull << 20);
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a micro-batch of {} rows needs {} MiB of host memory; use a smaller --batch", mb, need >> 20));
  }
  worker::WorkerOptions wo;
  wo.backend = o.backend;
  wo.config.array_n = o.array_n;
  wo.config.memory.size = mem;
  wo.devices = o.multi.devices;
  const runtime::Trace::Track main = trace != nullptr ? trace->host_thread("main") : runtime::Trace::Track{};
  auto open_span = runtime::Trace::scope(trace, main, fmt::format("open {} devices", wo.devices));
  worker::Worker w(wo);
  open_span.end();
  worker::NetworkStrategyOptions so;
  so.strategy = strategy;
  so.micro_batch = o.batch;
  so.trace = trace;
  auto run_span = runtime::Trace::scope(trace, main, fmt::format("{} rows on {} devices ({})", in.rows, w.size(),
                                                                  worker::to_string(strategy)));
  const worker::NetworkStrategyResult r = worker::run_network_parallel(w, q, x_q, in.rows, so);
  run_span.end();
  const std::vector<int32_t>& raw = r.output_i32;
  if (raw.size() != in.rows * classes) {
    throw Error(ErrorKind::kInternal, fmt::format("network run returned {} outputs, expected {}", raw.size(), in.rows * classes));
  }
  auto out_span = runtime::Trace::scope(trace, main, "outputs (check, accuracy, write)");
  const auto [check_json, acc_int8, acc_float] = finish_outputs(o, net, q, x_q, in, raw, labels);
  out_span.end();
  if (trace != nullptr) stage_trace(*o.outputs, o.trace, trace->to_json());

  const worker::StrategyReport& rep = r.report;
  uint64_t cycles = 0;
  for (const worker::DeviceUse& d : rep.per_device) cycles += d.perf.cycles;
  const double rows_per_s = rep.wall_s > 0 ? static_cast<double>(in.rows) / rep.wall_s : 0.0;
  if (o.json) {
    json j = model_json(o, net, &q, in, rep.micro_batch, rep.micro_batches, cal);
    j["cycles"] = cycles;
    j["macs"] = r.macs;
    j["rows_per_s"] = rows_per_s;
    const json report = strategy_report_json(rep, o.array_n);
    for (auto it = report.begin(); it != report.end(); ++it) j[it.key()] = it.value();
    add_result_json(j, o, labels.size(), acc_int8, acc_float, check_json);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_model_header(o, net, &q, in, cal);
  fmt::print("{} rows on {} (N={}) x {} device{}, strategy {}: {} micro-batch{} of {} rows, wall {:.3f} s, {:.0f} "
             "rows/s, overlap {:.2f} (sum of busy time / (devices x wall))\n",
             in.rows, o.backend, o.array_n, rep.devices, rep.devices == 1 ? "" : "s", rep.strategy, rep.micro_batches,
             rep.micro_batches == 1 ? "" : "es", rep.micro_batch, rep.wall_s, rows_per_s, rep.overlap);
  if (strategy == worker::Strategy::kPipeline && o.multi.devices > rep.devices) {
    fmt::print("  ({} of the {} devices used: one pipeline stage per layer at most)\n", rep.devices, o.multi.devices);
  }
  print_strategy_report(rep, o.array_n);
  print_result_tail(o, net, labels.size(), acc_int8, acc_float, in.rows, classes);
  return kOk;
}

// The one-device run summed over its batches: what the report prints.
struct SingleRun {
  std::vector<LayerTotals> layers;
  PerfCounters perf;
  uint64_t rd_bytes = 0, wr_bytes = 0, min_bytes = 0, macs = 0, instructions = 0, sim_cycles = 0;
  double wall = 0;
  std::string traffic_note;  // the planner's one-line reason when bytes exceed 1.5x the minimum (int8)
  uint64_t chunk = 0, chunks = 0;

  // Adds one batch's per-layer figures; relu/wide_output per layer (wide: int32 or fp32 output).
  void add(const std::vector<runtime::LayerReport>& lrs, const std::vector<std::string>& names,
           const std::vector<bool>& relu, const std::vector<bool>& wide_output) {
    layers.resize(names.size());
    for (size_t i = 0; i < lrs.size() && i < layers.size(); ++i) {
      const runtime::LayerReport& lr = lrs[i];
      LayerTotals& t = layers[i];
      t.name = lr.name.empty() ? names[i] : lr.name;
      t.m += lr.m;
      t.k = lr.k;
      t.n = lr.n;
      t.relu = relu[i];
      t.int32_output = wide_output[i];
      t.add(lr);
    }
  }
};

// The progress line on stderr (a terminal only, after 2 s), for batch c of s.chunks.
std::function<void(double)> progress_fn(const RunOpts& o, const SingleRun& s, uint64_t c,
                                        std::chrono::steady_clock::time_point t0, bool& shown) {
  if (o.quiet || o.json || isatty(fileno(stderr)) == 0) return {};
  const uint64_t chunks = s.chunks;
  return [c, chunks, t0, &shown](double f) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el < 2.0) return;
    shown = true;
    fmt::print(stderr, "\rtpuw run: {:3.0f}% ({:.0f} s)", 100.0 * (static_cast<double>(c) + f) / static_cast<double>(chunks), el);
  };
}

// The one-device report (human or --json); q is null for bf16.
int report_single(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork* q, const Rows& in,
                  const Rows& cal, const SingleRun& s, unsigned array_n, const RunOutputs& res, size_t label_rows) {
  const bool bf16 = q == nullptr;
  const uint32_t classes = net.output_features();
  const double utilization = util(s.macs, array_n, s.perf.cycles);
  const double sim_hz = s.wall > 0 ? static_cast<double>(s.sim_cycles) / s.wall : 0.0;
  const runtime::Energy energy = runtime::estimate_energy(s.perf, array_n, bf16, o.table);
  const double joules = energy.total_pj() * 1e-12;
  if (o.json) {
    json j = model_json(o, net, q, in, s.chunk, s.chunks, cal);
    j["array_n"] = array_n;  // the device's
    json jl = json::array();
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const LayerTotals& t = s.layers[i];
      json l = {{"name", t.name}, {"m", t.m}, {"k", t.k}, {"n", t.n}, {"relu", t.relu}};
      l[bf16 ? "fp32_output" : "int32_output"] = t.int32_output;
      const json rest = {{"cycles", t.cycles}, {"utilization", util(t.m * t.k * t.n, array_n, t.cycles)},
                         {"rd_bytes", t.rd_bytes}, {"wr_bytes", t.wr_bytes}, {"min_bytes", t.min_bytes},
                         {"mxu_active", t.mxu_active}, {"weight_stall", t.weight_stall},
                         {"weight_shift", t.weight_shift}, {"dma_wait", t.dma_wait}, {"act_busy", t.act_busy},
                         {"instructions", t.instructions}, {"vector_cycles", t.vector_cycles},
                         {"energy_uj", runtime::estimate_energy(t.perf(), array_n, bf16, o.table).total_pj() * 1e-6}};
      for (auto it = rest.begin(); it != rest.end(); ++it) l[it.key()] = it.value();
      jl.push_back(l);
    }
    j["layers"] = jl;
    j["cycles"] = s.perf.cycles;
    j["utilization"] = utilization;
    j["macs"] = s.macs;
    j["rd_bytes"] = s.rd_bytes;
    j["wr_bytes"] = s.wr_bytes;
    j["min_bytes"] = s.min_bytes;
    if (!s.traffic_note.empty()) j["traffic_note"] = s.traffic_note;
    j["instructions"] = s.instructions;
    j["wall_s"] = s.wall;
    j["sim_hz"] = sim_hz;
    j["perf"] = perf_json(s.perf);
    add_energy_json(j, energy, s.macs, o.table);
    j["rows_per_j"] = joules > 0 ? static_cast<double>(in.rows) / joules : 0.0;
    add_result_json(j, o, label_rows, res.acc_int8, res.acc_float, res.check_json);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_model_header(o, net, q, in, cal);
  fmt::print("{} rows on {} (N={}) in {} batch{} of {}: {} cycles, utilization {:.3f}, wall {:.3f} s, {:.2f} M "
             "simulated cycles/s\n",
             in.rows, o.backend, array_n, s.chunks, s.chunks == 1 ? "" : "es", s.chunk, s.perf.cycles, utilization,
             s.wall, sim_hz / 1e6);
  fmt::print("  {:<3} {:<40} {:>16} {:>10} {:>6} {:>10} {:>10} {:>10}  {}\n", "#", "layer", "m x k x n", "cycles",
             "util", "rd bytes", "wr bytes", "min bytes", "cycles went to: mxu / w-stall / w-shift / dma-wait / act");
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerTotals& t = s.layers[i];
    std::string name = t.name + (t.int32_output ? (bf16 ? " [fp32 out]" : " [int32 out]") : "");
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    fmt::print("  {:<3} {:<40} {:>16} {:>10} {:>6.3f} {:>10} {:>10} {:>10}  {} / {} / {} / {} / {}{}\n", i, name,
               fmt::format("{}x{}x{}", t.m, t.k, t.n), t.cycles, util(t.m * t.k * t.n, array_n, t.cycles),
               t.rd_bytes, t.wr_bytes, t.min_bytes, pct(t.mxu_active, t.cycles), pct(t.weight_stall, t.cycles),
               pct(t.weight_shift, t.cycles), pct(t.dma_wait, t.cycles), pct(t.act_busy, t.cycles),
               t.vector_cycles > 0 ? fmt::format(" (VECTOR {} cycles)", t.vector_cycles) : "");
  }
  size_t row = s.layers.size();
  for (const HostRow& h : host_rows(net, in.rows)) {
    std::string name = h.name + " [host]";
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    fmt::print("  {:<3} {:<40} {:>16} {:>10} {:>6} {:>10} {:>10} {:>10}  host, fp32{}{}\n", row++, name,
               fmt::format("{}x{}", in.rows, h.features), "-", "-", h.rd_bytes, h.wr_bytes, "-",
               h.before ? ", on the input before the device" : "",
               h.output.empty() ? "" : fmt::format(" -> output '{}'", h.output));
  }
  const PerfCounters& perf = s.perf;
  fmt::print("  total: {} cycles; mxu_active {} weight_stall {} weight_shift {} dma_wait {} act_busy {} instret {}; "
             "bytes read {} written {} (minimum {})\n",
             perf.cycles, perf.mxu_active, perf.weight_stall, perf.weight_shift, perf.dma_wait, perf.act_busy,
             perf.instret, s.rd_bytes, s.wr_bytes, s.min_bytes);
  if (!s.traffic_note.empty()) fmt::print("  bytes above 1.5x the minimum: {}\n", s.traffic_note);
  fmt::print("  energy: {}, {:.3g} TOPS/W, {:.3g} rows/J (docs/energy.md)\n", runtime::energy_line(energy),
             runtime::tops_per_watt(s.macs, energy), joules > 0 ? static_cast<double>(in.rows) / joules : 0.0);
  print_result_tail(o, net, label_rows, res.acc_int8, res.acc_float, in.rows, classes);
  return kOk;
}

using runtime::Trace;

// The main thread's track (none without --trace).
Trace::Track main_track(Trace* trace) { return trace != nullptr ? trace->host_thread("main") : Trace::Track{}; }

runtime::TraceHook trace_hook(Trace* trace, const Device& dev) {
  runtime::TraceHook h;
  h.trace = trace;
  h.device_name = runtime::trace_device_name(dev);
  return h;
}

// Host memory for `need` bytes of images plus the command ring and slack (64 MiB at least).
uint64_t memory_for(uint64_t need, uint64_t chunk) {
  need += 8ull << 20;
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a batch of {} rows needs {} MiB of host memory; use a smaller --batch", chunk, need >> 20));
  }
  return mem;
}

RunOutputs finish_outputs_bf16(const RunOpts& o, const nn::FloatNetwork& net, const Rows& in, std::vector<float> y,
                               const std::vector<int64_t>& labels, unsigned array_n);

// --precision bf16: the float network on the device in bf16 (tpuw/runtime/network_bf16.h).
int run_bf16(const RunOpts& o, const nn::FloatNetwork& net, const Rows& in, const std::vector<int64_t>& labels,
             const DeviceParams& params, runtime::Trace* trace) {
  const uint32_t classes = net.output_features();
  SingleRun s;
  s.chunk = o.batch == 0 ? in.rows : std::min<uint64_t>(o.batch, in.rows);
  s.chunks = (in.rows + s.chunk - 1) / s.chunk;
  BackendConfig bc;
  bc.array_n = o.array_n;
  bc.memory.size = memory_for(runtime::network_bf16_memory_bytes(params, net, s.chunk), s.chunk);
  auto open_span = Trace::scope(trace, main_track(trace), "open device");
  Device dev = Device::open(o.backend, bc);
  open_span.end();
  const unsigned array_n = device_array_n(dev, o.array_n, o.array_n_opt != nullptr && o.array_n_opt->count() > 0);

  std::vector<std::string> names;
  std::vector<bool> relu, wide;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    names.push_back(net.layers[i].name);
    relu.push_back(net.layers[i].relu);
    wide.push_back(i + 1 == net.layers.size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  std::vector<float> y;
  y.reserve(in.rows * classes);
  for (uint64_t c = 0; c < s.chunks; ++c) {
    const uint64_t r0 = c * s.chunk, rows = std::min(s.chunk, in.rows - r0);
    runtime::Bf16NetworkOptions nopt;
    nopt.progress = progress_fn(o, s, c, t0, progress_shown);
    nopt.trace = trace_hook(trace, dev);
    auto batch_span = Trace::scope(trace, main_track(trace), fmt::format("batch {} ({} rows)", c, rows));
    const std::span<const float> xs(in.x.data() + r0 * net.input_features, rows * net.input_features);
    const runtime::Bf16NetworkRunResult r = runtime::run_network_bf16(dev, net, xs, rows, nopt);
    if (r.output.size() != rows * classes) {
      throw Error(ErrorKind::kInternal, fmt::format("network run returned {} outputs, expected {}", r.output.size(),
                                                    rows * classes));
    }
    y.insert(y.end(), r.output.begin(), r.output.end());
    s.add(r.layers, names, relu, wide);
    s.perf += r.perf;
    s.rd_bytes += r.rd_bytes;
    s.wr_bytes += r.wr_bytes;
    s.min_bytes += r.min_bytes;
    s.macs += r.macs;
    s.instructions += r.instructions;
    s.sim_cycles += r.sim_cycles;
    s.wall += r.wall_s;
  }
  if (progress_shown) fmt::print(stderr, "\n");

  auto check_span = Trace::scope(trace, main_track(trace), "outputs (check, accuracy, write)");
  const RunOutputs res = finish_outputs_bf16(o, net, in, std::move(y), labels, array_n);
  check_span.end();
  if (trace != nullptr) stage_trace(*o.outputs, o.trace, trace->to_json());
  return report_single(o, net, nullptr, in, in, s, array_n, res, labels.size());
}

// What the one-rank and the several-rank bf16 paths do with the device's fp32 output `y` (before
// the host operator): --check it against the CPU bf16 model, apply the host operator, score
// --labels and write --output.
RunOutputs finish_outputs_bf16(const RunOpts& o, const nn::FloatNetwork& net, const Rows& in, std::vector<float> y,
                               const std::vector<int64_t>& labels, unsigned array_n) {
  const uint32_t classes = net.output_features();
  RunOutputs res;
  runtime::check_bf16_outputs(y, classes);  // an overflow to inf or NaN is no result, checked or not
  if (o.check) {
    // Rows are independent in the contract: the whole input at once equals the batches.
    const std::vector<float> golden = runtime::forward_bf16_host(net, in.x, in.rows, array_n);
    check_bf16_output(golden, y, classes, o.backend);
    res.check_json = json{{"cpu", "equal"}};
  }
  nn::apply_host_ops(y, classes, net.host_op, net.host_steps);
  const std::vector<std::vector<float>> outs = model_outputs(net, std::move(y), in.rows);
  std::vector<std::vector<float>> golden;
  if (o.check) {
    // The CPU reference applies the same host operators: the final outputs are equal bit for bit too.
    std::vector<float> g = runtime::forward_bf16_host(net, in.x, in.rows, array_n);
    nn::apply_host_ops(g, classes, net.host_op, net.host_steps);
    golden = model_outputs(net, std::move(g), in.rows);
  }
  finish_model_outputs(o, net, in, outs, o.check ? &golden : nullptr, labels, res, "cpu bf16 model");
  return res;
}

// ---- mpirun -np P tpuw run: the rows sharded over the ranks (docs/scaling.md) -------------------
// Every rank has read the model, the input, the labels and the calibration rows, and (int8)
// quantized with the activation scales calibrated on the whole calibration set: the same
// deterministic computation on the same bytes, so every rank holds the same QNetwork bit for bit.
// Rank r runs rows [r * rows / P, (r + 1) * rows / P) -- int8 on its K devices through the data
// (or pipeline) strategy, bf16 on one device in batches of --batch -- and sends rank 0 its status,
// figures, output and trace in one allgather. Rank 0 alone checks, scores, writes --output and
// --trace and prints the report (one line per rank). A rank whose run fails sends its error: every
// rank then ends with "rank R: ..." (the first failing rank); a rank that dies makes the others'
// allgather time out after --mpi-timeout seconds (Error kTimeout, then MPI_Abort).

int run_ranks(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork* q, const std::vector<int8_t>& x_q,
              const Rows& in, const std::vector<int64_t>& labels, const Rows& cal, runtime::Trace* trace) {
  const std::unique_ptr<worker::Collective> mpi = open_mpi(o.mpi_timeout);
  const auto P = static_cast<uint64_t>(mpi->size());
  const auto R = static_cast<uint64_t>(mpi->rank());
  const uint32_t classes = net.output_features();
  const uint64_t r0 = in.rows * R / P, r1 = in.rows * (R + 1) / P, rows = r1 - r0;
  const bool bf16 = q == nullptr;
  const Trace::Track main = main_track(trace);
  (void)mpi->allgather({});  // every rank is up: the wall time starts together
  const auto t0 = std::chrono::steady_clock::now();

  json head = {{"rank", R}, {"first_row", r0}, {"rows", rows}};
  std::vector<uint8_t> out_bytes;
  try {
    if (!o.inject_rank_fail.empty() && std::stoull(o.inject_rank_fail) == R) {
      if (o.inject_rank_fail.ends_with(":exit")) std::_Exit(1);  // dies without a word: the others time out
      throw Error(ErrorKind::kDeviceFault, "injected failure (--inject-rank-failure)");
    }
    auto run_span = Trace::scope(trace, main, fmt::format("rank {}: rows {}-{}", R, r0, r1 == 0 ? 0 : r1 - 1));
    uint64_t cycles = 0;
    double wall = 0;
    if (rows > 0 && !bf16) {
      const worker::Strategy strategy =
          worker::parse_strategy(o.multi.strategy.empty() ? "data" : o.multi.strategy).value();
      const uint64_t mb = std::min<uint64_t>(o.batch == 0 ? 256 : o.batch, rows);
      const runtime::NetworkPlan plan = runtime::plan_network(*find_device_config(o.array_n), *q, mb);
      worker::WorkerOptions wo;
      wo.backend = o.backend;
      wo.config.array_n = o.array_n;
      wo.config.memory.size = memory_for(plan.weight_bytes + plan.param_bytes +
                                             2 * (plan.input_bytes + plan.spill_bytes + plan.output_bytes + 4 * 4096),
                                         mb);
      wo.devices = o.multi.devices;
      worker::Worker w(wo);
      worker::NetworkStrategyOptions so;
      so.strategy = strategy;
      so.micro_batch = o.batch;
      so.trace = trace;
      const std::span<const int8_t> xs(x_q.data() + r0 * q->input_features, rows * q->input_features);
      const worker::NetworkStrategyResult r = worker::run_network_parallel(w, *q, xs, rows, so);
      if (r.output_i32.size() != rows * classes) {
        throw Error(ErrorKind::kInternal,
                    fmt::format("network run returned {} outputs, expected {}", r.output_i32.size(), rows * classes));
      }
      out_bytes.resize(r.output_i32.size() * 4);
      std::memcpy(out_bytes.data(), r.output_i32.data(), out_bytes.size());
      for (const worker::DeviceUse& d : r.report.per_device) cycles += d.perf.cycles;
      wall = r.report.wall_s;
      head["devices"] = r.report.devices;
      head["overlap"] = r.report.overlap;
      head["micro_batches"] = r.report.micro_batches;
    } else if (rows > 0) {
      const uint64_t chunk = o.batch == 0 ? rows : std::min<uint64_t>(o.batch, rows);
      BackendConfig bc;
      bc.array_n = o.array_n;
      bc.memory.size = memory_for(runtime::network_bf16_memory_bytes(*find_device_config(o.array_n), net, chunk), chunk);
      Device dev = Device::open(o.backend, bc);
      std::vector<float> y;
      for (uint64_t a = r0; a < r1; a += chunk) {
        const uint64_t n = std::min(chunk, r1 - a);
        runtime::Bf16NetworkOptions nopt;
        nopt.trace = trace_hook(trace, dev);
        const std::span<const float> xs(in.x.data() + a * net.input_features, n * net.input_features);
        const runtime::Bf16NetworkRunResult r = runtime::run_network_bf16(dev, net, xs, n, nopt);
        if (r.output.size() != n * classes) {
          throw Error(ErrorKind::kInternal,
                      fmt::format("network run returned {} outputs, expected {}", r.output.size(), n * classes));
        }
        y.insert(y.end(), r.output.begin(), r.output.end());
        cycles += r.perf.cycles;
        wall += r.wall_s;
      }
      out_bytes.resize(y.size() * 4);
      std::memcpy(out_bytes.data(), y.data(), out_bytes.size());
      head["devices"] = 1;
    }
    run_span.end();
    head["cycles"] = cycles;
    head["device_wall_s"] = wall;
    head["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (trace != nullptr) head["trace"] = trace->to_json();
  } catch (const Error& e) {
    head["error"] = e.what();
    head["kind"] = static_cast<int>(e.kind());
  }
  const std::vector<std::vector<uint8_t>> all = mpi->allgather(pack_rank(head, out_bytes));
  const double job_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<json> heads;
  std::vector<std::span<const uint8_t>> outs;
  for (size_t r = 0; r < all.size(); ++r) {
    auto [h, bytes] = unpack_rank(all[r], r);
    if (h.contains("error")) {
      throw Error(static_cast<ErrorKind>(h["kind"].get<int>()),
                  fmt::format("rank {}: {}", r, h["error"].get<std::string>()));
    }
    if (bytes.size() != h["rows"].get<uint64_t>() * classes * 4) {
      throw Error(ErrorKind::kInternal, fmt::format("MPI: rank {} sent {} output bytes for {} rows", r, bytes.size(),
                                                    h["rows"].get<uint64_t>()));
    }
    heads.push_back(std::move(h));
    outs.push_back(bytes);
  }
  if (R != 0) return kOk;  // rank 0 reports for every rank

  // ---- rank 0: the outputs in rank order, then what one rank does with them ---------------------
  RunOutputs res;
  if (!bf16) {
    std::vector<int32_t> raw(in.rows * classes);
    uint8_t* dst = reinterpret_cast<uint8_t*>(raw.data());
    for (const auto& b : outs) dst = std::copy(b.begin(), b.end(), dst);
    res = finish_outputs(o, net, *q, x_q, in, raw, labels);
  } else {
    std::vector<float> y(in.rows * classes);
    uint8_t* dst = reinterpret_cast<uint8_t*>(y.data());
    for (const auto& b : outs) dst = std::copy(b.begin(), b.end(), dst);
    res = finish_outputs_bf16(o, net, in, std::move(y), labels, o.array_n);
  }
  if (trace != nullptr) {
    std::vector<json> traces;
    for (const json& h : heads) traces.push_back(h.value("trace", json::object({{"traceEvents", json::array()}})));
    stage_trace(*o.outputs, o.trace, runtime::merge_rank_traces(traces));
  }
  const double rows_per_s = job_wall > 0 ? static_cast<double>(in.rows) / job_wall : 0.0;
  const unsigned k_dev = bf16 ? 1u : o.multi.devices;
  if (o.json) {
    json j = model_json(o, net, q, in, o.batch, 0, cal);
    j.erase("batches");
    j["ranks"] = P;
    j["devices"] = k_dev;
    j["wall_s"] = job_wall;
    j["rows_per_s"] = rows_per_s;
    uint64_t cycles = 0;
    json per = json::array();
    for (json& h : heads) {
      cycles += h.value("cycles", uint64_t{0});
      h.erase("trace");
      per.push_back(h);
    }
    j["cycles"] = cycles;
    j["per_rank"] = per;
    add_result_json(j, o, labels.size(), res.acc_int8, res.acc_float, res.check_json);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_model_header(o, net, q, in, cal);
  fmt::print("{} rows on {} ranks x {} device{} ({}, N={}), rows split in contiguous blocks: wall {:.3f} s, {:.0f} "
             "rows/s\n",
             in.rows, P, k_dev, k_dev == 1 ? "" : "s", o.backend, o.array_n, job_wall, rows_per_s);
  for (const json& h : heads) {
    const auto n = h["rows"].get<uint64_t>(), a = h["first_row"].get<uint64_t>();
    const double w = h["wall_s"].get<double>();
    fmt::print("  rank {}: rows {}-{} ({}), {} cycles, wall {:.3f} s, {:.0f} rows/s{}\n", h["rank"].get<uint64_t>(), a,
               n == 0 ? a : a + n - 1, n, h.value("cycles", uint64_t{0}), w, w > 0 ? static_cast<double>(n) / w : 0.0,
               h.contains("overlap") ? fmt::format(", overlap {:.2f}", h["overlap"].get<double>()) : "");
  }
  print_result_tail(o, net, labels.size(), res.acc_int8, res.acc_float, in.rows, classes);
  return kOk;
}

// A model with convolutions or pooling: through cmd_run_cnn.cpp (int8) or cmd_run_cnn_bf16.cpp
// (bf16), on one device or (--devices K) data-parallel on K.
int run_cnn_branch(const RunOpts& o) {
  if (!o.multi.strategy.empty() && o.multi.strategy != "data") {
    // Pipeline stages split a dense network's layers over the devices; a CNN's layers are separate
    // programs with their own host-memory hand-over, not stages of one compiled network.
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: --strategy {}: a CNN runs data-parallel only (--strategy data: images split into "
                            "micro-batches over the devices)",
                            o.model, o.multi.strategy));
  }
  // The files as the report names them: FILE for one input (NAME=FILE with its name: the FILE),
  // NAME=FILE, ... for several (cnn_report.h, load_cnn_inputs, checks them).
  auto report_name = [&](const std::vector<std::string>& args) -> std::string {
    if (args.size() != 1) return fmt::format("{}", fmt::join(args, ", "));
    std::error_code ec;
    const size_t eq = args[0].find('=');
    return eq == std::string::npos || fs::exists(args[0], ec) ? args[0] : args[0].substr(eq + 1);
  };
  CnnRunOpts c;
  c.model = o.model;
  c.inputs = o.inputs;
  c.calibrates = o.calibrates;
  c.input = report_name(o.inputs);
  c.calibrate = o.calibrates.empty() ? std::string() : report_name(o.calibrates);
  c.output = o.output;
  c.labels = o.labels;
  c.backend = o.backend;
  c.array_n = o.array_n;
  c.batch = o.batch;
  c.json = o.json;
  c.quiet = o.quiet;
  c.check = o.check;
  c.table = o.table;
  c.multi = multi_selected(o.multi);
  c.devices = o.multi.devices;
  c.trace = o.trace;
  c.inject_fault = o.inject_fault;
  c.mpi_timeout = o.mpi_timeout;  // under mpirun: images split over the ranks (cnn_report.h CnnRanks)
  c.inject_rank_fail = o.inject_rank_fail;
  c.outputs = o.outputs;
  return o.precision == "bf16" ? run_cnn_bf16_model(c) : run_cnn_model(c);
}

int run_command(const RunOpts& opts, OutputSet& outs) {
  // Every output path first: nothing runs when one cannot be written (exit 2); the per-output files
  // out.NAME.npy of a model with several outputs are checked once the model says their names.
  check_output("--output", opts.output);
  check_output("--trace", opts.trace);
  check_distinct_outputs({{"--output", opts.output}, {"--trace", opts.trace}});
  // The files as reports name them: FILE, or NAME=FILE joined by ", " for several inputs.
  RunOpts o = opts;
  o.outputs = &outs;
  o.table = energy_table(o.energy_table);
  o.input = fmt::format("{}", fmt::join(o.inputs, ", "));
  o.calibrate = fmt::format("{}", fmt::join(o.calibrates, ", "));
  const bool bf16 = o.precision == "bf16";
  if (bf16 && !o.calibrate.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "--calibrate sets int8 activation scales; --precision bf16 needs no calibration");
  }
  const bool cnn = is_cnn_model(o.model);
  if (bf16 && multi_selected(o.multi) && !cnn) {
    throw Error(ErrorKind::kInvalidArgument,
                "--precision bf16 runs a dense-layer model on one device (no --devices/--strategy; a CNN runs on "
                "several)");
  }
  if (!(o.mpi_timeout > 0) || !std::isfinite(o.mpi_timeout)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--mpi-timeout {}: must be finite and > 0", o.mpi_timeout));
  }
  std::unique_ptr<Trace> trace_owner = o.trace.empty() ? nullptr : std::make_unique<Trace>();
  Trace* trace = trace_owner.get();
  // ---- inputs (everything checked before the device is opened) --------------------------------
  if (cnn) return run_cnn_branch(o);
  if (!o.inject_fault.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--inject-fault: for a CNN on several devices only");
  }
  auto import_span = Trace::scope(trace, main_track(trace), "import model and inputs");
  const nn::FloatNetwork net = nn::import_onnx(o.model);
  if (net.layers.empty()) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: the model has no dense layer to run on the device", o.model));
  }
  const Rows in = load_inputs(o.inputs, net, "--input");
  if (net.fixed_batch != 0 && in.rows != net.fixed_batch) {
    // The model is only defined for that many rows: another number would be reinterpreted.
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} needs exactly {} input rows (dimension 0 of the shape is fixed); --input {} has "
                            "{} (export with x.view(x.size(0), -1) to accept any batch)",
                            o.model, net.fixed_batch_by, net.fixed_batch, o.input, in.rows));
  }
  const uint32_t classes = net.output_features();
  std::vector<int64_t> labels;
  if (!o.labels.empty()) labels = load_class_labels(o.labels, in.rows, output_cols(net, 0));
  Rows calib;
  if (!o.calibrates.empty()) calib = load_inputs(o.calibrates, net, "--calibrate");
  const Rows& cal = o.calibrate.empty() ? in : calib;
  // Several outputs go to out.NAME.npy each: two names that map to one file cannot both be written.
  for (size_t i = 0; !o.output.empty() && i < net.outputs.size(); ++i) {
    check_output(fmt::format("--output {} (output '{}')", o.output, net.outputs[i].name), output_file(o, net, i));
    for (size_t k = 0; k < i; ++k) {
      if (output_file(o, net, i) == output_file(o, net, k) || output_file(o, net, i) == o.trace) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--output {}: graph outputs '{}' and '{}' would both be written to {}", o.output,
                                net.outputs[k].name, net.outputs[i].name, output_file(o, net, i)));
      }
    }
  }
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--array-n {}: no such configuration (built: {})", o.array_n,
                                                         fmt::join(backend_array_sizes(o.backend), ", ")));
  }
  import_span.end();
  if (bf16) runtime::check_bf16_network(net, in.x, o.input);  // what int8's quantizer refuses, bf16 refuses
  if (bf16) return launched_by_mpirun() ? run_ranks(o, net, nullptr, {}, in, labels, cal, trace)
                                        : run_bf16(o, net, in, labels, *params, trace);
  auto quantize_span = Trace::scope(trace, main_track(trace), "quantize");
  const nn::QNetwork q = nn::quantize(net, cal.x, cal.rows);
  const std::vector<int8_t> x_q = nn::quantize_input(q, in.x);
  quantize_span.end();
  if (launched_by_mpirun()) return run_ranks(o, net, &q, x_q, in, labels, cal, trace);
  if (multi_selected(o.multi)) return run_multi(o, net, q, x_q, in, labels, cal, trace);
  SingleRun s;
  s.chunk = o.batch == 0 ? in.rows : std::min<uint64_t>(o.batch, in.rows);
  s.chunks = (in.rows + s.chunk - 1) / s.chunk;

  // Host memory for the largest batch's images (the plan says how big they are).
  const runtime::NetworkPlan plan = runtime::plan_network(*params, q, s.chunk);
  BackendConfig bc;
  bc.array_n = o.array_n;
  bc.memory.size = memory_for(plan.input_bytes + plan.weight_bytes + plan.param_bytes + plan.spill_bytes +
                                  plan.output_bytes + 5 * 4096,
                              s.chunk);
  auto open_span = Trace::scope(trace, main_track(trace), "open device");
  Device dev = Device::open(o.backend, bc);
  open_span.end();
  // The device's own ARRAY_N (a serial board answers with its real size), not the flag's; a
  // --array-n that differs is refused.
  const unsigned array_n = device_array_n(dev, o.array_n, o.array_n_opt != nullptr && o.array_n_opt->count() > 0);

  // ---- run ------------------------------------------------------------------------------------
  std::vector<std::string> names;
  std::vector<bool> relu, wide;
  for (const nn::QLayer& l : q.layers) {
    names.push_back(l.name);
    relu.push_back(l.relu);
    wide.push_back(l.int32_output);
  }
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  std::vector<int32_t> raw;
  raw.reserve(in.rows * classes);
  for (uint64_t c = 0; c < s.chunks; ++c) {
    const uint64_t r0 = c * s.chunk, rows = std::min(s.chunk, in.rows - r0);
    runtime::NetworkOptions nopt;
    nopt.progress = progress_fn(o, s, c, t0, progress_shown);
    nopt.trace = trace_hook(trace, dev);
    auto batch_span = Trace::scope(trace, main_track(trace), fmt::format("batch {} ({} rows)", c, rows));
    const std::span<const int8_t> xs(x_q.data() + r0 * q.input_features, rows * q.input_features);
    const runtime::NetworkRunResult r = runtime::run_network(dev, q, xs, rows, nopt);
    if (r.output_i32.size() != rows * classes) {
      throw Error(ErrorKind::kInternal, fmt::format("network run returned {} outputs, expected {}",
                                                    r.output_i32.size(), rows * classes));
    }
    raw.insert(raw.end(), r.output_i32.begin(), r.output_i32.end());
    if (s.traffic_note.empty()) s.traffic_note = r.plan.traffic_note;
    s.add(r.layers, names, relu, wide);
    s.perf += r.perf;
    s.rd_bytes += r.rd_bytes;
    s.wr_bytes += r.wr_bytes;
    s.min_bytes += r.min_bytes;
    s.macs += r.macs;
    s.instructions += r.instructions;
    s.sim_cycles += r.sim_cycles;
    s.wall += r.wall_s;
  }
  if (progress_shown) fmt::print(stderr, "\n");

  auto out_span = Trace::scope(trace, main_track(trace), "outputs (check, accuracy, write)");
  const RunOutputs res = finish_outputs(o, net, q, x_q, in, raw, labels);
  out_span.end();
  if (trace != nullptr) stage_trace(*o.outputs, o.trace, trace->to_json());
  return report_single(o, net, &q, in, cal, s, array_n, res, labels.size());
}

}  // namespace

RunCommand::RunCommand(CLI::App& app) : opts_(std::make_shared<RunOpts>()) {
  RunOpts* o = opts_.get();
  auto* sub = app.add_subcommand(
      "run", "run an ONNX model (dense layers, ReLU, ...; Softmax, LogSoftmax, LayerNormalization on the host) on the "
      "device in int8 or bf16; float32 in and out");
  sub_ = sub;
  sub->add_option("MODEL", o->model, "ONNX model (.onnx)")->required();
  sub->add_option("-i,--input", o->inputs,
                  "input rows as .npy: float32, uint8 or int8, [rows, features] or the model input's shape; a model "
                  "with several graph inputs takes one --input NAME=FILE.npy per input (NAME: the graph input's name; "
                  "every input has the same rows, sharded alike over devices and ranks)")
      ->required()
      ->allow_extra_args(false);
  sub->add_option("-o,--output", o->output,
                  "write the model's output as .npy, float32 [rows, features]; a model with several outputs writes "
                  "one file per output, out.npy -> out.NAME.npy (NAME: the graph output's name)");
  sub->add_option("--labels", o->labels,
                  "class labels as .npy [rows] (uint8/int8/int32/int64): print the accuracy of the device (int8 or "
                  "bf16) and of the float model");
  sub->add_option("--calibrate", o->calibrates,
                  "rows that set the int8 activation scales (.npy like --input; several graph inputs: one --calibrate "
                  "NAME=FILE.npy per input, each input's scale calibrated on its own rows); default: the input itself")
      ->allow_extra_args(false);
  sub->add_option("--batch", o->batch,
                  "rows per device run (0: all rows in one run; with --devices/--strategy: the micro-batch, 0 = "
                  "automatic)")
      ->check(unsigned_check())
      ->capture_default_str();
  sub->add_option("--precision", o->precision,
                  "int8 (quantized with calibrated scales, int32 accumulation) or bf16 (no calibration: bf16 inputs, "
                  "weights and activations, fp32 accumulation and outputs; docs/network_compiler.md)")
      ->check(CLI::IsMember({"int8", "bf16"}))
      ->capture_default_str();
  add_backend_option(sub, o->backend);
  o->array_n_opt = sub->add_option("--array-n", o->array_n, "MXU size N of the device configuration (N x N array)")
                       ->check(unsigned_check())
                       ->capture_default_str();
  add_multi_options(sub, o->multi, {"data", "pipeline"},
                    "how the rows use several devices: data (micro-batches spread over the devices, weights "
                    "mirrored) or pipeline (layers split into stages, one device each; not for CNNs); default "
                    "data");
  sub->add_flag("--check", o->check,
                "compare the device's output with the CPU model bit for bit (int8: the int32 output against the "
                "integer model; bf16: the fp32 output against the bf16 contract); exit 3 on a difference");
  sub->add_option("--trace", o->trace,
                  "write a timeline as Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing): host "
                  "compile/upload/submit/wait and the device's programs in device cycles; with --devices a track per "
                  "device, under mpirun every rank's tracks in one file written by rank 0 (docs/tracing.md)");
  sub->add_flag("--json", o->json, "print one JSON object instead of the human-readable report");
  add_energy_option(sub, o->energy_table);
  sub->add_flag("-q,--quiet", o->quiet, "no progress on stderr");
  sub->add_option("--mpi-timeout", o->mpi_timeout,
                  "under mpirun: seconds a rank waits for the others (rows split over the ranks, gathered on rank "
                  "0) before it ends the job")
      ->capture_default_str();
  sub->add_option("--inject-rank-failure", o->inject_rank_fail,
                  "tests: under mpirun, rank R fails (R) or exits without a word (R:exit)")
      ->group("");
  sub->add_option("--inject-fault", o->inject_fault,
                  "tests: a CNN on several devices: the device that runs micro-batch J faults before it (once)")
      ->group("");
}

bool RunCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int RunCommand::execute() const {
  int rc = kOther;
  try {
    OutputSet outs;  // every output of the run: committed only when it succeeded
    rc = run_command(*opts_, outs);
    if (rc == kOk) outs.commit();
  } catch (const Error& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    rc = exit_code(e.kind());
  } catch (const std::exception& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    rc = kOther;
  }
  return rc;
}

}  // namespace tpuw::cli
