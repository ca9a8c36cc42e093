// bf16 inference (tpuw/runtime/network_bf16.h): the layers as bf16 GEMMs of the shared emitter
// (emit_gemm_bf16, as the training forward pass uses them), one program, per-layer figures like
// the int8 network compiler's.
#include "tpuw/runtime/network_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "network_internal.h"
#include "step_builder.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/error.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/runtime/vector_functions.h"
#include "vector_functions_emit.h"

namespace tpuw::runtime {
namespace {

using detail::round_up;
using netdetail::kPageAlign;

void check_network(const nn::FloatNetwork& net, uint64_t batch, size_t input_size) {
  if (net.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "bf16 network: no layers");
  if (batch == 0) throw Error(ErrorKind::kInvalidArgument, "bf16 network: batch must be >= 1");
  if (net.input_features != net.layers[0].k) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 network: input_features {} != k {} of the first layer '{}'",
                                                         net.input_features, net.layers[0].k, net.layers[0].name));
  }
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const nn::DenseLayer& l = net.layers[i];
    const auto bad = [&](const std::string& what) {
      return Error(ErrorKind::kInvalidArgument, fmt::format("bf16 network layer {} '{}': {}", i, l.name, what));
    };
    if (l.k == 0 || l.n == 0) throw bad(fmt::format("k={} n={}: both must be >= 1", l.k, l.n));
    if (i > 0 && l.k != net.layers[i - 1].n) {
      throw bad(fmt::format("k={} does not match n={} of the previous layer", l.k, net.layers[i - 1].n));
    }
    if (l.w.size() != uint64_t{l.k} * l.n) throw bad(fmt::format("w has {} entries, expected k*n = {}", l.w.size(), uint64_t{l.k} * l.n));
    if (l.b.size() != l.n) throw bad(fmt::format("b has {} entries, expected n = {}", l.b.size(), l.n));
  }
  if (input_size != batch * net.input_features) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("bf16 network input has {} elements, expected batch*k = {}*{}",
                                                         input_size, batch, net.input_features));
  }
}

Bf16GemmSpec layer_spec(const nn::FloatNetwork& net, size_t l, uint64_t batch) {
  const nn::DenseLayer& ly = net.layers[l];
  const bool last = l + 1 == net.layers.size();
  Bf16GemmSpec s;
  s.shape = {batch, ly.k, ly.n};
  s.bias = true;
  s.bf16_out = !last;
  s.relu = !last && ly.relu && ly.act.none();  // with a function, the ReLU is its first VECTOR op
  return s;
}

// A layer with an activation function runs it as VECTOR ops on each finished fp32 strip
// (tpuw/runtime/vector_functions.h); the ReLU, if any, is its first op.
VecFunction layer_function(const nn::DenseLayer& ly) {
  return ly.act.none() ? VecFunction{} : vec_function(ly.act, ly.relu);
}

// The plan of layer l: with a function, on an ACC that leaves room for its scratch strips
// (m_tile * (2 + regs - 1) rows).
Bf16GemmPlan layer_plan(const DeviceParams& params, const nn::FloatNetwork& net, size_t l, uint64_t batch) {
  const VecFunction fn = layer_function(net.layers[l]);
  if (fn.empty()) return plan_gemm_bf16(params, layer_spec(net, l, batch));
  DeviceParams p = params;
  p.acc_depth = static_cast<uint32_t>(uint64_t{params.acc_depth} * 2 / (uint64_t{fn.regs} + 1));
  return plan_gemm_bf16(p, layer_spec(net, l, batch));
}

// Whether the host applies the last layer's ReLU (a last layer with a function has it in the function).
bool host_relu(const nn::FloatNetwork& net) { return net.layers.back().relu && net.layers.back().act.none(); }

void relu_rows(std::vector<float>& y) {
  for (float& v : y) {
    if (!(v > 0.0f) && !std::isnan(v)) v = 0.0f;  // +0 unless positive or NaN, as ACTIVATE's ReLU
  }
}

}  // namespace

uint64_t network_bf16_memory_bytes(const DeviceParams& params, const nn::FloatNetwork& net, uint64_t batch) {
  const auto page = [](uint64_t bytes) { return round_up(std::max<uint64_t>(bytes, 64), kPageAlign); };
  uint64_t total = 0;
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const Bf16GemmPlan p = layer_plan(params, net, l, batch);
    if (l == 0) total += page(p.a_bytes());
    total += page(p.b_bytes()) + page(p.bias_bytes()) + page(p.c_bytes());
  }
  return total;
}

void check_bf16_network(const nn::FloatNetwork& net, std::span<const float> input, std::string_view input_name) {
  compiler::require_finite_weights(compiler::graph_of_float_network(net), "the bf16 compiler");
  const std::vector<float> stepped =
      net.input_steps.empty() ? std::vector<float>{} : nn::apply_input_steps(net.input_steps, input, net.input_features);
  const std::span<const float> x = net.input_steps.empty() ? input : std::span<const float>(stepped);
  const uint64_t f = std::max<uint32_t>(net.input_features, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i]) && std::isinf(bf16::round(x[i]))) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{}: row {} feature {} is {}{}, beyond the largest bf16 ({:g}): rounding it to bf16 gives "
                              "{}inf", input_name, i / f, i % f, x[i], net.input_steps.empty() ? "" : " (after the "
                              "model's operators on the input)", bf16::to_float(0x7F7F), x[i] > 0 ? "+" : "-"));
    }
  }
}

void check_bf16_outputs(std::span<const float> y, uint64_t cols) {
  cols = std::max<uint64_t>(cols, 1);
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("bf16: output row {} column {} is {}: the model's products and sums overflow the fp32 "
                              "range (3.4e38) for these inputs and weights; scale the inputs or the weights down",
                              i / cols, i % cols, std::isnan(y[i]) ? "NaN" : (y[i] > 0 ? "+inf" : "-inf")));
    }
  }
}

std::vector<float> forward_bf16_host(const nn::FloatNetwork& net, std::span<const float> input, uint64_t batch,
                                     uint32_t array_n) {
  check_network(net, batch, input.size());
  std::vector<float> x = nn::apply_input_steps(net.input_steps, input, net.input_features);
  for (float& v : x) v = bf16::round(v);
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const nn::DenseLayer& ly = net.layers[l];
    std::vector<float> w(ly.w.begin(), ly.w.end());
    for (float& v : w) v = bf16::round(v);
    const VecFunction fn = layer_function(ly);
    if (fn.empty()) {
      x = gemm_bf16_host(layer_spec(net, l, batch), array_n, x, w, {}, ly.b);
      continue;
    }
    Bf16GemmSpec s = layer_spec(net, l, batch);
    const bool bf16_out = s.bf16_out;
    s.bf16_out = false;  // the fp32 sum, then the function, then (not the last layer) ACTIVATE's rounding
    x = gemm_bf16_host(s, array_n, x, w, {}, ly.b);
    for (float& v : x) {
      v = vec_function_apply(fn, v);
      if (bf16_out) v = bf16::round(v);
    }
  }
  if (host_relu(net)) relu_rows(x);
  return x;
}

Bf16NetworkRunResult run_network_bf16(Device& device, const nn::FloatNetwork& net, std::span<const float> raw_input,
                                      uint64_t batch, const Bf16NetworkOptions& options) {
  check_network(net, batch, raw_input.size());
  // Host operators on the graph input run first, in fp32 on the raw rows (nn::FloatNetwork::input_steps).
  const std::vector<float> stepped =
      net.input_steps.empty() ? std::vector<float>{} : nn::apply_input_steps(net.input_steps, raw_input, net.input_features);
  const std::span<const float> input = net.input_steps.empty() ? raw_input : std::span<const float>(stepped);
  if ((device.info().features & spec::reg::kFeaturesBf16) == 0) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("bf16 inference: the {} device has no bf16 mode (FEATURES.BF16 is 0: built without "
                            "EnableBf16); use int8",
                            device.info().backend));
  }
  const DeviceParams& params = device.info().params;
  const uint64_t an = params.array_n;
  const size_t nl = net.layers.size();
  Bf16NetworkRunResult r;
  const TraceHook& th = options.trace;
  auto compile_span = th.scope("compile");
  const auto t_compile = std::chrono::steady_clock::now();
  std::vector<Bf16GemmPlan> plans;
  std::vector<VecFunction> fns;
  for (size_t l = 0; l < nl; ++l) {
    plans.push_back(layer_plan(params, net, l, batch));
    fns.push_back(layer_function(net.layers[l]));
  }

  // Device memory: input, per layer weights + bias + output (the last: the fp32 logits).
  // StepBuilder host buffers: 0 = input, 1 + 3l = weights, 2 + 3l = bias, 3 + 3l = output.
  std::vector<HostBuffer> bufs;
  const auto alloc = [&](uint64_t bytes) {
    bufs.push_back(device.alloc(std::max<uint64_t>(bytes, 64), kPageAlign));
    return bufs.size() - 1;
  };
  alloc(plans[0].a_bytes());
  for (size_t l = 0; l < nl; ++l) {
    alloc(plans[l].b_bytes());
    alloc(plans[l].bias_bytes());
    alloc(plans[l].c_bytes());
  }
  detail::StepBuilder sb(params, bufs.size());
  for (size_t l = 0; l < nl; ++l) {
    const size_t a = l == 0 ? 0 : 3 * l, w = 1 + 3 * l, bias = 2 + 3 * l, c = 3 + 3 * l;
    sb.builder().set_tag(static_cast<int32_t>(l));
    const Bf16GemmPlan& pl = plans[l];
    detail::Bf16GemmEpilogue epi;
    if (!fns[l].empty()) {
      // The function on each finished strip (bias included), then ACTIVATE bf16 into the plan's UB
      // output buffers and STORE (the last layer: STORE the fp32 result).
      epi.finish = [&, l, c](uint64_t st, uint64_t acc_row) {
        const uint64_t mt = st / pl.n_blocks, nb = st % pl.n_blocks;
        const uint64_t rows = pl.rows_of_tile(mt), off = mt * pl.m_tile * pl.np + nb * an;
        const uint64_t res = detail::emit_vec_function(sb, fns[l], acc_row, detail::gemm_acc_rows(pl), pl.m_tile, rows);
        if (!pl.spec.bf16_out) {
          sb.store(spec::Mem::kAcc, detail::Transfer{res, bufs[c].addr() + 4 * off, rows, 4 * an, 4 * pl.np}, c);
          return;
        }
        const uint64_t out_row = detail::gemm_ub_rows(pl) - 4 * pl.m_tile + (st % 2) * 2 * pl.m_tile;
        isa::Instr act = isa::make_instr(spec::Opcode::kActivate);
        act.set("bf16", 1);
        act.set("acc_addr", res);
        act.set("ub_addr", out_row);
        act.set("rows", rows);
        sb.compute(std::move(act), sb.acc(res, rows), sb.ub(out_row, 2 * rows));
        sb.store(spec::Mem::kUb, detail::Transfer{out_row, bufs[c].addr() + 2 * off, rows, 2 * an, 2 * pl.np}, c);
      };
    }
    detail::emit_gemm_bf16(sb, pl, Bf16GemmAddrs{bufs[a].addr(), bufs[w].addr(), bufs[c].addr(), bufs[bias].addr(), 0},
                           detail::Bf16GemmHostBufs{a, w, c, bias, std::nullopt}, epi);
  }
  detail::MergedProgram prog = sb.finish();
  const std::vector<LayerProgramStats> stats = netdetail::layer_stats(prog, nl, an);
  r.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_compile).count();
  compile_span.args() = {{"instructions", prog.code.size() + 1}};
  compile_span.end();
  auto upload_span = th.scope("upload");

  const auto t_upload = std::chrono::steady_clock::now();
  {
    const std::vector<uint16_t> x = pad_bf16(input, batch, net.input_features, params.array_n);
    device.write(bufs[0], 0, x.data(), x.size() * 2);
  }
  for (size_t l = 0; l < nl; ++l) {
    const nn::DenseLayer& ly = net.layers[l];
    const std::vector<uint16_t> w = pad_bf16(ly.w, ly.k, ly.n, params.array_n);
    device.write(bufs[1 + 3 * l], 0, w.data(), w.size() * 2);
    std::vector<float> b(plans[l].np, 0.0f);
    std::copy(ly.b.begin(), ly.b.end(), b.begin());
    device.write(bufs[2 + 3 * l], 0, b.data(), b.size() * 4);
  }
  r.upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_upload).count();
  upload_span.end();

  r.instructions = prog.code.size() + 1;
  device.clear_perf();
  const ProgressFn progress = detail::fold_progress(device, prog.fold_index, options.progress);
  const uint64_t cyc0 = device.busy_cycles();
  const auto t0 = std::chrono::steady_clock::now();
  auto submit_span = th.scope("submit");
  const uint32_t fence = device.submit(prog.code, progress);
  submit_span.end();
  auto wait_span = th.scope("wait");
  device.wait(fence, progress);
  wait_span.end();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = device.busy_cycles() - cyc0;
  r.sim_cycles_per_s = r.wall_s > 0 ? static_cast<double>(r.sim_cycles) / r.wall_s : 0.0;
  if (options.progress) options.progress(1.0);

  auto read_span = th.scope("read output");
  const Bf16GemmPlan& lp = plans.back();
  std::vector<float> out(lp.mp * lp.np);
  device.read(bufs[3 * nl], 0, out.data(), out.size() * 4);
  r.output = unpad_f32(out, batch, net.layers.back().n, params.array_n);
  if (host_relu(net)) relu_rows(r.output);

  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.rd_bytes = r.perf.rd_bytes;
  r.wr_bytes = r.perf.wr_bytes;
  std::vector<netdetail::LayerDims> dims;
  for (size_t l = 0; l < nl; ++l) {
    const nn::DenseLayer& ly = net.layers[l];
    const uint64_t out_elem = l + 1 == nl ? 4 : 2;
    dims.push_back({batch, ly.k, ly.n, 2 * uint64_t{ly.k} * ly.n + 2 * batch * ly.k + out_elem * batch * ly.n});
    r.macs += batch * ly.k * ly.n;
  }
  r.layers = netdetail::attribute_layer_dims(params.array_n, dims, stats, r.perf);
  for (size_t l = 0; l < nl; ++l) r.layers[l].name = net.layers[l].name;
  const double peak = static_cast<double>(an) * static_cast<double>(an);
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  uint64_t wbytes = 0;
  for (const nn::DenseLayer& ly : net.layers) wbytes += 2 * uint64_t{ly.k} * ly.n;
  r.min_bytes = wbytes + 2 * batch * net.input_features + 4 * batch * net.layers.back().n;
  read_span.end();
  if (th) {
    const uint64_t start = th.trace->device_program(th.device, th.device_name, fmt::format("bf16 network, {} rows", batch),
                                                    r.perf, {{"macs", r.macs}, {"utilization", r.utilization}});
    std::vector<std::pair<std::string, uint64_t>> parts;
    for (const LayerReport& lr : r.layers) parts.emplace_back(fmt::format("layer {}", lr.name), lr.cycles);
    th.trace->device_parts(th.device, th.device_name, start, parts);
  }
  return r;
}

}  // namespace tpuw::runtime
