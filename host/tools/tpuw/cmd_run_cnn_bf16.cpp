// tpuw run MODEL.onnx --precision bf16 for a CNN (cmd_run_cnn_bf16.h):
//
//   1. import the ONNX graph and the input ([rows, C, H, W] or [rows, C*H*W]; float32, uint8, int8)
//   2. compile_bf16_cnn: the int8 CNN path's chain, float weights (tpuw/compiler/conv_bf16.h)
//   3. run_cnn_bf16 in batches of --batch rows: one bf16 device program per convolution / average
//      pool (implicit GEMM), max pools on the host, the dense head in one more program
//   4. the host operator (softmax), --output (float32 [rows, classes])
//   5. the per-layer report of the int8 CNN path; --labels: accuracy of the device and of the float
//      model; --check: the fp32 output (before the host op) against the CPU bf16 contract
//      (forward_cnn_bf16_host) bit for bit, exit 3 otherwise, and the distance to the float model.
#include "cmd_run_cnn_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;
using compiler::Bf16Cnn;
using compiler::Bf16ConvLayer;
using compiler::Graph;

// (input_shape / load_images / float_outputs follow cmd_run_cnn.cpp's, which keeps its own in an
// anonymous namespace.)
struct Images {
  std::vector<float> x;  // [rows][C*H*W]
  uint64_t rows = 0;
};

Images load_images(const std::string& path, const Bf16Cnn& net) {
  const npy::Array a = npy::load(path);
  const uint64_t c = net.in_c, h = net.in_h, w = net.in_w;
  const auto bad = [&] {
    return Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; --input needs [rows, {}, {}, {}] (the model input's "
                                                  "shape) or [rows, {}]",
                                                  path, npy::shape_string(a.shape), c, h, w, c * h * w));
  };
  Images r;
  if (a.rank() == 4) {
    if (a.shape[1] != c || a.shape[2] != h || a.shape[3] != w) throw bad();
    r.rows = a.shape[0];
  } else if (a.rank() == 3) {
    if (a.shape[0] != c || a.shape[1] != h || a.shape[2] != w) throw bad();
    r.rows = 1;
  } else if (a.rank() == 2) {
    if (a.shape[1] != c * h * w) throw bad();
    r.rows = a.shape[0];
  } else {
    throw bad();
  }
  if (r.rows == 0) throw Error(ErrorKind::kBadFile, fmt::format("{}: shape {} has no rows", path, npy::shape_string(a.shape)));
  r.x = input_values(a, path);
  return r;
}

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

struct LayerRow {
  std::string name, kind;  // conv, maxpool_host or dense
  std::string shape;
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

// Host memory for one batch: every layer's buffers (a safe bound), the head's, and slack.
uint64_t memory_bytes(const DeviceParams& params, const Bf16Cnn& net, uint64_t rows) {
  uint64_t need = 0;
  for (const Bf16ConvLayer& l : net.convs) {
    if (l.kind == Bf16ConvLayer::Kind::kMaxPool) continue;
    const runtime::ConvPlan p = runtime::plan_conv_bf16(params, l.geom, rows);
    need += runtime::conv_bf16_in_bytes(p) + runtime::conv_bf16_w_bytes(p) + runtime::conv_bf16_param_bytes(p) +
            runtime::conv_bf16_out_bytes(p) + 4 * 4096;
  }
  if (!net.head.layers.empty()) need += runtime::network_bf16_memory_bytes(params, net.head, rows);
  need += 8ull << 20;
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a batch of {} images needs {} MiB of host memory; use a smaller --batch", rows, need >> 20));
  }
  return mem;
}

const char* kind_name(const Bf16ConvLayer& l) {
  return l.kind == Bf16ConvLayer::Kind::kMaxPool ? "maxpool_host" : "conv";
}

}  // namespace

int run_cnn_bf16_model(const CnnRunOpts& o) {
  if (!o.calibrate.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--calibrate sets int8 activation scales; --precision bf16 needs no calibration");
  }
  // ---- inputs (everything checked before the device is opened) ----------------------------------
  const Graph g = compiler::import_onnx_file(o.model);
  const Bf16Cnn net = compiler::compile_bf16_cnn(g);
  const Images in = load_images(o.input, net);
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
  const uint32_t classes = net.head.output_features();
  std::vector<int64_t> labels;
  if (!o.labels.empty()) labels = load_class_labels(o.labels, in.rows, classes);
  const uint64_t features = uint64_t{net.in_c} * net.in_h * net.in_w;
  const uint64_t chunk = o.batch == 0 ? in.rows : std::min<uint64_t>(o.batch, in.rows);
  const uint64_t chunks = (in.rows + chunk - 1) / chunk;
  BackendConfig bc;
  bc.array_n = o.array_n;
  bc.memory.size = memory_bytes(*params, net, chunk);
  Device dev = Device::open(o.backend, bc);
  const unsigned array_n = dev.info().params.array_n;

  // ---- run --------------------------------------------------------------------------------------
  std::vector<LayerRow> rows(net.convs.size() + net.head.layers.size());
  PerfCounters perf;
  uint64_t macs = 0, min_bytes = 0, instructions = 0;
  double wall = 0;
  std::vector<float> y;
  y.reserve(in.rows * classes);
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t r0 = c * chunk, n = std::min(chunk, in.rows - r0);
    const auto t0 = std::chrono::steady_clock::now();
    const runtime::CnnBf16RunResult r =
        runtime::run_cnn_bf16(dev, net, std::span<const float>(in.x).subspan(r0 * features, n * features), n);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.output.size() != n * classes) {
      throw Error(ErrorKind::kInternal, fmt::format("bf16 CNN run returned {} outputs, expected {}", r.output.size(),
                                                    n * classes));
    }
    y.insert(y.end(), r.output.begin(), r.output.end());
    for (size_t i = 0; i < r.convs.size(); ++i) {
      const runtime::ConvBf16RunResult& cr = r.convs[i];
      const Bf16ConvLayer& l = net.convs[i];
      const nn::ConvGeometry& gm = l.geom;
      LayerRow& t = rows[i];
      t.name = l.name;
      t.kind = kind_name(l);
      t.shape = fmt::format("{}x{}x{}>{}x{}x{} k{}x{}/{}", gm.in_c, gm.in_h, gm.in_w, gm.out_c, gm.out_h(), gm.out_w(),
                            gm.kernel_h, gm.kernel_w, gm.stride_h);
      t.relu = l.relu;
      if (cr.host) continue;
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
    for (size_t i = 0; i < r.head.layers.size() && i < net.head.layers.size(); ++i) {
      const runtime::LayerReport& lr = r.head.layers[i];
      LayerRow& t = rows[net.convs.size() + i];
      t.name = lr.name.empty() ? net.head.layers[i].name : lr.name;
      t.kind = "dense";
      t.shape = fmt::format("{}x{}x{}", chunk, lr.k, lr.n);
      t.relu = net.head.layers[i].relu;
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
  json check_json = nullptr;
  double float_max_diff = 0, float_max_abs = 0, argmax_agree = 0;
  const bool want_float = o.check || !labels.empty();
  const Graph og = want_float ? compiler::optimize(g) : Graph{};
  const std::vector<float> yf = want_float ? float_outputs(og, in, features, classes) : std::vector<float>{};
  if (o.check) {
    // Rows are independent in the contract: the whole input at once equals the batches.
    const std::vector<float> golden = runtime::forward_cnn_bf16_host(net, in.x, in.rows, array_n);
    for (size_t i = 0; i < golden.size(); ++i) {
      if (num::to_bits(golden[i]) != num::to_bits(y[i])) {
        throw Error(ErrorKind::kMismatch,
                    fmt::format("mismatch: output[{}, {}] (fp32 before the host op): {} = {} (0x{:08x}), cpu bf16 "
                                "model = {} (0x{:08x})",
                                i / classes, i % classes, o.backend, y[i], num::to_bits(y[i]), golden[i],
                                num::to_bits(golden[i])));
      }
    }
  }
  if (net.head.host_op == nn::HostOp::kSoftmax) nn::softmax_rows(y, classes);
  if (o.check) {
    for (size_t i = 0; i < y.size(); ++i) {
      float_max_diff = std::max(float_max_diff, std::fabs(static_cast<double>(y[i]) - yf[i]));
      float_max_abs = std::max(float_max_abs, std::fabs(static_cast<double>(yf[i])));
    }
    const auto pd = nn::argmax_rows(y, classes), pf = nn::argmax_rows(yf, classes);
    uint64_t same = 0;
    for (size_t i = 0; i < pd.size(); ++i) same += pd[i] == pf[i];
    argmax_agree = ratio(same, pd.size());
    check_json = json{{"cpu", "equal"},
                      {"float_max_abs_diff", float_max_diff},
                      {"float_max_abs", float_max_abs},
                      {"float_argmax_agreement", argmax_agree}};
  }
  double acc_dev = 0, acc_float = 0;
  if (!labels.empty()) {
    acc_dev = accuracy(y, classes, labels);
    acc_float = accuracy(yf, classes, labels);
  }
  // --output in the model output's shape ([rows, classes], or a feature map [rows, C, H, W]).
  std::vector<uint64_t> out_shape{in.rows};
  for (const int64_t d : net.output_dims) out_shape.push_back(static_cast<uint64_t>(d));
  if (!o.output.empty()) npy::save(o.output, npy::Array::from<float>(out_shape, y));

  // ---- report -----------------------------------------------------------------------------------
  const uint64_t rd = perf.rd_bytes, wr = perf.wr_bytes;
  const double utilization = util(macs, array_n, perf.cycles);
  const double images_per_s = wall > 0 ? static_cast<double>(in.rows) / wall : 0.0;
  const double cycles_per_image = ratio(perf.cycles, in.rows);
  const std::string host_op = net.head.host_op == nn::HostOp::kSoftmax ? "softmax" : "none";
  if (o.json) {
    json j;
    j["model"] = o.model;
    j["input"] = o.input;
    j["tpuw_version"] = version_string();
    j["backend"] = o.backend;
    j["precision"] = "bf16";
    j["array_n"] = array_n;
    j["model_kind"] = "cnn";
    j["rows"] = in.rows;
    j["batch"] = chunk;
    j["batches"] = chunks;
    j["input_shape"] = {net.in_c, net.in_h, net.in_w};
    j["input_features"] = features;
    j["output_features"] = classes;
    j["host_op"] = host_op;
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
      j["accuracy"] = {{"labels", o.labels}, {"rows", labels.size()}, {"bf16", acc_dev}, {"float", acc_float}};
    } else {
      j["accuracy"] = nullptr;
    }
    j["check"] = check_json;
    j["output"] = o.output.empty() ? json(nullptr) : json(o.output);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  fmt::print("{}: input '{}' [batch, {}, {}, {}] -> {} convolution/pooling layer{} + {} dense layer{}{} -> [batch, {}]\n",
             o.model, g.value(g.inputs[0].value).name, net.in_c, net.in_h, net.in_w, net.convs.size(),
             net.convs.size() == 1 ? "" : "s", net.head.layers.size(), net.head.layers.size() == 1 ? "" : "s",
             host_op == "softmax" ? " -> softmax (host)" : "", classes);
  fmt::print("bf16: input and weights rounded to bf16 (round-to-nearest-even), fp32 accumulation and bias, bf16 "
             "activations between layers, fp32 outputs; no calibration\n");
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
      fmt::print("  {:<3} {:<28} {:<26} {:>10}  bf16 max on the host between device programs (exact; no device bytes)\n",
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
    fmt::print("accuracy on {} ({} rows): bf16 on {} {:.2f}%, float model {:.2f}% ({:+.2f} points)\n", o.labels,
               labels.size(), o.backend, 100.0 * acc_dev, 100.0 * acc_float, 100.0 * (acc_dev - acc_float));
  }
  if (o.check) {
    fmt::print("check: device output equals the CPU bf16 model (docs/numerics.md contract) bit for bit; vs the float "
               "model: max |diff| {:.4g} (max |float| {:.4g}), argmax agrees on {:.2f}% of the rows\n",
               float_max_diff, float_max_abs, 100.0 * argmax_agree);
  }
  if (!o.output.empty()) fmt::print("output -> {} (float32, {})\n", o.output, npy::shape_string(out_shape));
  return 0;
}

}  // namespace tpuw::cli
