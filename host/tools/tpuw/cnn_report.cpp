// The report and the input plumbing of tpuw run's CNN paths (cnn_report.h).
#include "cnn_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <span>
#include <type_traits>

#include "cli_common.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/sim_control.h"
#include "mpi_collective.h"

namespace tpuw::cli {

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

double util(uint64_t macs, unsigned n, uint64_t cycles) {
  return cycles == 0 ? 0.0 : static_cast<double>(macs) / (static_cast<double>(n) * n * static_cast<double>(cycles));
}

std::string pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : fmt::format("{:.0f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

double ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

double images_per_s(const CnnTotals& t) { return t.wall > 0 ? static_cast<double>(t.rows) / t.wall : 0.0; }

}  // namespace

CnnImages load_cnn_images(const std::string& path, const CnnInput& s, const char* what) {
  const npy::Array a = npy::load(path);
  const std::string want = s.image ? fmt::format("[rows, {}, {}, {}] (the model input's shape) or [rows, {}]", s.c, s.h,
                                                 s.w, s.features())
                                   : fmt::format("[rows, {}] (the model input's shape)", s.c);
  auto bad = [&] {
    return Error(ErrorKind::kBadFile, fmt::format("{}: shape {}; {} needs {}", path, npy::shape_string(a.shape), what, want));
  };
  CnnImages r;
  if (!s.image && a.rank() != 2) throw bad();
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

std::vector<CnnInput> cnn_model_inputs(const compiler::Graph& g, const std::string& model) {
  if (g.inputs.size() == 1) {
    const compiler::GraphInput& gi = g.inputs[0];
    const compiler::Value& v = g.value(gi.value);
    const std::vector<int64_t>& d = gi.declared;
    if (!gi.has_shape || d.size() != 4 || d[1] <= 0 || d[2] <= 0 || d[3] <= 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: graph input '{}' has shape {}; a CNN's input is [batch, channels, height, width] with "
                              "known channels, height and width",
                              model, v.name, gi.has_shape ? compiler::dims_string(d) : std::string("unknown")));
    }
  }
  // Several inputs: images [batch, C, H, W] and vectors [batch, F], at least one image.
  std::vector<std::string> names;
  for (const compiler::GraphInput& gi : g.inputs) names.push_back("'" + g.value(gi.value).name + "'");
  std::vector<CnnInput> r;
  for (const compiler::GraphInput& gi : g.inputs) {
    const compiler::Value& v = g.value(gi.value);
    const std::vector<int64_t>& d = gi.declared;
    const bool image = d.size() == 4;
    if (!gi.has_shape || (d.size() != 4 && d.size() != 2) ||
        std::any_of(d.begin() + 1, d.end(), [](int64_t x) { return x <= 0; })) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: graph input '{}' has shape {}; a CNN's inputs ({}) are images [batch, channels, "
                              "height, width] or vectors [batch, features] that join the dense head, with every "
                              "dimension but the batch known",
                              model, v.name, gi.has_shape ? compiler::dims_string(d) : std::string("unknown"),
                              fmt::join(names, ", ")));
    }
    CnnInput s;
    s.name = v.name;
    s.image = image;
    s.c = static_cast<uint64_t>(d[1]);
    s.h = image ? static_cast<uint64_t>(d[2]) : 1;
    s.w = image ? static_cast<uint64_t>(d[3]) : 1;
    r.push_back(std::move(s));
  }
  if (std::none_of(r.begin(), r.end(), [](const CnnInput& s) { return s.image; })) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: a CNN needs an image input [batch, channels, height, width]; "
                                                     "its inputs ({}) are all vectors", model, fmt::join(names, ", ")));
  }
  return r;
}

CnnImages load_cnn_inputs(const std::vector<std::string>& args, std::vector<CnnInput>& ins, const char* flag,
                          bool files) {
  if (ins.size() == 1) {
    if (args.size() != 1) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{} given {} times; the model has one input '{}'", flag,
                                                           args.size(), ins[0].name));
    }
    // FILE, or NAME=FILE with the input's name (a file whose name has a '=' is the file).
    std::string path = args[0];
    std::error_code ec;
    if (const size_t eq = path.find('='); eq != std::string::npos && !fs::exists(path, ec)) {
      if (path.substr(0, eq) != ins[0].name) {
        throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}: the model has no input '{}' (its input is '{}')", flag,
                                                             path, path.substr(0, eq), ins[0].name));
      }
      path = path.substr(eq + 1);
    }
    if (files) ins[0].file = path;
    return load_cnn_images(path, ins[0], flag);
  }
  std::vector<std::string> names;
  for (const CnnInput& s : ins) names.push_back(s.name);
  const std::vector<std::string> path = match_named_inputs(args, names, flag);
  std::vector<CnnImages> part(ins.size());
  uint64_t row = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    part[k] = load_cnn_images(path[k], ins[k], flag);
    if (part[k].rows != part[0].rows) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{} {}={}: {} rows, but input '{}' ({}) has {}; every input of the model shares the "
                              "batch axis (the same row count)", flag, ins[k].name, path[k], part[k].rows, ins[0].name,
                              path[0], part[0].rows));
    }
    if (files) ins[k].file = path[k];
    row += ins[k].features();
  }
  CnnImages r;
  r.rows = part[0].rows;
  r.x.reserve(r.rows * row);
  for (uint64_t i = 0; i < r.rows; ++i) {
    for (size_t k = 0; k < ins.size(); ++k) {
      const uint64_t f = ins[k].features();
      r.x.insert(r.x.end(), part[k].x.begin() + static_cast<std::ptrdiff_t>(i * f),
                 part[k].x.begin() + static_cast<std::ptrdiff_t>((i + 1) * f));
    }
  }
  return r;
}

const CnnInput& first_image(const std::vector<CnnInput>& ins) {
  for (const CnnInput& s : ins) {
    if (s.image) return s;
  }
  return ins.at(0);
}

namespace {
std::string cnn_input_shape(const CnnInput& s) {
  return s.image ? fmt::format("[batch, {}, {}, {}]", s.c, s.h, s.w) : fmt::format("[batch, {}]", s.c);
}
}  // namespace

void print_cnn_inputs(const CnnRunOpts& o, const std::vector<CnnInput>& ins, uint64_t rows, unsigned bytes_per_value) {
  if (ins.size() < 2) return;
  std::vector<std::string> parts;
  for (const CnnInput& s : ins) {
    parts.push_back(fmt::format("'{}' {} ({}) from {} ({} bytes)", s.name, cnn_input_shape(s),
                                s.image ? "image: read by its layers" : "vector: joins the dense head", s.file,
                                rows * s.features() * bytes_per_value));
  }
  fmt::print("{}: {} graph inputs: {}\n", o.model, ins.size(), fmt::join(parts, ", "));
}

json cnn_inputs_json(const std::vector<CnnInput>& ins, uint64_t rows, unsigned bytes_per_value,
                     const std::vector<float>& scales) {
  json a = json::array();
  for (size_t k = 0; k < ins.size(); ++k) {
    const CnnInput& s = ins[k];
    json e = {{"name", s.name},
              {"file", s.file},
              {"kind", s.image ? "image" : "vector"},
              {"shape", s.image ? std::vector<uint64_t>{s.c, s.h, s.w} : std::vector<uint64_t>{s.c}},
              {"features", s.features()},
              {"bytes", rows * s.features() * bytes_per_value}};
    if (k < scales.size()) e["scale"] = scales[k];
    a.push_back(std::move(e));
  }
  return a;
}

std::vector<float> cnn_float_outputs(const compiler::Graph& og, const CnnImages& in, uint64_t features,
                                     uint32_t classes) {
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

void check_output_path(const std::string& output) { check_output("--output", output); }

void check_trace_path(const std::string& trace, const std::string& output) {
  check_output("--trace", trace);
  check_distinct_outputs({{"--output", output}, {"--trace", trace}});
}

void cnn_chunking(const CnnRunOpts& o, CnnTotals& t) {
  if (o.multi) {
    t.chunk = o.batch == 0 ? worker::auto_micro_batch(t.rows, o.devices) : std::min(o.batch, t.rows);
  } else {
    t.chunk = o.batch == 0 ? t.rows : std::min(o.batch, t.rows);
  }
  t.chunks = t.chunk == 0 ? 0 : (t.rows + t.chunk - 1) / t.chunk;
}

CnnRanks cnn_ranks(const CnnRunOpts& o, uint64_t rows) {
  CnnRanks r;
  r.rows = rows;
  if (launched_by_mpirun()) {
    if (!(o.mpi_timeout > 0)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--mpi-timeout {}: must be > 0", o.mpi_timeout));
    }
    r.mpi = open_mpi(o.mpi_timeout);
    r.size = static_cast<uint64_t>(r.mpi->size());
    r.rank = static_cast<uint64_t>(r.mpi->rank());
    r.first = rows * r.rank / r.size;
    r.rows = rows * (r.rank + 1) / r.size - r.first;
    (void)r.mpi->allgather({});  // every rank is up: the wall time starts together
  }
  r.t0 = std::chrono::steady_clock::now();
  return r;
}

namespace {

// A rank's totals for gather_cnn_ranks: the PERF counters, then each layer's counters and MACs, raw
// (the structs are plain counters; every rank runs the same binary).
static_assert(std::is_trivially_copyable_v<PerfCounters> && std::is_trivially_copyable_v<LayerCounters>);

std::vector<uint8_t> totals_bytes(const CnnTotals& t) {
  std::vector<uint8_t> b(sizeof(PerfCounters) + t.layers.size() * (sizeof(LayerCounters) + 8));
  uint8_t* p = b.data();
  std::memcpy(p, &t.perf, sizeof(PerfCounters));
  p += sizeof(PerfCounters);
  for (const LayerRow& l : t.layers) {
    std::memcpy(p, static_cast<const LayerCounters*>(&l), sizeof(LayerCounters));
    std::memcpy(p + sizeof(LayerCounters), &l.macs, 8);
    p += sizeof(LayerCounters) + 8;
  }
  return b;
}

void add_totals_bytes(CnnTotals& t, std::span<const uint8_t> b, size_t rank) {
  if (b.size() != sizeof(PerfCounters) + t.layers.size() * (sizeof(LayerCounters) + 8)) {
    throw Error(ErrorKind::kInternal, fmt::format("MPI: rank {} sent {} bytes of totals", rank, b.size()));
  }
  PerfCounters perf;
  std::memcpy(&perf, b.data(), sizeof(PerfCounters));
  t.perf += perf;
  const uint8_t* p = b.data() + sizeof(PerfCounters);
  for (LayerRow& l : t.layers) {
    LayerCounters c;
    uint64_t macs = 0;
    std::memcpy(&c, p, sizeof(LayerCounters));
    std::memcpy(&macs, p + sizeof(LayerCounters), 8);
    p += sizeof(LayerCounters) + 8;
    l.cycles += c.cycles;
    l.rd_bytes += c.rd_bytes;
    l.wr_bytes += c.wr_bytes;
    l.min_bytes += c.min_bytes;
    l.mxu_active += c.mxu_active;
    l.weight_stall += c.weight_stall;
    l.weight_shift += c.weight_shift;
    l.dma_wait += c.dma_wait;
    l.act_busy += c.act_busy;
    l.instructions += c.instructions;
    l.vector_cycles += c.vector_cycles;
    l.macs += macs;
  }
}

}  // namespace

std::vector<std::vector<uint8_t>> gather_cnn_ranks(const CnnRunOpts& o, CnnRanks& r, CnnTotals& t,
                                                   const std::vector<std::span<const uint8_t>>& parts,
                                                   const std::string& error, ErrorKind kind, runtime::Trace* trace) {
  json head = {{"rank", r.rank}, {"first_row", r.first}, {"rows", r.rows}};
  std::string err = error;
  if (!o.inject_rank_fail.empty() && std::stoull(o.inject_rank_fail) == r.rank) {
    if (o.inject_rank_fail.ends_with(":exit")) std::_Exit(1);  // dies without a word: the others time out
    err = "injected failure (--inject-rank-failure)";
    kind = ErrorKind::kDeviceFault;
  }
  std::vector<uint8_t> bytes;
  if (!err.empty()) {
    head["error"] = err;
    head["kind"] = static_cast<int>(kind);
  } else {
    // The layers' names and shapes (a rank with no images has none) and the figures of the line.
    json meta = json::array();
    for (const LayerRow& l : t.layers) meta.push_back({l.name, l.kind, l.shape, l.relu});
    head["layers"] = meta;
    head["cycles"] = t.perf.cycles;
    head["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.t0).count();
    head["devices"] = o.multi ? o.devices : 1u;
    head["micro_batches"] = t.chunks;
    head["micro_batch"] = t.chunk;
    if (t.strategy) head["overlap"] = t.strategy->overlap;
    head["macs"] = t.macs;
    head["min_bytes"] = t.min_bytes;
    head["instructions"] = t.instructions;
    head["failures"] = t.failures;
    head["events"] = t.events;
    if (trace != nullptr) head["trace"] = trace->to_json();
    bytes = totals_bytes(t);
    json sizes = json::array();
    sizes.push_back(bytes.size());
    for (const std::span<const uint8_t>& p : parts) {
      sizes.push_back(p.size());
      bytes.insert(bytes.end(), p.begin(), p.end());
    }
    head["sizes"] = sizes;
  }
  const std::vector<std::vector<uint8_t>> all = r.mpi->allgather(pack_rank(head, bytes));
  const double job_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.t0).count();
  std::vector<std::pair<json, std::span<const uint8_t>>> msgs;
  for (size_t k = 0; k < all.size(); ++k) {
    msgs.push_back(unpack_rank(all[k], k));
    const json& h = msgs.back().first;
    if (h.contains("error")) {
      throw Error(static_cast<ErrorKind>(h["kind"].get<int>()), fmt::format("rank {}: {}", k, h["error"].get<std::string>()));
    }
    const auto sizes = h["sizes"].get<std::vector<uint64_t>>();
    uint64_t sum = 0;
    for (const uint64_t s : sizes) sum += s;
    if (sizes.size() != parts.size() + 1 || sum != msgs.back().second.size()) {
      throw Error(ErrorKind::kInternal, fmt::format("MPI: rank {} sent {} parts in {} bytes", k, sizes.size(),
                                                    msgs.back().second.size()));
    }
  }
  if (!r.root()) return {};
  // ---- rank 0: every rank's parts in rank order, the totals summed ------------------------------
  std::vector<std::vector<uint8_t>> out(parts.size());
  std::vector<json> traces;
  // --batch (or the automatic micro-batch): the first rank's that had images (rank 0 has none
  // when there are fewer images than ranks).
  uint64_t chunk = t.chunk;
  for (const auto& m : msgs) {
    if (chunk != 0) break;
    chunk = m.first.value("micro_batch", uint64_t{0});
  }
  t = CnnTotals(t.convs, t.layers.size() - t.convs, 0, 0);
  t.chunk = chunk;
  for (size_t k = 0; k < msgs.size(); ++k) {
    json& h = msgs[k].first;
    const std::span<const uint8_t> b = msgs[k].second;
    const auto sizes = h["sizes"].get<std::vector<uint64_t>>();
    add_totals_bytes(t, b.subspan(0, sizes[0]), k);
    uint64_t at = sizes[0];
    for (size_t i = 0; i < parts.size(); ++i) {
      out[i].insert(out[i].end(), b.begin() + static_cast<std::ptrdiff_t>(at),
                    b.begin() + static_cast<std::ptrdiff_t>(at + sizes[i + 1]));
      at += sizes[i + 1];
    }
    const json& meta = h["layers"];
    for (size_t i = 0; i < t.layers.size() && i < meta.size(); ++i) {
      LayerRow& l = t.layers[i];
      if (l.name.empty() && !meta[i][0].get<std::string>().empty()) {
        l.name = meta[i][0].get<std::string>();
        l.kind = meta[i][1].get<std::string>();
        l.shape = meta[i][2].get<std::string>();
        l.relu = meta[i][3].get<bool>();
      }
    }
    t.rows += h["rows"].get<uint64_t>();
    t.chunks += h["micro_batches"].get<uint64_t>();
    t.macs += h["macs"].get<uint64_t>();
    t.min_bytes += h["min_bytes"].get<uint64_t>();
    t.instructions += h["instructions"].get<uint64_t>();
    t.failures += h["failures"].get<uint64_t>();
    for (const json& e : h["events"]) t.events.push_back(fmt::format("rank {}: {}", k, e.get<std::string>()));
    traces.push_back(h.value("trace", json::object({{"traceEvents", json::array()}})));
    for (const char* key : {"sizes", "layers", "macs", "min_bytes", "instructions", "events", "trace"}) h.erase(key);
    t.ranks.push_back(std::move(h));
  }
  t.wall = job_wall;
  if (trace != nullptr) stage_trace(*o.outputs, o.trace, runtime::merge_rank_traces(traces));
  return out;
}

void trace_cnn_program(runtime::Trace* trace, Device& dev, unsigned device, const std::string& name,
                       const PerfCounters& perf) {
  if (trace == nullptr || perf.cycles == 0) return;
  trace->device_program(device, runtime::trace_device_name(dev), name, perf);
}

unsigned run_cnn_batches(const CnnRunOpts& o, CnnTotals& t, uint64_t memory, const CnnRunFn& run,
                         const CnnAbsorbFn& absorb, runtime::Trace* trace) {
  if (!o.inject_fault.empty() && !o.multi) {
    throw Error(ErrorKind::kInvalidArgument, "--inject-fault needs --devices");
  }
  if (!o.multi) {
    BackendConfig bc;
    bc.array_n = o.array_n;
    bc.memory.size = memory;
    const runtime::Trace::Track main = trace != nullptr ? trace->host_thread("main") : runtime::Trace::Track{};
    auto open_span = runtime::Trace::scope(trace, main, "open device");
    Device dev = Device::open(o.backend, bc);
    open_span.end();
    for (uint64_t j = 0; j < t.chunks; ++j) {
      const uint64_t r0 = j * t.chunk, n = std::min(t.chunk, t.rows - r0);
      auto span = runtime::Trace::scope(trace, main, fmt::format("batch {} ({} rows)", j, n));
      const auto t0 = std::chrono::steady_clock::now();
      run(dev, 0, j, r0, n);
      t.wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      span.end();
      absorb(j, r0, n);
    }
    return dev.info().params.array_n;
  }
  // --inject-fault J (tests): the device that runs micro-batch J first gets a memory fault just
  // before it (its next access answers with an error), once; the Worker resets that device and runs
  // the whole task (its range of micro-batches) again on another device. Tasks are not pinned, so
  // the micro-batch, not the device, names the fault.
  std::optional<uint64_t> fault;
  if (!o.inject_fault.empty()) {
    try {
      size_t used = 0;
      fault = std::stoull(o.inject_fault, &used);
      if (used != o.inject_fault.size()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--inject-fault {}: expected a micro-batch number", o.inject_fault));
    }
    if (*fault >= t.chunks) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("--inject-fault {}: the run has {} micro-batches", o.inject_fault, t.chunks));
    }
  }
  worker::WorkerOptions wo;
  wo.backend = o.backend;
  wo.config.array_n = o.array_n;
  wo.config.memory.size = memory;
  wo.devices = o.devices;
  const runtime::Trace::Track main = trace != nullptr ? trace->host_thread("main") : runtime::Trace::Track{};
  auto open_span = runtime::Trace::scope(trace, main, fmt::format("open {} devices", wo.devices));
  worker::Worker w(wo);
  open_span.end();
  auto run_span =
      runtime::Trace::scope(trace, main, fmt::format("{} images on {} devices (data)", t.rows, w.size()));
  std::atomic<bool> fired{false};
  worker::StrategyReport rep = worker::run_micro_batches(
      w, t.rows, t.chunk,
      [&](worker::DeviceSlot& slot, uint64_t j, uint64_t r0, uint64_t n) {
        if (fault && j == *fault && !fired.exchange(true)) {
          if (SimControl* sim = slot.device.backend().sim_control()) sim->inject_memory_fault(true);
        }
        return run(slot.device, slot.index, j, r0, n);
      },
      trace);
  run_span.end();
  t.events = w.events();
  for (const worker::DeviceStats& st : w.stats()) t.failures += st.failures;
  // Every device has the configuration's ARRAY_N; ask one (a device thread owns it): the report's N.
  const unsigned array_n =
      w.submit([](worker::DeviceSlot& slot) { return slot.device.info().params.array_n; }).get();
  for (uint64_t j = 0; j < t.chunks; ++j) {
    const uint64_t r0 = j * t.chunk;
    absorb(j, r0, std::min(t.chunk, t.rows - r0));
  }
  t.wall = rep.wall_s;
  t.strategy = std::move(rep);
  return array_n;
}

uint64_t cnn_memory_size(uint64_t need, uint64_t rows) {
  need += 8ull << 20;
  const uint64_t mem = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (mem > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("a batch of {} images needs {} MiB of host memory; use a smaller --batch", rows, need >> 20));
  }
  return mem;
}

CnnTotals::CnnTotals(size_t conv_layers, size_t dense_layers, uint64_t rows_, uint64_t batch)
    : layers(conv_layers + dense_layers), convs(conv_layers), rows(rows_) {
  chunk = batch == 0 ? rows : std::min<uint64_t>(batch, rows);
  chunks = chunk == 0 ? 0 : (rows + chunk - 1) / chunk;  // 0: a rank with no images (mpirun, rows < P)
}

void CnnTotals::add_conv(size_t i, const std::string& name, const nn::ConvGeometry& gm, bool relu, bool host,
                         uint64_t layer_macs, const PerfCounters& p, uint64_t layer_min_bytes,
                         uint64_t layer_instructions, bool max_pool) {
  LayerRow& t = layers[i];
  t.name = name;
  t.kind = host ? "maxpool_host" : max_pool ? "maxpool" : "conv";
  t.shape = fmt::format("{}x{}x{}>{}x{}x{} k{}x{}/{}", gm.in_c, gm.in_h, gm.in_w, gm.out_c, gm.out_h(), gm.out_w(),
                        gm.kernel_h, gm.kernel_w, gm.stride_h);
  t.relu = relu;
  t.macs += layer_macs;
  t.add(p, layer_min_bytes, layer_instructions);
  perf += p;
  min_bytes += layer_min_bytes;
  instructions += layer_instructions;
}

void CnnTotals::add_dense(size_t i, const runtime::LayerReport& lr, const std::string& name, bool relu) {
  LayerRow& t = layers[convs + i];
  t.name = lr.name.empty() ? name : lr.name;
  t.kind = "dense";
  t.shape = fmt::format("{}x{}x{}", chunk, lr.k, lr.n);
  t.relu = relu;
  t.macs += lr.m * lr.k * lr.n;
  t.add(lr);
}

void CnnTotals::add_head(const PerfCounters& p, uint64_t head_min_bytes, uint64_t head_instructions) {
  perf += p;
  min_bytes += head_min_bytes;
  instructions += head_instructions;
}

json FloatAgreement::check_json() const {
  return json{{"cpu", "equal"},
              {"float_max_abs_diff", max_diff},
              {"float_max_abs", max_abs},
              {"float_argmax_agreement", class_scores ? json(argmax) : json(nullptr)}};
}

std::string named_output_file(const std::string& output, const std::string& name) {
  if (output.empty()) return output;
  std::string n = name;
  for (char& c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) c = '_';
  }
  const std::filesystem::path p(output);
  const std::string stem = p.extension() == ".npy" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / fmt::format("{}.{}.npy", stem, n)).string();
}

std::string FloatAgreement::argmax_phrase() const {
  return class_scores ? fmt::format(", argmax agrees on {:.2f}% of the rows", 100.0 * argmax) : std::string();
}

FloatAgreement compare_with_float(const std::vector<float>& y, const std::vector<float>& yf, uint32_t classes,
                                  bool class_scores) {
  FloatAgreement f;
  f.class_scores = class_scores;
  for (size_t i = 0; i < y.size(); ++i) {
    f.max_diff = std::max(f.max_diff, std::fabs(static_cast<double>(y[i]) - yf[i]));
    f.max_abs = std::max(f.max_abs, std::fabs(static_cast<double>(yf[i])));
  }
  if (!class_scores) return f;
  const auto pd = nn::argmax_rows(y, classes), pf = nn::argmax_rows(yf, classes);
  uint64_t same = 0;
  for (size_t i = 0; i < pd.size(); ++i) same += pd[i] == pf[i];
  f.argmax = ratio(same, pd.size());
  return f;
}

json cnn_json(const CnnRunOpts& o, const char* precision, unsigned array_n, const CnnTotals& t,
              const std::vector<CnnInput>& ins, uint32_t classes, const std::string& host_op) {
  const CnnInput& in = first_image(ins);
  json j;
  j["model"] = o.model;
  j["input"] = o.input;
  j["tpuw_version"] = version_string();
  j["backend"] = o.backend;
  j["precision"] = precision;
  j["array_n"] = array_n;
  j["model_kind"] = "cnn";
  j["rows"] = t.rows;
  j["batch"] = t.chunk;
  j["batches"] = t.chunks;
  if (ins.size() == 1) {
    j["input_shape"] = {in.c, in.h, in.w};
  } else {
    json shapes = json::object();  // every input by name: an image [C, H, W], a vector [C]
    for (const CnnInput& s : ins) shapes[s.name] = s.image ? json{s.c, s.h, s.w} : json{s.c};
    j["input_shape"] = shapes;
  }
  j["input_features"] = in.features();
  j["output_features"] = classes;
  j["host_op"] = host_op;
  if (!t.ranks.empty()) {
    // mpirun: the dense path's keys (ranks, devices, wall_s, per_rank); the per-layer figures below
    // are summed over every rank.
    j["ranks"] = t.ranks.size();
    j["devices"] = o.multi ? o.devices : 1u;
    j["per_rank"] = t.ranks;
    if (t.failures > 0) {
      j["failures"] = t.failures;
      j["events"] = t.events;
    }
  }
  if (t.strategy) {
    // --devices: the dense path's keys (devices, strategy, wall_s, overlap, micro_batch, ...,
    // per_device); the per-layer figures below are summed over every device.
    const json rep = strategy_report_json(*t.strategy, array_n);
    for (auto it = rep.begin(); it != rep.end(); ++it) j[it.key()] = it.value();
    j["failures"] = t.failures;
    j["events"] = t.events;
  }
  return j;
}

void add_cnn_json_results(json& j, const CnnRunOpts& o, const char* precision, unsigned array_n, const CnnTotals& t,
                          size_t label_rows, double acc_dev, double acc_float, const json& check) {
  const bool bf16 = std::string_view(precision) == "bf16";
  json jl = json::array();
  for (const LayerRow& r : t.layers) {
    jl.push_back({{"name", r.name}, {"kind", r.kind}, {"shape", r.shape}, {"macs", r.macs}, {"relu", r.relu},
                  {"cycles", r.cycles}, {"utilization", util(r.macs, array_n, r.cycles)}, {"rd_bytes", r.rd_bytes},
                  {"wr_bytes", r.wr_bytes}, {"min_bytes", r.min_bytes},
                  {"bytes_vs_min", ratio(r.rd_bytes + r.wr_bytes, r.min_bytes)}, {"mxu_active", r.mxu_active},
                  {"weight_stall", r.weight_stall}, {"weight_shift", r.weight_shift}, {"dma_wait", r.dma_wait},
                  {"act_busy", r.act_busy}, {"instructions", r.instructions},
                  {"energy_uj", runtime::estimate_energy(r.perf(), array_n, bf16, o.table).total_pj() * 1e-6}});
  }
  j["layers"] = jl;
  j["cycles"] = t.perf.cycles;
  j["cycles_per_image"] = ratio(t.perf.cycles, t.rows);
  j["utilization"] = util(t.macs, array_n, t.perf.cycles);
  j["macs"] = t.macs;
  j["rd_bytes"] = t.perf.rd_bytes;
  j["wr_bytes"] = t.perf.wr_bytes;
  j["min_bytes"] = t.min_bytes;
  j["instructions"] = t.instructions;
  j["wall_s"] = t.wall;
  j["images_per_s"] = images_per_s(t);
  j["sim_hz"] = t.wall > 0 ? static_cast<double>(t.perf.cycles) / t.wall : 0.0;
  j["perf"] = perf_json(t.perf);
  const runtime::Energy energy = runtime::estimate_energy(t.perf, array_n, bf16, o.table);
  add_energy_json(j, energy, t.macs, o.table);
  const double joules = energy.total_pj() * 1e-12;
  j["images_per_j"] = joules > 0 ? static_cast<double>(t.rows) / joules : 0.0;
  if (label_rows > 0) {
    j["accuracy"] = {{"labels", o.labels}, {"rows", label_rows}, {precision, acc_dev}, {"float", acc_float}};
  } else {
    j["accuracy"] = nullptr;
  }
  j["check"] = check;
  j["output"] = o.output.empty() ? json(nullptr) : json(o.output);
}

void print_cnn_header(const CnnRunOpts& o, const std::vector<CnnInput>& ins, size_t conv_layers, size_t dense_layers,
                      const std::string& host_op, const std::string& output) {
  std::vector<std::string> parts;
  for (const CnnInput& in : ins) parts.push_back(fmt::format("'{}' {}", in.name, cnn_input_shape(in)));
  fmt::print("{}: input{} {} -> {} convolution/pooling layer{} + {} dense layer{}{} -> {}\n", o.model,
             ins.size() == 1 ? "" : "s", fmt::join(parts, ", "), conv_layers, conv_layers == 1 ? "" : "s", dense_layers,
             dense_layers == 1 ? "" : "s", host_op == "softmax" ? " -> softmax (host)" : "", output);
}

void print_cnn_layers(const CnnRunOpts& o, const char* precision, unsigned array_n, const CnnTotals& t) {
  // PERF_RD_BYTES / PERF_WR_BYTES of every program (the dense head's per-layer bytes leave out its
  // FENCE and shared fetches, so the layers may add up to a little less).
  const uint64_t rd = t.perf.rd_bytes, wr = t.perf.wr_bytes;
  if (!t.ranks.empty()) {
    // mpirun: the images in contiguous blocks over the ranks, each rank's line, the table summed.
    const unsigned k = o.multi ? o.devices : 1u;
    fmt::print("{} images on {} ranks x {} device{} ({}, N={}), images split in contiguous blocks: {} cycles ({:.0f} per "
               "image), utilization {:.3f}, wall {:.3f} s, {:.1f} images/s\n",
               t.rows, t.ranks.size(), k, k == 1 ? "" : "s", o.backend, array_n, t.perf.cycles,
               ratio(t.perf.cycles, t.rows), util(t.macs, array_n, t.perf.cycles), t.wall, images_per_s(t));
    for (const json& h : t.ranks) {
      const auto n = h["rows"].get<uint64_t>(), a = h["first_row"].get<uint64_t>();
      const double w = h["wall_s"].get<double>();
      const std::string images = n == 0 ? std::string("no images") : fmt::format("images {}-{} ({})", a, a + n - 1, n);
      fmt::print("  rank {}: {}, {} micro-batch{}, {} cycles, wall {:.3f} s, {:.1f} images/s{}\n",
                 h["rank"].get<uint64_t>(), images, h["micro_batches"].get<uint64_t>(),
                 h["micro_batches"].get<uint64_t>() == 1 ? "" : "es", h["cycles"].get<uint64_t>(), w,
                 w > 0 ? static_cast<double>(n) / w : 0.0,
                 h.contains("overlap") ? fmt::format(", overlap {:.2f}", h["overlap"].get<double>()) : "");
    }
    for (const std::string& e : t.events) fmt::print("  {}\n", e);
  } else {
    fmt::print("{} images on {} (N={}) in {} batch{} of {}: {} cycles ({:.0f} per image), utilization {:.3f}, wall "
               "{:.3f} s, {:.1f} images/s\n",
               t.rows, o.backend, array_n, t.chunks, t.chunks == 1 ? "" : "es", t.chunk, t.perf.cycles,
               ratio(t.perf.cycles, t.rows), util(t.macs, array_n, t.perf.cycles), t.wall, images_per_s(t));
    if (t.strategy) {
      const worker::StrategyReport& r = *t.strategy;
      fmt::print("  on {} device{}, strategy {} (micro-batches of {} images): overlap {:.2f} (sum of busy time / (devices "
                 "x wall))\n",
                 r.devices, r.devices == 1 ? "" : "s", r.strategy, r.micro_batch, r.overlap);
      print_strategy_report(r, array_n);
      if (t.failures > 0) {
        // What the Worker did about them (each failed task ran again, the output is the fault-free one).
        for (const std::string& e : t.events) fmt::print("  {}\n", e);
      }
    }
  }
  fmt::print("  {:<3} {:<28} {:<26} {:>10} {:>6} {:>10} {:>10} {:>10} {:>6}  {}\n", "#", "layer", "shape", "cycles",
             "util", "rd bytes", "wr bytes", "min bytes", "x min", "cycles went to: mxu / w-stall / w-shift / dma-wait / act");
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerRow& r = t.layers[i];
    std::string name = r.name + (r.relu ? " +relu" : "") + (r.kind == "maxpool_host" ? " [host]" : "");
    if (name.size() > 28) name = name.substr(0, 25) + "...";
    if (r.kind == "maxpool_host") {
      fmt::print("  {:<3} {:<28} {:<26} {:>10}  {} max on the host between device programs (exact; no device bytes)\n",
                 i, name, r.shape, "-", precision);
      continue;
    }
    fmt::print("  {:<3} {:<28} {:<26} {:>10} {:>6.3f} {:>10} {:>10} {:>10} {:>6.2f}  {} / {} / {} / {} / {}\n", i, name,
               r.shape, r.cycles, util(r.macs, array_n, r.cycles), r.rd_bytes, r.wr_bytes, r.min_bytes,
               ratio(r.rd_bytes + r.wr_bytes, r.min_bytes), pct(r.mxu_active, r.cycles), pct(r.weight_stall, r.cycles),
               pct(r.weight_shift, r.cycles), pct(r.dma_wait, r.cycles), pct(r.act_busy, r.cycles));
  }
  fmt::print("  total: {} cycles; mxu_active {} weight_stall {} weight_shift {} dma_wait {} act_busy {} instret {}; "
             "bytes read {} written {} (minimum {}, {:.2f}x)\n",
             t.perf.cycles, t.perf.mxu_active, t.perf.weight_stall, t.perf.weight_shift, t.perf.dma_wait,
             t.perf.act_busy, t.perf.instret, rd, wr, t.min_bytes, ratio(rd + wr, t.min_bytes));
  const runtime::Energy energy =
      runtime::estimate_energy(t.perf, array_n, std::string_view(precision) == "bf16", o.table);
  const double joules = energy.total_pj() * 1e-12;
  fmt::print("  energy: {}, {:.3g} TOPS/W, {:.3g} images/J (docs/energy.md)\n", runtime::energy_line(energy),
             runtime::tops_per_watt(t.macs, energy), joules > 0 ? static_cast<double>(t.rows) / joules : 0.0);
}

void print_cnn_tail(const CnnRunOpts& o, const char* precision, size_t label_rows, double acc_dev, double acc_float,
                    const std::string& check_line, const std::vector<uint64_t>& out_shape) {
  if (label_rows > 0) {
    fmt::print("accuracy on {} ({} rows): {} on {} {:.2f}%, float model {:.2f}% ({:+.2f} points)\n", o.labels,
               label_rows, precision, o.backend, 100.0 * acc_dev, 100.0 * acc_float, 100.0 * (acc_dev - acc_float));
  }
  if (!check_line.empty()) fmt::print("{}\n", check_line);
  if (!o.output.empty()) fmt::print("output -> {} (float32, {})\n", o.output, npy::shape_string(out_shape));
}

}  // namespace tpuw::cli
