// tpuw run MODEL.onnx --input X.npy [--output Y.npy] [--labels L.npy] [--calibrate C.npy] ...
//
//   1. import the ONNX model (tpuw/nn/onnx_import.h) and read the tensors; nothing is written
//      unless every step succeeds (exit 2 for bad input, before the device is opened)
//   2. quantize it to int8 (tpuw/nn/quantize.h) with the calibration rows (default: the input)
//   3. compile and run it on the device in batches of --batch rows (tpuw/runtime/network.h)
//   4. dequantize on the host, apply the host operator, write Y.npy (float32 [batch, outputs])
//   5. report per layer: shape, cycles, utilization, bytes moved vs minimum, and where the cycles
//      went (PERF counters: MXU active, weight stall, weight shift, DMA wait, activation busy);
//      with --labels, the accuracy of the device (int8) and of the float model.
//   With --devices K / --strategy data|pipeline the rows run on K devices (tpuw/worker/strategies.h,
//   --batch is then the micro-batch) and the report gives each device's share, busy time and the
//   overlap instead of the per-layer table.
#include "cmd_run.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/worker/strategies.h"
#include "cli_common.h"

namespace tpuw::cli {

struct RunOpts {
  std::string model, input, output, labels, calibrate;
  std::string backend = "rtl";
  unsigned array_n = 16;
  uint64_t batch = 0;  // 0: the whole input in one run (several devices: automatic micro-batch)
  bool json = false;
  bool quiet = false;
  bool check = false;
  MultiOpts multi;
};

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// A float tensor [rows, features] read from .npy (float32, uint8 or int8).
struct Rows {
  std::vector<float> x;
  uint64_t rows = 0;
};

std::string model_shape_string(const std::vector<int64_t>& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size(); ++i) parts.push_back(s[i] < 0 ? (i == 0 ? "batch" : "?") : std::to_string(s[i]));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

Rows load_rows(const std::string& path, const nn::FloatNetwork& net, const char* what) {
  const npy::Array a = npy::load(path);
  Rows r;
  const uint64_t f = net.input_features;
  const std::string want = fmt::format("[rows, {}] or the model input's shape {}", f, model_shape_string(net.input_shape));
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
    if (ok && a.rank() == net.input_shape.size()) {
      for (size_t i = 1; i < a.rank(); ++i) {
        ok = ok && (net.input_shape[i] < 0 || static_cast<uint64_t>(net.input_shape[i]) == a.shape[i]);
      }
    }
    if (!ok) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), what, want));
    }
    r.rows = a.shape[0];
  }
  if (r.rows == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {} has no rows", path, npy::shape_string(a.shape)));
  r.x.resize(a.elements());
  switch (a.dtype) {
    case npy::DType::kFloat32: {
      const auto v = a.view<float>();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) {
          throw Error(ErrorKind::kBadFile, fmt::format("{}: element {} is {} (inputs must be finite)", path, i, v[i]));
        }
        r.x[i] = v[i];
      }
      break;
    }
    case npy::DType::kUint8: {
      const auto v = a.view<uint8_t>();
      for (size_t i = 0; i < v.size(); ++i) r.x[i] = v[i];
      break;
    }
    case npy::DType::kInt8: {
      const auto v = a.view<int8_t>();
      for (size_t i = 0; i < v.size(); ++i) r.x[i] = v[i];
      break;
    }
    default:
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{}: dtype is {}, expected float32, uint8 or int8", path, npy::to_string(a.dtype)));
  }
  return r;
}

std::vector<int64_t> load_labels(const std::string& path, uint64_t rows, uint32_t classes) {
  const npy::Array a = npy::load(path);
  if (!(a.rank() == 1 || (a.rank() == 2 && a.shape[1] == 1)) || a.shape[0] != rows) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {}, expected ({},) labels for the {} input rows", path,
                                                 npy::shape_string(a.shape), rows, rows));
  }
  std::vector<int64_t> y(rows);
  for (uint64_t i = 0; i < rows; ++i) {
    switch (a.dtype) {
      case npy::DType::kUint8: y[i] = a.view<uint8_t>()[i]; break;
      case npy::DType::kInt8: y[i] = a.view<int8_t>()[i]; break;
      case npy::DType::kInt32: y[i] = a.view<int32_t>()[i]; break;
      default:
        throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}, expected integer class labels (uint8, int8 or "
                                                     "int32)", path, npy::to_string(a.dtype)));
    }
    if (y[i] < 0 || y[i] >= classes) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{}: label {} of row {} is not a class of the model's {} outputs", path, y[i], i, classes));
    }
  }
  return y;
}

double accuracy(std::span<const float> y, uint32_t classes, const std::vector<int64_t>& labels) {
  const auto pred = nn::argmax_rows(y, classes);
  uint64_t ok = 0;
  for (size_t i = 0; i < labels.size(); ++i) ok += pred[i] == labels[i];
  return labels.empty() ? 0.0 : static_cast<double>(ok) / static_cast<double>(labels.size());
}

// Per-layer figures summed over the batches.
struct LayerTotals {
  std::string name;
  uint64_t m = 0, k = 0, n = 0;
  bool relu = false, int32_output = false;
  uint64_t cycles = 0, rd_bytes = 0, wr_bytes = 0, min_bytes = 0;
  uint64_t mxu_active = 0, weight_stall = 0, weight_shift = 0, dma_wait = 0, act_busy = 0;
  uint64_t instructions = 0;
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

// What the one- and several-device paths do with the device's int32 output: dequantize it, --check
// it against the CPU integer model, score --labels (int8 on the device and the float model), and
// write --output.
struct RunOutputs {
  json check_json = nullptr;
  double acc_int8 = 0, acc_float = 0;
};

RunOutputs finish_outputs(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork& q,
                          const std::vector<int8_t>& x_q, const Rows& in, const std::vector<int32_t>& raw,
                          const std::vector<int64_t>& labels) {
  const uint32_t classes = net.output_features();
  const std::vector<float> y = nn::dequantize_output(q, raw, in.rows);
  RunOutputs r;
  if (o.check) {
    check_raw(o, q, x_q, in.rows, raw, classes);
    r.check_json = json{{"cpu", "equal"}};
  }
  if (!labels.empty()) {
    r.acc_int8 = accuracy(y, classes, labels);
    r.acc_float = accuracy(nn::forward_float(net, in.x, in.rows), classes, labels);
  }
  if (!o.output.empty()) npy::save(o.output, npy::Array::from<float>({in.rows, classes}, y));
  return r;
}

// --devices K / --strategy: the rows on K devices through a Worker (tpuw/worker/strategies.h).
// The model lines both the one-device and the several-device reports start with.
void print_model_header(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork& q, const Rows& cal) {
  const uint32_t classes = net.output_features();
  fmt::print("{}: input '{}' {} -> {} dense layer{}{} -> '{}' [batch, {}]\n", o.model, net.input_name,
             model_shape_string(net.input_shape), q.layers.size(), q.layers.size() == 1 ? "" : "s",
             q.host_op == nn::HostOp::kSoftmax ? " -> softmax (host)" : "", net.output_name, classes);
  fmt::print("int8: input scale {:.6g}, activation scales calibrated on {} ({} rows)\n", q.input_scale,
             o.calibrate.empty() ? o.input + " (the input itself; use --calibrate)" : o.calibrate, cal.rows);
}

// The model and input keys both JSON reports start with.
json model_json(const RunOpts& o, const nn::QNetwork& q, uint32_t classes, const Rows& in, uint64_t batch,
                uint64_t batches, const Rows& cal) {
  json j;
  j["model"] = o.model;
  j["input"] = o.input;
  j["tpuw_version"] = version_string();
  j["backend"] = o.backend;
  j["array_n"] = o.array_n;
  j["rows"] = in.rows;
  j["batch"] = batch;
  j["batches"] = batches;
  j["input_features"] = q.input_features;
  j["output_features"] = classes;
  j["host_op"] = q.host_op == nn::HostOp::kSoftmax ? "softmax" : "none";
  j["input_scale"] = q.input_scale;
  j["calibration"] = o.calibrate.empty() ? o.input : o.calibrate;
  j["calibration_rows"] = cal.rows;
  return j;
}

// The accuracy, check and output keys both JSON reports end with.
void add_result_json(json& j, const RunOpts& o, size_t label_rows, double acc_int8, double acc_float,
                     const json& check_json) {
  if (label_rows > 0) {
    j["accuracy"] = {{"labels", o.labels}, {"rows", label_rows}, {"int8", acc_int8}, {"float", acc_float}};
  } else {
    j["accuracy"] = nullptr;
  }
  j["check"] = check_json;
  j["output"] = o.output.empty() ? json(nullptr) : json(o.output);
}

// The accuracy, check and output lines both human reports end with.
void print_result_tail(const RunOpts& o, size_t label_rows, double acc_int8, double acc_float, uint64_t rows,
                       uint32_t classes) {
  if (label_rows > 0) {
    fmt::print("accuracy on {} ({} rows): int8 on {} {:.2f}%, float model {:.2f}% ({:+.2f} points)\n", o.labels,
               label_rows, o.backend, 100.0 * acc_int8, 100.0 * acc_float, 100.0 * (acc_int8 - acc_float));
  }
  if (o.check) fmt::print("check: device output equals the CPU integer model bit for bit\n");
  if (!o.output.empty()) fmt::print("output -> {} (float32, ({}, {}))\n", o.output, rows, classes);
}

int run_multi(const RunOpts& o, const nn::FloatNetwork& net, const nn::QNetwork& q, const std::vector<int8_t>& x_q,
              const Rows& in, const std::vector<int64_t>& labels, const Rows& cal) {
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
  worker::Worker w(wo);
  worker::NetworkStrategyOptions so;
  so.strategy = strategy;
  so.micro_batch = o.batch;
  const worker::NetworkStrategyResult r = worker::run_network_parallel(w, q, x_q, in.rows, so);
  const std::vector<int32_t>& raw = r.output_i32;
  if (raw.size() != in.rows * classes) {
    throw Error(ErrorKind::kInternal, fmt::format("network run returned {} outputs, expected {}", raw.size(), in.rows * classes));
  }
  const auto [check_json, acc_int8, acc_float] = finish_outputs(o, net, q, x_q, in, raw, labels);

  const worker::StrategyReport& rep = r.report;
  uint64_t cycles = 0;
  for (const worker::DeviceUse& d : rep.per_device) cycles += d.perf.cycles;
  const double rows_per_s = rep.wall_s > 0 ? static_cast<double>(in.rows) / rep.wall_s : 0.0;
  if (o.json) {
    json j = model_json(o, q, classes, in, rep.micro_batch, rep.micro_batches, cal);
    j["cycles"] = cycles;
    j["macs"] = r.macs;
    j["rows_per_s"] = rows_per_s;
    const json report = strategy_report_json(rep, o.array_n);
    for (auto it = report.begin(); it != report.end(); ++it) j[it.key()] = it.value();
    add_result_json(j, o, labels.size(), acc_int8, acc_float, check_json);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_model_header(o, net, q, cal);
  fmt::print("{} rows on {} (N={}) x {} device{}, strategy {}: {} micro-batch{} of {} rows, wall {:.3f} s, {:.0f} "
             "rows/s, overlap {:.2f} (sum of busy time / (devices x wall))\n",
             in.rows, o.backend, o.array_n, rep.devices, rep.devices == 1 ? "" : "s", rep.strategy, rep.micro_batches,
             rep.micro_batches == 1 ? "" : "es", rep.micro_batch, rep.wall_s, rows_per_s, rep.overlap);
  if (strategy == worker::Strategy::kPipeline && o.multi.devices > rep.devices) {
    fmt::print("  ({} of the {} devices used: one pipeline stage per layer at most)\n", rep.devices, o.multi.devices);
  }
  print_strategy_report(rep, o.array_n);
  print_result_tail(o, labels.size(), acc_int8, acc_float, in.rows, classes);
  return kOk;
}

int run_command(const RunOpts& o) {
  // ---- inputs (everything checked before the device is opened) --------------------------------
  const nn::FloatNetwork net = nn::import_onnx(o.model);
  if (net.layers.empty()) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: the model has no dense layer to run on the device", o.model));
  }
  const Rows in = load_rows(o.input, net, "--input");
  const uint32_t classes = net.output_features();
  std::vector<int64_t> labels;
  if (!o.labels.empty()) labels = load_labels(o.labels, in.rows, classes);
  Rows calib;
  if (!o.calibrate.empty()) calib = load_rows(o.calibrate, net, "--calibrate");
  const Rows& cal = o.calibrate.empty() ? in : calib;
  if (!o.output.empty()) {
    const fs::path parent = fs::path(o.output).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--output {}: directory {} does not exist", o.output, parent.string()));
    }
    if (fs::is_directory(o.output, ec)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--output {}: is a directory", o.output));
    }
  }
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--array-n {}: no such configuration (built: {})", o.array_n,
                                                         fmt::join(backend_array_sizes(o.backend), ", ")));
  }
  const nn::QNetwork q = nn::quantize(net, cal.x, cal.rows);
  const std::vector<int8_t> x_q = nn::quantize_input(q, in.x);
  if (multi_selected(o.multi)) return run_multi(o, net, q, x_q, in, labels, cal);
  const uint64_t chunk = o.batch == 0 ? in.rows : std::min<uint64_t>(o.batch, in.rows);
  const uint64_t chunks = (in.rows + chunk - 1) / chunk;

  // Host memory for the largest batch's images (the plan says how big they are).
  const runtime::NetworkPlan plan = runtime::plan_network(*params, q, chunk);
  const uint64_t need = plan.input_bytes + plan.weight_bytes + plan.param_bytes + plan.spill_bytes +
                        plan.output_bytes + 5 * 4096 + (8ull << 20);
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a batch of {} rows needs {} MiB of host memory; use a smaller --batch", chunk, need >> 20));
  }
  BackendConfig bc;
  bc.array_n = o.array_n;
  bc.memory.size = mem;
  Device dev = Device::open(o.backend, bc);
  // The device's own ARRAY_N (a serial board answers with its real size), not the flag's.
  const unsigned array_n = dev.info().params.array_n;

  // ---- run ------------------------------------------------------------------------------------
  const bool show_progress = !o.quiet && !o.json && isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  std::vector<int32_t> raw;
  raw.reserve(in.rows * classes);
  std::vector<LayerTotals> layers(q.layers.size());
  PerfCounters perf;
  uint64_t rd_bytes = 0, wr_bytes = 0, min_bytes = 0, macs = 0, instructions = 0, sim_cycles = 0;
  double wall = 0;
  std::string traffic_note;  // the planner's one-line reason when bytes exceed 1.5x the minimum
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t r0 = c * chunk, rows = std::min(chunk, in.rows - r0);
    runtime::NetworkOptions nopt;
    if (show_progress) {
      nopt.progress = [&](double f) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (el < 2.0) return;
        progress_shown = true;
        fmt::print(stderr, "\rtpuw run: {:3.0f}% ({:.0f} s)", 100.0 * (static_cast<double>(c) + f) / static_cast<double>(chunks), el);
      };
    }
    const std::span<const int8_t> xs(x_q.data() + r0 * q.input_features, rows * q.input_features);
    const runtime::NetworkRunResult r = runtime::run_network(dev, q, xs, rows, nopt);
    if (r.output_i32.size() != rows * classes) {
      throw Error(ErrorKind::kInternal, fmt::format("network run returned {} outputs, expected {}",
                                                    r.output_i32.size(), rows * classes));
    }
    raw.insert(raw.end(), r.output_i32.begin(), r.output_i32.end());
    if (traffic_note.empty()) traffic_note = r.plan.traffic_note;
    for (size_t i = 0; i < r.layers.size() && i < layers.size(); ++i) {
      const runtime::LayerReport& lr = r.layers[i];
      LayerTotals& t = layers[i];
      t.name = lr.name.empty() ? q.layers[i].name : lr.name;
      t.m += lr.m;
      t.k = lr.k;
      t.n = lr.n;
      t.relu = q.layers[i].relu;
      t.int32_output = q.layers[i].int32_output;
      t.cycles += lr.cycles;
      t.rd_bytes += lr.rd_bytes;
      t.wr_bytes += lr.wr_bytes;
      t.min_bytes += lr.min_bytes;
      t.mxu_active += lr.mxu_active;
      t.weight_stall += lr.weight_stall;
      t.weight_shift += lr.weight_shift;
      t.dma_wait += lr.dma_wait;
      t.act_busy += lr.act_busy;
      t.instructions += lr.program.instructions;
    }
    perf += r.perf;
    rd_bytes += r.rd_bytes;
    wr_bytes += r.wr_bytes;
    min_bytes += r.min_bytes;
    macs += r.macs;
    instructions += r.instructions;
    sim_cycles += r.sim_cycles;
    wall += r.wall_s;
  }
  if (progress_shown) fmt::print(stderr, "\n");

  const auto [check_json, acc_int8, acc_float] = finish_outputs(o, net, q, x_q, in, raw, labels);

  // ---- report ---------------------------------------------------------------------------------
  const double utilization = util(macs, array_n, perf.cycles);
  const double sim_hz = wall > 0 ? static_cast<double>(sim_cycles) / wall : 0.0;
  if (o.json) {
    json j = model_json(o, q, classes, in, chunk, chunks, cal);
    json jl = json::array();
    for (size_t i = 0; i < layers.size(); ++i) {
      const LayerTotals& t = layers[i];
      jl.push_back({{"name", t.name}, {"m", t.m}, {"k", t.k}, {"n", t.n}, {"relu", t.relu},
                    {"int32_output", t.int32_output}, {"cycles", t.cycles},
                    {"utilization", util(t.m * t.k * t.n, array_n, t.cycles)}, {"rd_bytes", t.rd_bytes},
                    {"wr_bytes", t.wr_bytes}, {"min_bytes", t.min_bytes}, {"mxu_active", t.mxu_active},
                    {"weight_stall", t.weight_stall}, {"weight_shift", t.weight_shift}, {"dma_wait", t.dma_wait},
                    {"act_busy", t.act_busy}, {"instructions", t.instructions}});
    }
    j["layers"] = jl;
    j["cycles"] = perf.cycles;
    j["utilization"] = utilization;
    j["macs"] = macs;
    j["rd_bytes"] = rd_bytes;
    j["wr_bytes"] = wr_bytes;
    j["min_bytes"] = min_bytes;
    if (!traffic_note.empty()) j["traffic_note"] = traffic_note;
    j["instructions"] = instructions;
    j["wall_s"] = wall;
    j["sim_hz"] = sim_hz;
    j["perf"] = perf_json(perf);
    add_result_json(j, o, labels.size(), acc_int8, acc_float, check_json);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_model_header(o, net, q, cal);
  fmt::print("{} rows on {} (N={}) in {} batch{} of {}: {} cycles, utilization {:.3f}, wall {:.3f} s, {:.2f} M "
             "simulated cycles/s\n",
             in.rows, o.backend, array_n, chunks, chunks == 1 ? "" : "es", chunk, perf.cycles, utilization, wall,
             sim_hz / 1e6);
  fmt::print("  {:<3} {:<40} {:>16} {:>10} {:>6} {:>10} {:>10} {:>10}  {}\n", "#", "layer", "m x k x n", "cycles",
             "util", "rd bytes", "wr bytes", "min bytes", "cycles went to: mxu / w-stall / w-shift / dma-wait / act");
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerTotals& t = layers[i];
    std::string name = t.name + (t.int32_output ? " [int32 out]" : "");
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    fmt::print("  {:<3} {:<40} {:>16} {:>10} {:>6.3f} {:>10} {:>10} {:>10}  {} / {} / {} / {} / {}\n", i, name,
               fmt::format("{}x{}x{}", t.m, t.k, t.n), t.cycles, util(t.m * t.k * t.n, array_n, t.cycles),
               t.rd_bytes, t.wr_bytes, t.min_bytes, pct(t.mxu_active, t.cycles), pct(t.weight_stall, t.cycles),
               pct(t.weight_shift, t.cycles), pct(t.dma_wait, t.cycles), pct(t.act_busy, t.cycles));
  }
  fmt::print("  total: {} cycles; mxu_active {} weight_stall {} weight_shift {} dma_wait {} act_busy {} instret {}; "
             "bytes read {} written {} (minimum {})\n",
             perf.cycles, perf.mxu_active, perf.weight_stall, perf.weight_shift, perf.dma_wait, perf.act_busy,
             perf.instret, rd_bytes, wr_bytes, min_bytes);
  if (!traffic_note.empty()) fmt::print("  bytes above 1.5x the minimum: {}\n", traffic_note);
  print_result_tail(o, labels.size(), acc_int8, acc_float, in.rows, classes);
  return kOk;
}

}  // namespace

RunCommand::RunCommand(CLI::App& app) : opts_(std::make_shared<RunOpts>()) {
  RunOpts* o = opts_.get();
  auto* sub = app.add_subcommand(
      "run", "run an ONNX model (dense layers, ReLU, softmax) on the device in int8; float32 in and out");
  sub_ = sub;
  sub->add_option("MODEL", o->model, "ONNX model (.onnx)")->required();
  sub->add_option("-i,--input", o->input,
                  "input rows as .npy: float32, uint8 or int8, [rows, features] or the model input's shape")
      ->required();
  sub->add_option("-o,--output", o->output, "write the model's output as .npy, float32 [rows, outputs]");
  sub->add_option("--labels", o->labels,
                  "class labels as .npy [rows] (uint8/int8/int32): print the accuracy of the device (int8) and of "
                  "the float model");
  sub->add_option("--calibrate", o->calibrate,
                  "rows that set the int8 activation scales (.npy like --input); default: the input itself");
  sub->add_option("--batch", o->batch,
                  "rows per device run (0: all rows in one run; with --devices/--strategy: the micro-batch, 0 = "
                  "automatic)")
      ->check(unsigned_check())
      ->capture_default_str();
  add_backend_option(sub, o->backend);
  sub->add_option("--array-n", o->array_n, "MXU size N of the device configuration (N x N array)")
      ->check(unsigned_check())
      ->capture_default_str();
  add_multi_options(sub, o->multi, {"data", "pipeline"},
                    "how the rows use several devices: data (micro-batches spread over the devices, weights "
                    "mirrored) or pipeline (layers split into stages, one device each); default data");
  sub->add_flag("--check", o->check,
                "compare the device's int32 output with the CPU integer model bit for bit; exit 3 on a difference");
  sub->add_flag("--json", o->json, "print one JSON object instead of the human-readable report");
  sub->add_flag("-q,--quiet", o->quiet, "no progress on stderr");
}

bool RunCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int RunCommand::execute() const {
  int rc = kOther;
  try {
    rc = run_command(*opts_);
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
