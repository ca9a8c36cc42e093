// tpuw run MODEL.onnx --precision bf16 for a CNN (cmd_run_cnn_bf16.h):
//
//   1. import the ONNX graph and the input ([rows, C, H, W] or [rows, C*H*W]; float32, uint8, int8)
//   2. compile_bf16_cnn: the int8 CNN path's chain, float weights (tpuw/compiler/conv_bf16.h)
//   3. run_cnn_bf16 in batches of --batch rows: one bf16 device program per convolution / average
//      pool (implicit GEMM), max pools (VECTOR MAX over the taps), the dense head in one more program;
//      --devices K and `mpirun -np P` split the images as the int8 path does (cnn_report.h)
//   4. the host operator (softmax), --output (float32 [rows, classes])
//   5. the per-layer report of the int8 CNN path (cnn_report.h); --labels: accuracy of the device
//      and of the float model; --check: the fp32 output (before the host op) against the CPU bf16 contract
//      (forward_cnn_bf16_host) bit for bit, exit 3 otherwise, and the distance to the float model.
#include "cmd_run_cnn_bf16.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "cnn_report.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/maxpool_indices.h"
#include "tpuw/runtime/maxpool.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::cli {
namespace {

using json = nlohmann::ordered_json;
using compiler::Bf16Cnn;
using compiler::Bf16ConvLayer;
using compiler::Graph;

// Host memory for one batch: every layer's buffers (a safe bound), the head's, and slack.
uint64_t memory_bytes(const DeviceParams& params, const Bf16Cnn& net, uint64_t rows) {
  uint64_t need = 0;
  for (const Bf16ConvLayer& l : net.convs) {
    if (l.kind == Bf16ConvLayer::Kind::kMaxPool) {  // the input, one identity tile, the output
      const runtime::ConvPlan p = runtime::plan_max_pool_bf16(params, l.geom, rows);
      need += runtime::conv_bf16_in_bytes(p) + 2 * uint64_t{p.array_n} * p.array_n + runtime::conv_bf16_out_bytes(p) +
              3 * 4096;
      continue;
    }
    const runtime::ConvPlan p = runtime::plan_conv_bf16(params, l.geom, rows);
    need += runtime::conv_bf16_in_bytes(p) + runtime::conv_bf16_w_bytes(p) + runtime::conv_bf16_param_bytes(p) +
            runtime::conv_bf16_out_bytes(p) + 4 * 4096;
  }
  if (!net.head.layers.empty()) need += runtime::network_bf16_memory_bytes(params, net.head, rows);
  return cnn_memory_size(need, rows);
}

}  // namespace

int run_cnn_bf16_model(const CnnRunOpts& o) {
  if (!o.calibrate.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--calibrate sets int8 activation scales; --precision bf16 needs no calibration");
  }
  // ---- inputs (everything checked before the device is opened) ----------------------------------
  const Graph g = compiler::import_onnx_file(o.model);
  std::vector<CnnInput> ins = cnn_model_inputs(g, o.model);
  const Bf16Cnn net = compiler::compile_bf16_cnn(g);
  const CnnImages in = load_cnn_inputs(o.inputs, ins, "--input", true);
  check_output_path(o.output);
  check_trace_path(o.trace, o.output);
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--array-n {}: no such configuration", o.array_n));
  }
  if (!net.indices_outputs.empty() && !o.output.empty()) {  // each output to OUT.NAME.npy: checked now
    check_output(fmt::format("--output {} (output '{}')", o.output, net.head.output_name),
                 named_output_file(o.output, net.head.output_name));
    for (const auto& io : net.indices_outputs) {
      check_output(fmt::format("--output {} (output '{}')", o.output, io.name), named_output_file(o.output, io.name));
    }
  }
  const uint32_t classes = net.head.output_features();
  std::vector<int64_t> labels;
  if (!o.labels.empty()) labels = load_class_labels(o.labels, in.rows, classes);
  const uint64_t features = net.input_row();  // every input's values per image
  // Under mpirun this rank's block of the images.
  CnnRanks ranks = cnn_ranks(o, in.rows);
  CnnTotals tot(net.convs.size(), net.head.layers.size(), ranks.rows, o.batch);
  cnn_chunking(o, tot);
  std::unique_ptr<runtime::Trace> trace = o.trace.empty() ? nullptr : std::make_unique<runtime::Trace>();

  // ---- run --------------------------------------------------------------------------------------
  // Each micro-batch's result, by j, until absorbed in order (several devices run them at once);
  // the layers' maps are dropped as soon as the run ends (only the output and Indices are kept).
  std::vector<runtime::CnnBf16RunResult> results(tot.chunks);
  const CnnRunFn run = [&](Device& dev, unsigned device, uint64_t j, uint64_t r0, uint64_t n) {
    runtime::CnnBf16RunResult r =
        runtime::run_cnn_bf16(dev, net, std::span<const float>(in.x).subspan((ranks.first + r0) * features, n * features), n);
    worker::MicroBatchUse use;
    use.macs = r.macs;
    for (size_t i = 0; i < r.convs.size(); ++i) {
      use.perf += r.convs[i].perf;
      trace_cnn_program(trace.get(), dev, device, fmt::format("{} (micro-batch {})", net.convs[i].name, j),
                        r.convs[i].perf);
      if (i < r.functions.size()) {
        use.perf += r.functions[i].perf;
        trace_cnn_program(trace.get(), dev, device,
                          fmt::format("{} (micro-batch {})", net.convs[i].act.node, j), r.functions[i].perf);
      }
      std::vector<float>().swap(r.convs[i].y);
    }
    use.perf += r.head.perf;
    trace_cnn_program(trace.get(), dev, device, fmt::format("dense head (micro-batch {})", j), r.head.perf);
    results[j] = std::move(r);
    return use;
  };
  std::vector<float> y;
  y.reserve(in.rows * classes);
  std::vector<std::vector<int64_t>> pool_indices(net.indices_outputs.size());  // max pools' Indices outputs
  const CnnAbsorbFn absorb = [&](uint64_t j, uint64_t r0, uint64_t n) {
    const runtime::CnnBf16RunResult r = std::move(results[j]);
    if (r.output.size() != n * classes) {
      throw Error(ErrorKind::kInternal, fmt::format("bf16 CNN run returned {} outputs, expected {}", r.output.size(),
                                                    n * classes));
    }
    y.insert(y.end(), r.output.begin(), r.output.end());
    for (size_t k = 0; k < net.indices_outputs.size(); ++k) {
      // The device counts from image 0 of the micro-batch.
      const runtime::ConvBf16RunResult& cr = r.convs.at(static_cast<size_t>(net.indices_outputs[k].layer));
      const nn::ConvGeometry& gg = net.convs[static_cast<size_t>(net.indices_outputs[k].layer)].geom;
      const int64_t chw = int64_t{gg.in_c} * gg.in_h * gg.in_w;
      for (const int64_t v : cr.indices) pool_indices[k].push_back(v + static_cast<int64_t>(ranks.first + r0) * chw);
    }
    for (size_t i = 0; i < r.convs.size(); ++i) {
      const runtime::ConvBf16RunResult& cr = r.convs[i];
      const Bf16ConvLayer& l = net.convs[i];
      // A max pool counts no MACs (on the host its PERF counters are 0 too); a convolution the MACs of
      // its nonzero kernels (conv_weight_macs: utilization <= 1). A function after the
      // layer (its own VECTOR program) is counted with it.
      PerfCounters perf = cr.perf;
      uint64_t min_bytes = cr.min_bytes, instructions = cr.instructions;
      std::string name = l.name;
      if (!l.act.none() && i < r.functions.size()) {
        perf += r.functions[i].perf;
        min_bytes += r.functions[i].min_bytes;
        instructions += r.functions[i].instructions;
        name += " + " + l.act.node;
      }
      const bool pool = l.kind == Bf16ConvLayer::Kind::kMaxPool;
      tot.add_conv(i, name, l.geom, l.relu, cr.host,
                   cr.host || pool ? 0 : runtime::conv_weight_macs(l.geom, cr.plan.batch, std::span<const float>(l.w)), perf,
                   min_bytes,
                   instructions, pool);
    }
    for (size_t i = 0; i < r.head.layers.size() && i < net.head.layers.size(); ++i) {
      tot.add_dense(i, r.head.layers[i], net.head.layers[i].name, net.head.layers[i].relu);
    }
    tot.add_head(r.head.perf, r.head.min_bytes, r.head.instructions);
    tot.macs += r.macs;
  };
  unsigned array_n = o.array_n;
  std::string failed;  // under mpirun: this rank's error, sent to every rank
  ErrorKind failed_kind = ErrorKind::kInternal;
  try {
    if (ranks.rows > 0) array_n = run_cnn_batches(o, tot, memory_bytes(*params, net, tot.chunk), run, absorb, trace.get());
  } catch (const Error& e) {
    if (!ranks.mpi) throw;
    failed = e.what();
    failed_kind = e.kind();
  }
  if (ranks.mpi) {
    // The fp32 output (before the host op) and every Indices output for this rank's images; rank 0
    // gets them in rank order (one rank's bytes).
    std::vector<std::span<const uint8_t>> parts = {byte_span(y)};
    for (const std::vector<int64_t>& v : pool_indices) parts.push_back(byte_span(v));
    const std::vector<std::vector<uint8_t>> all = gather_cnn_ranks(o, ranks, tot, parts, failed, failed_kind, trace.get());
    if (!ranks.root()) return 0;  // rank 0 checks, writes and reports for every rank
    y = from_bytes<float>(all[0]);
    for (size_t k = 0; k < pool_indices.size(); ++k) pool_indices[k] = from_bytes<int64_t>(all[1 + k]);
  } else if (trace != nullptr) {
    stage_trace(*o.outputs, o.trace, trace->to_json());
  }

  // ---- outputs ----------------------------------------------------------------------------------
  json check_json = nullptr;
  FloatAgreement fa;
  const bool want_float = o.check || !labels.empty();
  const Graph og = want_float ? compiler::optimize(g) : Graph{};
  const std::vector<float> yf = want_float ? cnn_float_outputs(og, in, features, classes) : std::vector<float>{};
  if (o.check) {
    // Rows are independent in the contract: the whole input at once equals the batches.
    std::vector<std::vector<float>> layer_inputs;
    const std::vector<float> golden = runtime::forward_cnn_bf16_host(
        net, in.x, in.rows, array_n, net.indices_outputs.empty() ? nullptr : &layer_inputs);
    check_bf16_output(golden, y, classes, o.backend);
    // A max pool's Indices against the first maximum of its contract input (as int8's --check).
    for (size_t k = 0; k < net.indices_outputs.size(); ++k) {
      const auto li = static_cast<size_t>(net.indices_outputs[k].layer);
      const Bf16ConvLayer& l = net.convs[li];
      const std::vector<int64_t> want =
          runtime::max_pool_indices_host<float>(l.geom, layer_inputs.at(li), in.rows, l.indices_column_major);
      for (size_t i = 0; i < want.size(); ++i) {
        if (i >= pool_indices[k].size() || pool_indices[k][i] != want[i]) {
          throw Error(ErrorKind::kMismatch,
                      fmt::format("mismatch: output '{}' (Indices) element {}: {} = {}, cpu = {}",
                                  net.indices_outputs[k].name, i, o.backend,
                                  i < pool_indices[k].size() ? pool_indices[k][i] : -1, want[i]));
        }
      }
    }
  }
  if (net.head.host_op == nn::HostOp::kSoftmax) nn::softmax_rows(y, classes);
  if (o.check) {
    fa = compare_with_float(y, yf, classes, !net.head.layers.empty());
    check_json = fa.check_json();
  }
  double acc_dev = 0, acc_float = 0;
  if (!labels.empty()) {
    acc_dev = accuracy(y, classes, labels);
    acc_float = accuracy(yf, classes, labels);
  }
  // --output in the model output's shape ([rows, classes], or a feature map [rows, C, H, W]).
  std::vector<uint64_t> out_shape{in.rows};
  for (const int64_t d : net.output_dims) out_shape.push_back(static_cast<uint64_t>(d));
  // With a max pool's Indices as a graph output too: each output to OUT.NAME.npy (as int8's).
  std::vector<std::string> output_lines;
  if (net.indices_outputs.empty()) {
    if (!o.output.empty()) stage_npy(*o.outputs, o.output, npy::Array::from<float>(out_shape, y));
  } else {
    const std::string yfile = named_output_file(o.output, net.head.output_name);
    if (!yfile.empty()) stage_npy(*o.outputs, yfile, npy::Array::from<float>(out_shape, y));
    output_lines.push_back(fmt::format("output '{}' (the network's, [{}]){}", net.head.output_name,
                                       fmt::join(out_shape, ", "), yfile.empty() ? "" : " -> " + yfile));
    for (size_t k = 0; k < net.indices_outputs.size(); ++k) {
      const Bf16ConvLayer& l = net.convs[static_cast<size_t>(net.indices_outputs[k].layer)];
      const std::vector<uint64_t> shp{in.rows, l.geom.out_c, l.geom.out_h(), l.geom.out_w()};
      const std::string file = named_output_file(o.output, net.indices_outputs[k].name);
      if (!file.empty()) stage_npy(*o.outputs, file, npy::Array::from<int64_t>(shp, std::span<const int64_t>(pool_indices[k])));
      output_lines.push_back(fmt::format("output '{}' (Indices of layer {}, [{}]){}", net.indices_outputs[k].name, l.name,
                                         fmt::join(shp, ", "), file.empty() ? "" : " -> " + file));
    }
  }

  // ---- report -----------------------------------------------------------------------------------
  const std::string host_op = net.head.host_op == nn::HostOp::kSoftmax ? "softmax" : "none";
  if (o.json) {
    json j = cnn_json(o, "bf16", array_n, tot, ins, classes, host_op);
    if (ins.size() > 1) {
      j["input_features"] = features;  // every input's values per image, as the dense path's row
      j["inputs"] = cnn_inputs_json(ins, in.rows, 2, {});
    }
    add_cnn_json_results(j, o, "bf16", array_n, tot, labels.size(), acc_dev, acc_float, check_json);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  print_cnn_inputs(o, ins, in.rows, 2);
  print_cnn_header(o, ins, net.convs.size(), net.head.layers.size(), host_op, fmt::format("[batch, {}]", classes));
  fmt::print("bf16: input and weights rounded to bf16 (round-to-nearest-even), fp32 accumulation and bias, bf16 "
             "activations between layers, fp32 outputs; no calibration\n");
  print_cnn_layers(o, "bf16", array_n, tot);
  const std::string check_line =
      o.check ? fmt::format("check: device output equals the CPU bf16 model (docs/numerics.md contract) bit for bit; "
                            "vs the float model: max |diff| {:.4g} (max |float| {:.4g}){}",
                            fa.max_diff, fa.max_abs, fa.argmax_phrase())
              : std::string();
  CnnRunOpts tail_o = o;
  if (!net.indices_outputs.empty()) tail_o.output.clear();  // the lines below name every output's file
  print_cnn_tail(tail_o, "bf16", labels.size(), acc_dev, acc_float, check_line, out_shape);
  for (const std::string& line : output_lines) fmt::print("{}\n", line);
  return 0;
}

}  // namespace tpuw::cli
