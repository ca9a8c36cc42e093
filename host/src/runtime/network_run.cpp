// Network compiler, part 4 of 4: buffers, submission, the run and the per-layer report (see
// tpuw/runtime/network.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "network_internal.h"
#include "program_builder.h"
#include "tpuw/error.h"
#include "tpuw/runtime/network.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {

using netdetail::kPageAlign;

namespace {

// Splits `total` into integer parts proportional to `weight` (largest remainder, exact integer
// arithmetic), none above its `cap` (when given): the parts add up to min(total, sum of caps).
// A part whose proportional share would pass its cap gets the cap and the rest is shared again.
// All-zero weights share equally.
std::vector<uint64_t> apportion(uint64_t total, const std::vector<uint64_t>& weight,
                                const std::vector<uint64_t>* cap = nullptr) {
  const size_t n = weight.size();
  std::vector<uint64_t> out(n, 0);
  std::vector<bool> open(n, true);
  if (cap != nullptr) {
    uint64_t room = 0;
    for (size_t i = 0; i < n; ++i) {
      room += (*cap)[i];
      if ((*cap)[i] == 0) open[i] = false;
    }
    total = std::min(total, room);
  }
  uint64_t left = total;
  while (left > 0) {
    unsigned __int128 wsum = 0;
    size_t n_open = 0;
    for (size_t i = 0; i < n; ++i) {
      if (open[i]) {
        wsum += weight[i];
        ++n_open;
      }
    }
    if (n_open == 0) break;
    const bool equal = wsum == 0;
    auto w = [&](size_t i) -> unsigned __int128 { return equal ? 1 : weight[i]; };
    if (equal) wsum = n_open;
    // Parts that would pass their cap take the cap; share the rest again.
    bool capped = false;
    if (cap != nullptr) {
      for (size_t i = 0; i < n; ++i) {
        if (!open[i]) continue;
        const unsigned __int128 share = (static_cast<unsigned __int128>(left) * w(i) + wsum - 1) / wsum;  // ceil
        if (out[i] + share > (*cap)[i]) {
          left -= (*cap)[i] - out[i];
          out[i] = (*cap)[i];
          open[i] = false;
          capped = true;
        }
      }
    }
    if (capped) continue;
    // Floors, then one more to the largest remainders (earlier layers first on ties).
    std::vector<std::pair<uint64_t, size_t>> rem;
    uint64_t given = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      const unsigned __int128 num = static_cast<unsigned __int128>(left) * w(i);
      const auto f = static_cast<uint64_t>(num / wsum);
      out[i] += f;
      given += f;
      rem.emplace_back(static_cast<uint64_t>(num % wsum), i);
    }
    std::stable_sort(rem.begin(), rem.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    for (size_t j = 0; j < rem.size() && given < left; ++j, ++given) ++out[rem[j].second];
    break;
  }
  return out;
}

}  // namespace

std::vector<LayerReport> attribute_layers(const NetworkPlan& p, const std::vector<LayerProgramStats>& stats,
                                          const PerfCounters& perf) {
  std::vector<netdetail::LayerDims> dims;
  for (const NetworkLayerPlan& lp : p.layers) {
    dims.push_back({p.batch, lp.k, lp.n, lp.k * lp.n + p.batch * lp.k + p.batch * lp.n * (lp.final_int32 ? 4 : 1)});
  }
  return netdetail::attribute_layer_dims(p.array_n, dims, stats, perf);
}

std::vector<LayerReport> netdetail::attribute_layer_dims(uint32_t array_n, const std::vector<LayerDims>& dims,
                                                         const std::vector<LayerProgramStats>& stats,
                                                         const PerfCounters& perf) {
  const size_t nl = dims.size();
  if (stats.size() != nl) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("attribute_layers: {} layer stats for {} layers", stats.size(), nl));
  }
  // Cycles: every layer gets its exact MXU rows plus a share of the rest of PERF_CYCLES in
  // proportion to its non-MATMUL occupancy (weight-shift shortfall, ACTIVATE, NOPs).
  std::vector<uint64_t> mxu(nl), other(nl), occ(nl), loadws(nl), act(nl);
  uint64_t mxu_total = 0;
  for (size_t l = 0; l < nl; ++l) {
    mxu[l] = stats[l].matmul_rows;
    mxu_total += mxu[l];
    other[l] = stats[l].occupancy - std::min(stats[l].occupancy, stats[l].matmul_rows);
    occ[l] = stats[l].occupancy;
    loadws[l] = stats[l].loadws;
    act[l] = stats[l].activate_rows + 6 * stats[l].activates + stats[l].vector_rows + 4 * stats[l].vectors;
  }
  std::vector<uint64_t> cycles;
  if (perf.cycles >= mxu_total) {
    cycles = apportion(perf.cycles - mxu_total, other);
    for (size_t l = 0; l < nl; ++l) cycles[l] += mxu[l];
  } else {
    cycles = apportion(perf.cycles, mxu);  // not a real run (MXU rows are at most the cycles)
  }
  // The breakdown counters: shares no larger than the layer's cycles (a share is at most 100%).
  const std::vector<uint64_t> shift = apportion(perf.weight_shift, loadws, &cycles);
  const std::vector<uint64_t> busy = apportion(perf.act_busy, act, &cycles);
  const std::vector<uint64_t> stall = apportion(perf.weight_stall, occ, &cycles);
  const std::vector<uint64_t> wait = apportion(perf.dma_wait, occ, &cycles);
  const double peak = static_cast<double>(array_n) * static_cast<double>(array_n);
  std::vector<LayerReport> out(nl);
  for (size_t l = 0; l < nl; ++l) {
    const LayerDims& lp = dims[l];
    const LayerProgramStats& s = stats[l];
    LayerReport& lr = out[l];
    lr.m = lp.m;
    lr.k = lp.k;
    lr.n = lp.n;
    lr.cycles = cycles[l];
    const uint64_t macs = lp.m * lp.k * lp.n;
    lr.utilization = lr.cycles > 0 ? static_cast<double>(macs) / (peak * static_cast<double>(lr.cycles)) : 0.0;
    lr.rd_bytes = s.load_bytes + 16 * s.instructions;
    lr.wr_bytes = s.store_bytes;
    lr.min_bytes = lp.min_bytes;
    lr.mxu_active = std::min(s.matmul_rows, lr.cycles);
    lr.weight_stall = stall[l];
    lr.weight_shift = shift[l];
    lr.dma_wait = wait[l];
    lr.act_busy = busy[l];
    lr.program = s;
  }
  return out;
}

namespace {

// A layer with a lookup table (Sigmoid, Tanh, ... compiled into ACTIVATE `lut`) needs FEATURES.LUT.
void require_lut_feature(const Device& device, const nn::QNetwork& net) {
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (!net.layers[i].lut.empty() && (device.info().features & spec::reg::kFeaturesLut) == 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("network layer {} '{}' maps its outputs through a lookup table, but the device has no "
                              "ACTIVATE lookup table (FEATURES.LUT = 0, build parameter EnableLut)",
                              i, net.layers[i].name));
    }
  }
}

}  // namespace

NetworkWeights upload_network_weights(Device& device, const nn::QNetwork& net) {
  require_lut_feature(device, net);
  // The weight and param layouts depend on the layers and ArrayN only: any batch gives them.
  const NetworkPlan p = plan_network(device.info().params, net, 1);
  NetworkWeights w;
  w.array_n = p.array_n;
  w.weight_bytes = p.weight_bytes;
  w.param_bytes = p.param_bytes;
  w.weights = device.alloc(std::max<uint64_t>(p.weight_bytes, 1), kPageAlign);
  w.params = device.alloc(std::max<uint64_t>(p.param_bytes, 1), kPageAlign);
  const std::vector<int8_t> wi = pack_network_weights(p, net);
  const std::vector<int32_t> pi = pack_network_params(p, net);
  device.write(w.weights, 0, wi.data(), wi.size());
  device.write(w.params, 0, pi.data(), pi.size() * 4);
  return w;
}

NetworkBuffers alloc_network_buffers(Device& device, const NetworkPlan& p, bool keep_intermediate) {
  auto alloc = [&](uint64_t bytes) { return device.alloc(std::max<uint64_t>(bytes, 1), kPageAlign); };
  NetworkBuffers b;
  b.input_bytes = p.input_bytes;
  b.spill_bytes = p.spill_bytes;
  b.output_bytes = p.output_bytes;
  b.debug_bytes = keep_intermediate ? p.debug_bytes : 0;
  b.input = alloc(b.input_bytes);
  b.spill = alloc(b.spill_bytes);
  b.output = alloc(b.output_bytes);
  b.debug = alloc(b.debug_bytes);
  return b;
}

NetworkAddresses network_addresses(const NetworkWeights& w, const NetworkBuffers& b) {
  return NetworkAddresses{b.input.addr(), w.weights.addr(), w.params.addr(),
                          b.spill.addr(), b.output.addr(),  b.debug.addr()};
}

namespace {
void check_buffers(const CompiledNetwork& prog, const NetworkBuffers& b) {
  const NetworkPlan& p = prog.plan;
  const uint64_t debug = prog.keep_intermediate ? p.debug_bytes : 0;
  if (b.input_bytes < p.input_bytes || b.spill_bytes < p.spill_bytes || b.output_bytes < p.output_bytes ||
      b.debug_bytes < debug) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("network buffers (input {} spill {} output {} debug {} bytes) are smaller than the "
                            "program's batch {} needs (input {} spill {} output {} debug {})",
                            b.input_bytes, b.spill_bytes, b.output_bytes, b.debug_bytes, p.batch, p.input_bytes,
                            p.spill_bytes, p.output_bytes, debug));
  }
}
}  // namespace

uint32_t submit_network(Device& device, const CompiledNetwork& prog, const NetworkBuffers& buffers,
                        std::span<const int8_t> input_q, const ProgressFn& progress) {
  check_buffers(prog, buffers);
  const std::vector<int8_t> in_img = pack_network_input(prog.plan, input_q);
  device.write(buffers.input, 0, in_img.data(), in_img.size());
  return device.submit(prog.code, progress);
}

void read_network_output(Device& device, const CompiledNetwork& prog, const NetworkBuffers& buffers,
                         NetworkRunResult& r) {
  check_buffers(prog, buffers);
  const NetworkPlan& p = prog.plan;
  r.plan = p;
  if (p.layers.back().final_int32) {
    std::vector<int32_t> img(p.output_bytes / 4);
    device.read(buffers.output, 0, img.data(), p.output_bytes);
    r.output_i32 = unpack_network_output(p, img);
  } else {
    std::vector<int8_t> img(p.output_bytes);
    device.read(buffers.output, 0, img.data(), p.output_bytes);
    r.output_q = unpack_network_tensor(p, img, p.layers.back().n);
  }
  r.layer_outputs.clear();
  if (prog.keep_intermediate) {
    for (size_t t = 1; t < p.layers.size(); ++t) {
      std::vector<int8_t> img(p.mp * p.layers[t].k_blocks * p.array_n);
      device.read(buffers.debug, p.debug_offset[t], img.data(), img.size());
      r.layer_outputs.push_back(unpack_network_tensor(p, img, p.layers[t].k));
    }
  }
}

NetworkRunResult run_network(Device& device, const nn::QNetwork& net, std::span<const int8_t> input_q,
                             uint64_t batch, const NetworkOptions& options) {
  NetworkRunResult r;
  const TraceHook& th = options.trace;
  auto plan_span = th.scope("plan");
  require_lut_feature(device, net);
  r.plan = plan_network(device.info().params, net, batch, options.plan);
  const NetworkPlan& p = r.plan;
  if (input_q.size() != p.batch * p.layers[0].k) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("network input has {} elements, expected batch*k = {}*{}",
                                                         input_q.size(), p.batch, p.layers[0].k));
  }
  const NetworkBuffers buffers = alloc_network_buffers(device, p, options.keep_intermediate);
  plan_span.end();
  auto upload_span = th.scope("upload");
  upload_span.args() = {{"weight_bytes", p.weight_bytes}, {"param_bytes", p.param_bytes}};
  const NetworkWeights weights = upload_network_weights(device, net);
  upload_span.end();
  auto compile_span = th.scope("compile");
  const CompiledNetwork prog = compile_network(p, network_addresses(weights, buffers), options.keep_intermediate);
  r.instructions = prog.code.size() + 1;
  compile_span.args() = {{"instructions", r.instructions}};
  compile_span.end();

  device.clear_perf();
  const ProgressFn progress = detail::fold_progress(device, prog.fold_index, options.progress);
  const uint64_t cyc0 = device.busy_cycles();
  const auto t0 = std::chrono::steady_clock::now();
  auto submit_span = th.scope("submit");
  submit_span.args() = {{"input_bytes", p.input_bytes}, {"instructions", r.instructions}};
  const uint32_t fence = submit_network(device, prog, buffers, input_q, progress);
  submit_span.end();
  auto wait_span = th.scope("wait");
  device.wait(fence, progress);
  wait_span.end();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim_cycles = device.busy_cycles() - cyc0;
  r.sim_cycles_per_s = r.wall_s > 0 ? static_cast<double>(r.sim_cycles) / r.wall_s : 0.0;
  if (options.progress) options.progress(1.0);

  auto read_span = th.scope("read output");
  const size_t nl = p.layers.size();
  read_network_output(device, prog, buffers, r);

  r.perf = device.perf();
  r.cycles = r.perf.cycles;
  r.rd_bytes = r.perf.rd_bytes;
  r.wr_bytes = r.perf.wr_bytes;
  const double peak = static_cast<double>(p.array_n) * static_cast<double>(p.array_n);
  r.layers = attribute_layers(p, prog.layer_stats, r.perf);
  for (size_t l = 0; l < nl; ++l) {
    r.layers[l].name = net.layers[l].name;
    r.macs += batch * p.layers[l].k * p.layers[l].n;
  }
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  read_span.end();
  if (th) {
    const uint64_t start = th.trace->device_program(th.device, th.device_name, fmt::format("int8 network, {} rows", batch),
                                                    r.perf, {{"macs", r.macs}, {"utilization", r.utilization}});
    std::vector<std::pair<std::string, uint64_t>> parts;
    for (const LayerReport& lr : r.layers) parts.emplace_back(fmt::format("layer {}", lr.name), lr.cycles);
    th.trace->device_parts(th.device, th.device_name, start, parts);
  }
  uint64_t wbytes = 0;
  for (const NetworkLayerPlan& lp : p.layers) wbytes += lp.k * lp.n;
  r.min_bytes = wbytes + batch * p.layers[0].k + batch * p.layers.back().n * (p.layers.back().final_int32 ? 4 : 1);
  return r;
}

}  // namespace tpuw::runtime
