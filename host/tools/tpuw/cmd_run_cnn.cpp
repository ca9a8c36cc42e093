// tpuw run MODEL.onnx for a CNN (cmd_run_cnn.h):
//
//   1. import the ONNX graph and the tensors: inputs as the model's input shape [rows, C, H, W] (or
//      flattened [rows, C*H*W]), float32, uint8 or int8; everything is checked before the device opens
//   2. compile_quantized_cnn: calibrated per-tensor activation scales (--calibrate, default the
//      input), per-channel int8 weights (tpuw/compiler/conv.h)
//   3. run_cnn in batches of --batch rows: one device program per convolution / pooling layer
//      (implicit GEMM over the unified buffer), one for the dense head (tpuw/runtime/conv.h)
//   4. dequantize the head's int32 output, apply the host operator, write --output (float32 [rows, classes]);
//      a model that ends in a feature map (no dense head) gives the map in the model's output
//      shape, e.g. [rows, C, H, W] (NCHW)
//   5. report per layer: shape, cycles, utilization, bytes moved vs the layer's minimum and where
//      the cycles went; --labels: accuracy of the device and of the float model (the graph
//      interpreted on the CPU in float); --check: the int32 output against the CPU integer model
//      bit for bit, and how far the device's output is from the float model.
#include "cmd_run_cnn.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::cli {

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;
using compiler::Graph;
using compiler::Op;

// The model's input: [batch, C, H, W] with C, H, W known.
struct InputShape {
  std::string name;
  uint64_t c = 0, h = 0, w = 0;
  uint64_t features() const { return c * h * w; }
};

InputShape input_shape(const Graph& g, const std::string& model) {
  if (g.inputs.size() != 1) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: a CNN needs one input, not {}", model, g.inputs.size()));
  }
  const compiler::GraphInput& gi = g.inputs[0];
  const compiler::Value& v = g.value(gi.value);
  const std::vector<int64_t>& d = gi.declared;
  if (!gi.has_shape || d.size() != 4 || d[1] <= 0 || d[2] <= 0 || d[3] <= 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: graph input '{}' has shape {}; a CNN's input is [batch, channels, height, width] with "
                            "known channels, height and width",
                            model, v.name, gi.has_shape ? compiler::dims_string(d) : std::string("unknown")));
  }
  InputShape s;
  s.name = v.name;
  s.c = static_cast<uint64_t>(d[1]);
  s.h = static_cast<uint64_t>(d[2]);
  s.w = static_cast<uint64_t>(d[3]);
  return s;
}

struct Images {
  std::vector<float> x;  // [rows][C*H*W] (NCHW per row)
  uint64_t rows = 0;
};

// [rows, C, H, W] or [rows, C*H*W] (a single image [C, H, W] is one row), float32, uint8 or int8.
Images load_images(const std::string& path, const InputShape& s, const char* what) {
  const npy::Array a = npy::load(path);
  const std::string want = fmt::format("[rows, {}, {}, {}] (the model input's shape) or [rows, {}]", s.c, s.h, s.w,
                                       s.features());
  auto bad = [&] {
    return Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), what, want));
  };
  Images r;
  if (a.rank() == 4) {
    if (a.shape[1] != s.c || a.shape[2] != s.h || a.shape[3] != s.w) throw bad();
    r.rows = a.shape[0];
  } else if (a.rank() == 3) {
    if (a.shape[0] != s.c || a.shape[1] != s.h || a.shape[2] != s.w) throw bad();
    r.rows = 1;
  } else if (a.rank() == 2) {
    if (a.shape[1] != s.features()) throw bad();
    r.rows = a.shape[0];
  } else {
    throw bad();
  }
  if (r.rows == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {} has no rows", path, npy::shape_string(a.shape)));
  r.x = input_values(a, path);
  return r;
}

// The float model: the optimized graph interpreted on the CPU (double accumulation), in chunks so
// the intermediate activations of a large input stay small.
std::vector<float> float_outputs(const Graph& og, const Images& in, uint64_t features, uint32_t classes) {
  constexpr uint64_t kChunk = 256;
  std::vector<float> y;
  y.reserve(in.rows * classes);
  for (uint64_t r0 = 0; r0 < in.rows; r0 += kChunk) {
    const uint64_t n = std::min(kChunk, in.rows - r0);
    const auto acts = compiler::interpret_float(og, std::span<const float>(in.x).subspan(r0 * features, n * features), n);
    const std::vector<float>& out = acts.at(static_cast<size_t>(og.outputs[0].value));
    y.insert(y.end(), out.begin(), out.end());
  }
  return y;
}

// One row of the per-layer report, summed over the batches.
struct LayerRow {
  std::string name, kind;  // kind: conv (convolutions and average pools), maxpool_host or dense
  std::string shape;       // conv: CxHxW -> OxHoxWo, kernel; dense: m x k x n
  uint64_t macs = 0;
  bool relu = false;
  uint64_t cycles = 0, rd_bytes = 0, wr_bytes = 0, min_bytes = 0;
  uint64_t mxu_active = 0, weight_stall = 0, weight_shift = 0, dma_wait = 0, act_busy = 0, instructions = 0;
};

double util(uint64_t macs, unsigned n, uint64_t cycles) {
  return cycles == 0 ? 0.0 : static_cast<double>(macs) / (static_cast<double>(n) * n * static_cast<double>(cycles));
}

std::string pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

double ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

// Host memory for one batch of `rows` images: every layer's buffers (run_cnn allocates a layer's
// buffers and frees them when the layer is done; the sum is a safe bound), the ring and slack.
uint64_t cnn_memory_bytes(const DeviceParams& params, const nn::QCnn& q, uint64_t rows) {
  uint64_t need = 0;
  for (const nn::QConv2d& l : q.convs) {
    if (l.max_pool) continue;  // on the host
    const runtime::ConvPlan p = runtime::plan_conv(params, l.geom, rows);
    need += p.in_bytes() + p.w_bytes() + p.param_bytes() + p.out_bytes() + 4 * 4096;
  }
  if (q.has_head()) {
    const runtime::NetworkPlan hp = runtime::plan_network(params, q.head, rows);
    need += hp.input_bytes + hp.weight_bytes + hp.param_bytes + hp.spill_bytes + hp.output_bytes + 5 * 4096;
  }
  need += 8ull << 20;
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a batch of {} images needs {} MiB of host memory; use a smaller --batch", rows, need >> 20));
  }
  return mem;
}

}  // namespace

std::string cnn_node_label(const std::string& path) {
  Graph g;
  try {
    g = compiler::import_onnx_file(path);
  } catch (const Error&) {
    return {};  // the dense-layer path reports the file's problem in its usual words
  }
  for (const compiler::Node& n : g.nodes) {
    if (n.op == Op::kConv || n.op == Op::kAveragePool || n.op == Op::kGlobalAveragePool || n.op == Op::kMaxPool ||
        n.op == Op::kPad || n.op_type == "GlobalMaxPool") {
      return fmt::format("node '{}' ({})", n.name, n.op_type);
    }
  }
  return {};
}

bool is_cnn_model(const std::string& path) { return !cnn_node_label(path).empty(); }

int run_cnn_model(const CnnRunOpts& o) {
  // ---- inputs (everything checked before the device is opened) ----------------------------------
  const Graph g = compiler::import_onnx_file(o.model);
  const InputShape shape = input_shape(g, o.model);
  const Images in = load_images(o.input, shape, "--input");
  Images calib;
  if (!o.calibrate.empty()) calib = load_images(o.calibrate, shape, "--calibrate");
  const Images& cal = o.calibrate.empty() ? in : calib;
  if (!o.output.empty()) {
    const fs::path parent = fs::path(o.output).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--output {}: directory {} does not exist", o.output, parent.string()));
    }
    if (fs::is_directory(o.output, ec)) throw Error(ErrorKind::kInvalidArgument, fmt::format("--output {}: is a directory", o.output));
  }
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--array-n {}: no such configuration", o.array_n));
  }
  const nn::QCnn q = compiler::compile_quantized_cnn(g, cal.x, cal.rows);
  const auto classes = static_cast<uint32_t>(q.output_features());
  // The output's shape per row: the model's (a feature map keeps [C, H, W]; a head gives [classes]).
  const Graph og = compiler::optimize(g);
  std::vector<uint64_t> out_shape = {in.rows};
  if (q.has_head()) {
    out_shape.push_back(classes);
  } else {
    const compiler::Dims& od = *og.value(og.outputs[0].value).shape;
    for (size_t i = 1; i < od.size(); ++i) out_shape.push_back(static_cast<uint64_t>(od[i]));
  }
  std::vector<int64_t> labels;
  if (!o.labels.empty()) {
    if (!q.has_head()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--labels {}: the model's output '{}' is a feature map, not class scores", o.labels,
                              g.outputs[0].name));
    }
    labels = load_class_labels(o.labels, in.rows, classes);
  }
  const uint64_t features = shape.features();
  std::vector<int8_t> x_q(in.x.size());
  for (size_t i = 0; i < x_q.size(); ++i) x_q[i] = nn::quantize_value(in.x[i], q.input_scale);

  const uint64_t chunk = o.batch == 0 ? in.rows : std::min<uint64_t>(o.batch, in.rows);
  const uint64_t chunks = (in.rows + chunk - 1) / chunk;
  BackendConfig bc;
  bc.array_n = o.array_n;
  bc.memory.size = cnn_memory_bytes(*params, q, chunk);
  Device dev = Device::open(o.backend, bc);
  const unsigned array_n = dev.info().params.array_n;

  // ---- run --------------------------------------------------------------------------------------
  std::vector<LayerRow> rows(q.convs.size() + q.head.layers.size());
  PerfCounters perf;
  uint64_t macs = 0, min_bytes = 0, instructions = 0;
  double wall = 0;
  std::vector<int32_t> raw;
  raw.reserve(in.rows * classes);
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t r0 = c * chunk, n = std::min(chunk, in.rows - r0);
    const auto t0 = std::chrono::steady_clock::now();
    const runtime::CnnRunResult r =
        runtime::run_cnn(dev, q, std::span<const int8_t>(x_q).subspan(r0 * features, n * features), n);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.output_i32.size() != n * classes) {
      throw Error(ErrorKind::kInternal,
                  fmt::format("CNN run returned {} outputs, expected {}", r.output_i32.size(), n * classes));
    }
    raw.insert(raw.end(), r.output_i32.begin(), r.output_i32.end());
    for (size_t i = 0; i < r.convs.size(); ++i) {
      const runtime::ConvRunResult& cr = r.convs[i];
      const nn::QConv2d& l = q.convs[i];
      const nn::ConvGeometry& gm = l.geom;
      LayerRow& t = rows[i];
      t.name = l.name;
      t.kind = cr.host ? "maxpool_host" : "conv";
      t.shape = fmt::format("{}x{}x{}>{}x{}x{} k{}x{}/{}", gm.in_c, gm.in_h, gm.in_w, gm.out_c, gm.out_h(), gm.out_w(),
                            gm.kernel_h, gm.kernel_w, gm.stride_h);
      t.relu = l.relu;
      t.macs += cr.plan.macs();
      t.cycles += cr.perf.cycles;
      t.rd_bytes += cr.perf.rd_bytes;
      t.wr_bytes += cr.perf.wr_bytes;
      t.min_bytes += cr.min_bytes;
      t.mxu_active += cr.perf.mxu_active;
      t.weight_stall += cr.perf.weight_stall;
      t.weight_shift += cr.perf.weight_shift;
      t.dma_wait += cr.perf.dma_wait;
      t.act_busy += cr.perf.act_busy;
      t.instructions += cr.instructions;
      perf += cr.perf;
      min_bytes += cr.min_bytes;
      instructions += cr.instructions;
    }
    for (size_t i = 0; i < r.head.layers.size() && i < q.head.layers.size(); ++i) {
      const runtime::LayerReport& lr = r.head.layers[i];
      LayerRow& t = rows[q.convs.size() + i];
      t.name = lr.name.empty() ? q.head.layers[i].name : lr.name;
      t.kind = "dense";
      t.shape = fmt::format("{}x{}x{}", chunk, lr.k, lr.n);
      t.relu = q.head.layers[i].relu;
      t.macs += lr.m * lr.k * lr.n;
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
    perf += r.head.perf;
    min_bytes += r.head.min_bytes;
    instructions += r.head.instructions;
    macs += r.macs;
  }

  // ---- outputs ----------------------------------------------------------------------------------
  std::vector<float> y;
  if (q.has_head()) {
    y = nn::dequantize_output(q.head, raw, in.rows);
  } else {
    y.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) y[i] = static_cast<float>(raw[i]) * q.map_scale();
  }
  const bool want_float = o.check || !labels.empty();
  const std::vector<float> yf = want_float ? float_outputs(og, in, features, classes) : std::vector<float>{};
  json check_json = nullptr;
  double float_max_diff = 0, argmax_agree = 0;
  if (o.check) {
    const std::vector<int32_t> golden = nn::forward_cnn_int_raw(q, x_q, in.rows);
    for (size_t i = 0; i < golden.size(); ++i) {
      if (golden[i] != raw[i]) {
        throw Error(ErrorKind::kMismatch,
                    fmt::format("mismatch: output[{}, {}] (int32 before dequantization): {} = {}, cpu = {}", i / classes,
                                i % classes, o.backend, raw[i], golden[i]));
      }
    }
    double max_abs = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      float_max_diff = std::max(float_max_diff, std::fabs(static_cast<double>(y[i]) - yf[i]));
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(yf[i])));
    }
    const auto pd = nn::argmax_rows(y, classes), pf = nn::argmax_rows(yf, classes);
    uint64_t same = 0;
    for (size_t i = 0; i < pd.size(); ++i) same += pd[i] == pf[i];
    argmax_agree = ratio(same, pd.size());
    check_json = json{{"cpu", "equal"},
                      {"float_max_abs_diff", float_max_diff},
                      {"float_max_abs", max_abs},
                      {"float_argmax_agreement", argmax_agree}};
  }
  double acc_dev = 0, acc_float = 0;
  if (!labels.empty()) {
    acc_dev = accuracy(y, classes, labels);
    acc_float = accuracy(yf, classes, labels);
  }
  if (!o.output.empty()) npy::save(o.output, npy::Array::from<float>(out_shape, std::span<const float>(y)));

  // ---- report -----------------------------------------------------------------------------------
  // PERF_RD_BYTES / PERF_WR_BYTES of every program (the dense head's per-layer bytes leave out its
  // FENCE and shared fetches, so the layers may add up to a little less).
  const uint64_t rd = perf.rd_bytes, wr = perf.wr_bytes;
  const double utilization = util(macs, array_n, perf.cycles);
  const double images_per_s = wall > 0 ? static_cast<double>(in.rows) / wall : 0.0;
  const double cycles_per_image = ratio(perf.cycles, in.rows);
  const std::string host_op = q.head.host_op == nn::HostOp::kSoftmax ? "softmax" : "none";
  if (o.json) {
    json j;
    j["model"] = o.model;
    j["input"] = o.input;
    j["tpuw_version"] = version_string();
    j["backend"] = o.backend;
    j["precision"] = "int8";
    j["array_n"] = array_n;
    j["model_kind"] = "cnn";
    j["rows"] = in.rows;
    j["batch"] = chunk;
    j["batches"] = chunks;
    j["input_shape"] = {shape.c, shape.h, shape.w};
    j["input_features"] = features;
    j["output_features"] = classes;
    j["host_op"] = host_op;
    j["input_scale"] = q.input_scale;
    j["calibration"] = o.calibrate.empty() ? o.input : o.calibrate;
    j["calibration_rows"] = cal.rows;
    json jl = json::array();
    for (const LayerRow& t : rows) {
      jl.push_back({{"name", t.name}, {"kind", t.kind}, {"shape", t.shape}, {"macs", t.macs}, {"relu", t.relu},
                    {"cycles", t.cycles}, {"utilization", util(t.macs, array_n, t.cycles)}, {"rd_bytes", t.rd_bytes},
                    {"wr_bytes", t.wr_bytes}, {"min_bytes", t.min_bytes},
                    {"bytes_vs_min", ratio(t.rd_bytes + t.wr_bytes, t.min_bytes)}, {"mxu_active", t.mxu_active},
                    {"weight_stall", t.weight_stall}, {"weight_shift", t.weight_shift}, {"dma_wait", t.dma_wait},
                    {"act_busy", t.act_busy}, {"instructions", t.instructions}});
    }
    j["layers"] = jl;
    j["cycles"] = perf.cycles;
    j["cycles_per_image"] = cycles_per_image;
    j["utilization"] = utilization;
    j["macs"] = macs;
    j["rd_bytes"] = rd;
    j["wr_bytes"] = wr;
    j["min_bytes"] = min_bytes;
    j["instructions"] = instructions;
    j["wall_s"] = wall;
    j["images_per_s"] = images_per_s;
    j["sim_hz"] = wall > 0 ? static_cast<double>(perf.cycles) / wall : 0.0;
    j["perf"] = perf_json(perf);
    if (!labels.empty()) {
      j["accuracy"] = {{"labels", o.labels}, {"rows", labels.size()}, {"int8", acc_dev}, {"float", acc_float}};
    } else {
      j["accuracy"] = nullptr;
    }
    j["check"] = check_json;
    j["output"] = o.output.empty() ? json(nullptr) : json(o.output);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  fmt::print("{}: input '{}' [batch, {}, {}, {}] -> {} convolution/pooling layer{} + {} dense layer{}{} -> {}\n",
             o.model, shape.name, shape.c, shape.h, shape.w, q.convs.size(), q.convs.size() == 1 ? "" : "s",
             q.head.layers.size(), q.head.layers.size() == 1 ? "" : "s",
             host_op == "softmax" ? " -> softmax (host)" : "",
             q.has_head() ? fmt::format("[batch, {}]", classes)
                          : fmt::format("feature map [batch, {}]", fmt::join(out_shape.begin() + 1, out_shape.end(), ", ")));
  fmt::print("int8: input scale {:.6g}, activation scales calibrated on {} ({} rows)\n", q.input_scale,
             o.calibrate.empty() ? o.input + " (the input itself; use --calibrate)" : o.calibrate, cal.rows);
  fmt::print("{} images on {} (N={}) in {} batch{} of {}: {} cycles ({:.0f} per image), utilization {:.3f}, wall "
             "{:.3f} s, {:.1f} images/s\n",
             in.rows, o.backend, array_n, chunks, chunks == 1 ? "" : "es", chunk, perf.cycles, cycles_per_image,
             utilization, wall, images_per_s);
  fmt::print("  {:<3} {:<28} {:<26} {:>10} {:>6} {:>10} {:>10} {:>10} {:>6}  {}\n", "#", "layer", "shape", "cycles",
             "util", "rd bytes", "wr bytes", "min bytes", "x min", "cycles went to: mxu / w-stall / w-shift / dma-wait / act");
  for (size_t i = 0; i < rows.size(); ++i) {
    const LayerRow& t = rows[i];
    std::string name = t.name + (t.relu ? " +relu" : "") + (t.kind == "maxpool_host" ? " [host]" : "");
    if (name.size() > 28) name = name.substr(0, 25) + "...";
    if (t.kind == "maxpool_host") {
      fmt::print("  {:<3} {:<28} {:<26} {:>10}  int8 max on the host between device programs (exact; no device bytes)\n",
                 i, name, t.shape, "-");
      continue;
    }
    fmt::print("  {:<3} {:<28} {:<26} {:>10} {:>6.3f} {:>10} {:>10} {:>10} {:>6.2f}  {} / {} / {} / {} / {}\n", i, name,
               t.shape, t.cycles, util(t.macs, array_n, t.cycles), t.rd_bytes, t.wr_bytes, t.min_bytes,
               ratio(t.rd_bytes + t.wr_bytes, t.min_bytes), pct(t.mxu_active, t.cycles), pct(t.weight_stall, t.cycles),
               pct(t.weight_shift, t.cycles), pct(t.dma_wait, t.cycles), pct(t.act_busy, t.cycles));
  }
  fmt::print("  total: {} cycles; mxu_active {} weight_stall {} weight_shift {} dma_wait {} act_busy {} instret {}; "
             "bytes read {} written {} (minimum {}, {:.2f}x)\n",
             perf.cycles, perf.mxu_active, perf.weight_stall, perf.weight_shift, perf.dma_wait, perf.act_busy,
             perf.instret, rd, wr, min_bytes, ratio(rd + wr, min_bytes));
  if (!labels.empty()) {
    fmt::print("accuracy on {} ({} rows): int8 on {} {:.2f}%, float model {:.2f}% ({:+.2f} points)\n", o.labels,
               labels.size(), o.backend, 100.0 * acc_dev, 100.0 * acc_float, 100.0 * (acc_dev - acc_float));
  }
  if (o.check) {
    fmt::print("check: device output equals the CPU integer model bit for bit; vs the float model: max |diff| {:.4g}, "
               "argmax agrees on {:.2f}% of the rows\n",
               float_max_diff, 100.0 * argmax_agree);
  }
  if (!o.output.empty()) fmt::print("output -> {} (float32, {})\n", o.output, npy::shape_string(out_shape));
  return 0;
}

}  // namespace tpuw::cli
