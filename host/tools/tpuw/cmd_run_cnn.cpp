// tpuw run MODEL.onnx for a CNN (cmd_run_cnn.h):
//
//   1. import the ONNX graph and the tensors: inputs as the model's input shape [rows, C, H, W] (or
//      flattened [rows, C*H*W]), float32, uint8 or int8; everything is checked before the device opens
//   2. compile_quantized_cnn: calibrated per-tensor activation scales (--calibrate, default the
//      input), per-channel int8 weights (tpuw/compiler/conv.h)
//   3. run_cnn in batches of --batch rows: one device program per convolution / pooling layer
//      (implicit GEMM over the unified buffer), one for the dense head (tpuw/runtime/conv.h); with
//      --devices K the batches are micro-batches spread over K devices (cnn_report.h
//      run_cnn_batches), the output the same bytes for any K; under `mpirun -np P` each rank runs
//      its contiguous block of images and rank 0 gathers them (cnn_report.h CnnRanks)
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
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cnn_report.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/maxpool_indices.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/trace.h"

namespace tpuw::cli {

namespace {

using json = nlohmann::ordered_json;
using compiler::Graph;
using compiler::Op;

// Host memory for one batch of `rows` images: every layer's buffers (run_cnn allocates a layer's
// buffers and frees them when the layer is done; the sum is a safe bound), the ring and slack.
uint64_t cnn_memory_bytes(const DeviceParams& params, const nn::QCnn& q, uint64_t rows) {
  uint64_t need = 0;
  for (const nn::QConv2d& l : q.convs) {
    if (l.max_pool) {  // on the device: the input, one identity tile, 3 param rows, the output
      const runtime::ConvPlan p = runtime::plan_max_pool(params, l.geom, rows);
      need += p.in_bytes() + uint64_t{p.array_n} * p.array_n + 12 * uint64_t{p.array_n} + p.out_bytes() + 4 * 4096;
      continue;
    }
    const runtime::ConvPlan p = runtime::plan_conv(params, l.geom, rows, l.extra_groups(), !l.lut.empty());
    need += p.in_bytes() + p.w_bytes() + p.param_bytes() + p.out_bytes() + 4 * 4096;
  }
  if (q.has_head()) {
    const runtime::NetworkPlan hp = runtime::plan_network(params, q.head, rows);
    need += hp.input_bytes + hp.weight_bytes + hp.param_bytes + hp.spill_bytes + hp.output_bytes + 5 * 4096;
  }
  return cnn_memory_size(need, rows);
}

// With several graph outputs each goes to out.NAME.npy (as the dense path's: characters other than
// letters, digits, '_', '-' and '.' become '_'); one output goes to --output itself.
std::string cnn_output_file(const std::string& output, const nn::QCnn& q, size_t i) {
  if (output.empty() || q.outputs.empty()) return output;
  return named_output_file(output, q.outputs.at(i).name);
}

std::vector<float> input_scales(const nn::QCnn& q) {
  std::vector<float> s;
  for (size_t k = 0; k < q.input_count(); ++k) s.push_back(q.input(k).scale);
  return s;
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
  std::vector<CnnInput> ins = cnn_model_inputs(g, o.model);
  const CnnImages in = load_cnn_inputs(o.inputs, ins, "--input", true);
  CnnImages calib;
  if (!o.calibrates.empty()) calib = load_cnn_inputs(o.calibrates, ins, "--calibrate", false);
  const CnnImages& cal = o.calibrates.empty() ? in : calib;
  check_output_path(o.output);
  check_trace_path(o.trace, o.output);
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--array-n {}: no such configuration", o.array_n));
  }
  const nn::QCnn q = compiler::compile_quantized_cnn(g, cal.x, cal.rows);
  const auto classes = static_cast<uint32_t>(q.output_features());
  for (size_t i = 0; !o.output.empty() && i < q.outputs.size(); ++i) {
    check_output(fmt::format("--output {} (output '{}')", o.output, q.outputs[i].name), cnn_output_file(o.output, q, i));
    for (size_t k = 0; k < i; ++k) {
      if (cnn_output_file(o.output, q, i) == cnn_output_file(o.output, q, k)) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("--output {}: graph outputs '{}' and '{}' would both be written to {}", o.output,
                                q.outputs[k].name, q.outputs[i].name, cnn_output_file(o.output, q, i)));
      }
    }
  }
  // The output's shape per row: the model's (a feature map keeps [C, H, W]; a head gives [classes]).
  Graph og = compiler::optimize(g);
  // The network's output first (cnn_float_outputs reads graph output 0); the others are layer maps.
  for (size_t i = 0; i < q.outputs.size(); ++i) {
    if (q.outputs[i].layer < 0) std::swap(og.outputs[0], og.outputs[i]);
  }
  std::vector<uint64_t> out_shape = {in.rows};
  if (q.has_head()) {
    out_shape.push_back(classes);
  } else {
    const compiler::Dims& od = *og.value(og.outputs[0].value).shape;
    for (size_t i = 1; i < od.size(); ++i) out_shape.push_back(static_cast<uint64_t>(od[i]));
  }
  // Hidden layers' maps that are graph outputs too (several outputs), int8 as the device wrote them.
  std::vector<std::vector<int8_t>> maps(q.outputs.size());
  std::vector<std::vector<int64_t>> pool_indices(q.outputs.size());  // a max pool's Indices outputs
  std::vector<int64_t> labels;
  if (!o.labels.empty()) {
    if (!q.has_head()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--labels {}: the model's output '{}' is a feature map, not class scores", o.labels,
                              g.outputs[0].name));
    }
    labels = load_class_labels(o.labels, in.rows, classes);
  }
  const uint64_t features = q.input_row();  // every input's values per image
  const std::vector<int8_t> x_q = nn::quantize_cnn_input(q, in.x);

  // Under mpirun this rank's block of the images (the calibration above used every row, as one rank's).
  CnnRanks ranks = cnn_ranks(o, in.rows);
  CnnTotals tot(q.convs.size(), q.head.layers.size(), ranks.rows, o.batch);
  cnn_chunking(o, tot);
  std::unique_ptr<runtime::Trace> trace = o.trace.empty() ? nullptr : std::make_unique<runtime::Trace>();

  // ---- run --------------------------------------------------------------------------------------
  // Each micro-batch's result, by j, until absorbed in order (several devices run them at once). A
  // convolution's map that is no graph output is dropped as soon as the run ends.
  std::vector<bool> keep_map(q.convs.size(), false);
  for (const nn::CnnOutput& out : q.outputs) {
    if (out.layer >= 0) keep_map[static_cast<size_t>(out.layer)] = true;
  }
  std::vector<runtime::CnnRunResult> results(tot.chunks);
  const CnnRunFn run = [&](Device& dev, unsigned device, uint64_t j, uint64_t r0, uint64_t n) {
    runtime::CnnRunResult r =
        runtime::run_cnn(dev, q, std::span<const int8_t>(x_q).subspan((ranks.first + r0) * features, n * features), n);
    worker::MicroBatchUse use;
    use.macs = r.macs;
    for (size_t i = 0; i < r.convs.size(); ++i) {
      use.perf += r.convs[i].perf;
      trace_cnn_program(trace.get(), dev, device, fmt::format("{} (micro-batch {})", q.convs[i].name, j), r.convs[i].perf);
      if (!keep_map[i]) std::vector<int8_t>().swap(r.convs[i].y);
    }
    use.perf += r.head.perf;
    trace_cnn_program(trace.get(), dev, device, fmt::format("dense head (micro-batch {})", j), r.head.perf);
    results[j] = std::move(r);
    return use;
  };
  std::vector<int32_t> raw;
  raw.reserve(in.rows * classes);
  const CnnAbsorbFn absorb = [&](uint64_t j, uint64_t r0, uint64_t n) {
    const runtime::CnnRunResult r = std::move(results[j]);
    if (r.output_i32.size() != n * classes) {
      throw Error(ErrorKind::kInternal,
                  fmt::format("CNN run returned {} outputs, expected {}", r.output_i32.size(), n * classes));
    }
    raw.insert(raw.end(), r.output_i32.begin(), r.output_i32.end());
    for (size_t k = 0; k < q.outputs.size(); ++k) {
      if (q.outputs[k].layer < 0) continue;
      if (q.outputs[k].indices) {
        // Indices of this micro-batch's images: the device counts from image 0 of the micro-batch.
        const runtime::ConvRunResult& cr = r.convs.at(static_cast<size_t>(q.outputs[k].layer));
        const nn::ConvGeometry& gg = cr.plan.geom;
        const int64_t chw = int64_t{gg.in_c} * gg.in_h * gg.in_w;
        for (const int64_t v : cr.indices) pool_indices[k].push_back(v + static_cast<int64_t>(ranks.first + r0) * chw);
        continue;
      }
      const std::vector<int8_t>& m = r.convs.at(static_cast<size_t>(q.outputs[k].layer)).y;
      maps[k].insert(maps[k].end(), m.begin(), m.end());
    }
    for (size_t i = 0; i < r.convs.size(); ++i) {
      const runtime::ConvRunResult& cr = r.convs[i];
      const nn::QConv2d& l = q.convs[i];
      // A max pool counts no MACs (on the host its PERF counters are 0 too); a convolution the MACs
      // of its nonzero kernels (conv_weight_macs: utilization <= 1).
      tot.add_conv(i, l.name, l.geom, l.relu, cr.host,
                   l.max_pool ? 0 : runtime::conv_weight_macs(l.geom, cr.plan.batch, std::span<const int8_t>(l.w_q)), cr.perf, cr.min_bytes,
                   cr.instructions, l.max_pool);
    }
    for (size_t i = 0; i < r.head.layers.size() && i < q.head.layers.size(); ++i) {
      tot.add_dense(i, r.head.layers[i], q.head.layers[i].name, q.head.layers[i].relu);
    }
    tot.add_head(r.head.perf, r.head.min_bytes, r.head.instructions);
    tot.macs += r.macs;
  };
  unsigned array_n = o.array_n;
  std::string failed;  // under mpirun: this rank's error, sent to every rank
  ErrorKind failed_kind = ErrorKind::kInternal;
  try {
    if (ranks.rows > 0) array_n = run_cnn_batches(o, tot, cnn_memory_bytes(*params, q, tot.chunk), run, absorb, trace.get());
  } catch (const Error& e) {
    if (!ranks.mpi) throw;
    failed = e.what();
    failed_kind = e.kind();
  }
  if (ranks.mpi) {
    // Every output's share of this rank's images; rank 0 gets them in rank order (one rank's bytes).
    std::vector<std::span<const uint8_t>> parts = {byte_span(raw)};
    for (size_t k = 0; k < q.outputs.size(); ++k) {
      parts.push_back(byte_span(maps[k]));
      parts.push_back(byte_span(pool_indices[k]));
    }
    const std::vector<std::vector<uint8_t>> all = gather_cnn_ranks(o, ranks, tot, parts, failed, failed_kind, trace.get());
    if (!ranks.root()) return 0;  // rank 0 checks, writes and reports for every rank
    raw = from_bytes<int32_t>(all[0]);
    for (size_t k = 0; k < q.outputs.size(); ++k) {
      maps[k] = from_bytes<int8_t>(all[1 + 2 * k]);
      pool_indices[k] = from_bytes<int64_t>(all[2 + 2 * k]);
    }
  } else if (trace != nullptr) {
    stage_trace(*o.outputs, o.trace, trace->to_json());
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
  const std::vector<float> yf = want_float ? cnn_float_outputs(og, in, features, classes) : std::vector<float>{};
  json check_json = nullptr;
  FloatAgreement fa;
  if (o.check) {
    const std::vector<int32_t> golden = nn::forward_cnn_int_raw(q, x_q, in.rows);
    for (size_t i = 0; i < golden.size(); ++i) {
      if (golden[i] != raw[i]) {
        throw Error(ErrorKind::kMismatch,
                    fmt::format("mismatch: output[{}, {}] (int32 before dequantization): {} = {}, cpu = {}", i / classes,
                                i % classes, o.backend, raw[i], golden[i]));
      }
    }
    const std::vector<std::vector<int8_t>> golden_maps =
        q.outputs.empty() ? std::vector<std::vector<int8_t>>{} : nn::forward_cnn_int_maps(q, x_q, in.rows);
    for (size_t k = 0; k < q.outputs.size(); ++k) {
      if (q.outputs[k].layer < 0) continue;
      if (q.outputs[k].indices) {
        const auto li = static_cast<size_t>(q.outputs[k].layer);
        const std::vector<int8_t> a = nn::cnn_layer_input(
            q, li, x_q, [&](size_t j) -> const std::vector<int8_t>& { return golden_maps.at(j); }, in.rows);
        const nn::QConv2d& l = q.convs[li];
        const std::vector<int64_t> want = runtime::max_pool_indices_host<int8_t>(l.geom, a, in.rows, l.indices_column_major);
        for (size_t i = 0; i < want.size(); ++i) {
          if (i >= pool_indices[k].size() || pool_indices[k][i] != want[i]) {
            throw Error(ErrorKind::kMismatch,
                        fmt::format("mismatch: output '{}' (Indices) element {}: {} = {}, cpu = {}", q.outputs[k].name, i,
                                    o.backend, i < pool_indices[k].size() ? pool_indices[k][i] : -1, want[i]));
          }
        }
        continue;
      }
      const std::vector<int8_t>& want = golden_maps.at(static_cast<size_t>(q.outputs[k].layer));
      for (size_t i = 0; i < want.size(); ++i) {
        if (i >= maps[k].size() || maps[k][i] != want[i]) {
          throw Error(ErrorKind::kMismatch, fmt::format("mismatch: output '{}' element {}: {} = {}, cpu = {}", q.outputs[k].name,
                                                        i, o.backend, i < maps[k].size() ? maps[k][i] : 0, want[i]));
        }
      }
    }
    fa = compare_with_float(y, yf, classes, q.has_head());
    check_json = fa.check_json();
  }
  double acc_dev = 0, acc_float = 0;
  if (!labels.empty()) {
    acc_dev = accuracy(y, classes, labels);
    acc_float = accuracy(yf, classes, labels);
  }
  // Every output: the network's (y in out_shape) and each hidden layer's map [rows, C, H, W].
  json outputs_json = json::array();
  std::vector<std::string> output_lines;
  for (size_t k = 0; k < std::max<size_t>(q.outputs.size(), 1); ++k) {
    const std::string file = cnn_output_file(o.output, q, k);
    const int32_t layer = q.outputs.empty() ? -1 : q.outputs[k].layer;
    std::vector<uint64_t> shp = out_shape;
    std::vector<float> v;
    const bool indices = !q.outputs.empty() && q.outputs[k].indices;
    if (layer >= 0) {
      const nn::QConv2d& l = q.convs[static_cast<size_t>(layer)];
      shp = {in.rows, l.geom.out_c, l.geom.out_h(), l.geom.out_w()};
      v.resize(maps[k].size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(maps[k][i]) * l.out_scale;
    }
    if (!file.empty() && indices) {
      stage_npy(*o.outputs, file, npy::Array::from<int64_t>(shp, std::span<const int64_t>(pool_indices[k])));  // ONNX's int64
    } else if (!file.empty()) {
      stage_npy(*o.outputs, file, npy::Array::from<float>(shp, std::span<const float>(layer >= 0 ? v : y)));
    }
    if (!q.outputs.empty()) {
      uint64_t feats = 1;
      for (size_t d = 1; d < shp.size(); ++d) feats *= shp[d];
      outputs_json.push_back({{"name", q.outputs[k].name},
                              {"layer", layer >= 0 ? q.convs[static_cast<size_t>(layer)].name : std::string("network output")},
                              {"features", feats},
                              {"file", file}});
      output_lines.push_back(fmt::format("output '{}' ({}, [{}]){}", q.outputs[k].name,
                                         layer < 0 ? "the network's"
                                         : (indices ? "Indices of layer " : "layer ") + q.convs[static_cast<size_t>(layer)].name,
                                         fmt::join(shp, ", "), file.empty() ? "" : " -> " + file));
    }
  }

  // ---- report -----------------------------------------------------------------------------------
  const std::string host_op = q.head.host_op == nn::HostOp::kSoftmax ? "softmax" : "none";
  if (o.json) {
    json j = cnn_json(o, "int8", array_n, tot, ins, classes, host_op);
    j["input_scale"] = q.input_scale;
    if (ins.size() > 1) {
      j["input_features"] = features;  // every input's values per image, as the dense path's row
      j["inputs"] = cnn_inputs_json(ins, in.rows, 1, input_scales(q));
    }
    j["calibration"] = o.calibrate.empty() ? o.input : o.calibrate;
    j["calibration_rows"] = cal.rows;
    add_cnn_json_results(j, o, "int8", array_n, tot, labels.size(), acc_dev, acc_float, check_json);
    if (!q.outputs.empty()) {
      j["output"] = nullptr;  // several outputs: each one's file is in "outputs"
      j["outputs"] = outputs_json;
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const std::string out_desc =
      q.has_head() ? fmt::format("[batch, {}]", classes)
                   : fmt::format("feature map [batch, {}]", fmt::join(out_shape.begin() + 1, out_shape.end(), ", "));
  print_cnn_inputs(o, ins, in.rows, 1);
  print_cnn_header(o, ins, q.convs.size(), q.head.layers.size(), host_op, out_desc);
  std::string scales = fmt::format("input scale {:.6g}", q.input_scale);
  if (ins.size() > 1) {
    std::vector<std::string> sc;
    for (size_t k = 0; k < ins.size(); ++k) sc.push_back(fmt::format("'{}' {:.6g}", ins[k].name, q.input(k).scale));
    scales = fmt::format("input scales {}{}", fmt::join(sc, ", "),
                         q.head_sources.empty() ? "" : " (the vector's and the map's reconciled in the head's first layer)");
  }
  fmt::print("int8: {}, activation scales calibrated on {} ({} rows)\n", scales,
             o.calibrate.empty() ? o.input + " (the input itself; use --calibrate)" : o.calibrate, cal.rows);
  print_cnn_layers(o, "int8", array_n, tot);
  const std::string check_line =
      o.check ? fmt::format("check: device output equals the CPU integer model bit for bit; vs the float model: max "
                            "|diff| {:.4g}{}",
                            fa.max_diff, fa.argmax_phrase())
              : std::string();
  CnnRunOpts tail_o = o;
  if (!q.outputs.empty()) tail_o.output.clear();  // the lines below name every output's file
  print_cnn_tail(tail_o, "int8", labels.size(), acc_dev, acc_float, check_line, out_shape);
  for (const std::string& line : output_lines) fmt::print("{}\n", line);
  return 0;
}

}  // namespace tpuw::cli
