// Shared tpuw options and the strategy report (cli_common.h).
#include "cli_common.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/numerics.h"
#include "tpuw/sim_control.h"
#include "tpuw/spec.h"

namespace tpuw::cli {

CLI::Validator unsigned_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (!s.empty() && s.front() == '-') return fmt::format("{}: must not be negative", s);
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc::result_out_of_range) return fmt::format("{}: larger than 2^64 - 1", s);
        if (ec != std::errc() || end != s.data() + s.size()) return fmt::format("{}: not an unsigned integer", s);
        return {};
      },
      "UINT");
}

CLI::Validator signed_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc::result_out_of_range) return fmt::format("{}: outside [-2^63, 2^63 - 1]", s);
        if (ec != std::errc() || end != s.data() + s.size()) return fmt::format("{}: not an integer", s);
        return {};
      },
      "INT");
}

std::string version_string() {
  return fmt::format("tpuw {} (ISA {}.{})", TPUW_VERSION, spec::kVersionMajor, spec::kVersionMinor);
}

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kBadFile:
    case ErrorKind::kAsmSyntax:
    case ErrorKind::kUnsupported: return kBadInput;
    case ErrorKind::kMismatch: return kMismatchExit;
    case ErrorKind::kDeviceFault:
    case ErrorKind::kTimeout: return kDeviceExit;
    case ErrorKind::kCancelled:
    case ErrorKind::kResource:
    case ErrorKind::kInternal: return kOther;
  }
  return kOther;
}
namespace {

std::string describe_backend(const std::string& name) {
  if (name == "rtl") return "rtl (verilated RTL, cycle-accurate)";
  if (name == "ref") return "ref (C++ reference model)";
  if (name == "serial") return "serial (UART link to an FPGA board, or the in-process simulated board)";
  return name;
}

double utilization(uint64_t macs, uint32_t n, uint64_t cycles) {
  return cycles == 0 ? 0.0 : static_cast<double>(macs) / (static_cast<double>(n) * n * static_cast<double>(cycles));
}

}  // namespace

CLI::Option* add_backend_option(CLI::App* sub, std::string& backend) {
  const std::vector<std::string> names = backend_names();
  std::vector<std::string> described;
  for (const std::string& n : names) described.push_back(describe_backend(n));
  return sub->add_option("--backend", backend, fmt::format("device backend: {}", fmt::join(described, ", ")))
      ->check(CLI::IsMember(names))
      ->capture_default_str();
}

void add_multi_options(CLI::App* sub, MultiOpts& m, const std::vector<std::string>& strategies, const std::string& help) {
  m.devices_opt = sub->add_option("--devices", m.devices, "number of devices (each on its own thread)")
                      ->check(unsigned_check() & CLI::Range(1u, kMaxDevices))
                      ->capture_default_str();
  sub->add_option("--strategy", m.strategy, help)->check(CLI::IsMember(strategies));
}

bool multi_selected(const MultiOpts& m) { return m.devices > 1 || !m.strategy.empty(); }

void add_device_options(CLI::App* sub, DeviceOpts& o, bool wave) {
  add_backend_option(sub, o.backend);
  o.array_n_opt = sub->add_option("--array-n", o.array_n, "MXU size N of the device configuration (N x N array)")
                      ->check(unsigned_check())
                      ->capture_default_str();
  sub->add_flag("--json", o.json, "print one JSON object instead of the human-readable report");
  if (wave) {
    sub->add_option("--wave", o.wave, "rtl only: write an FST waveform to this file");
    sub->add_option("--wave-from", o.wave_from, "first device cycle traced")->check(unsigned_check())->capture_default_str();
    sub->add_option("--wave-to", o.wave_to, "last device cycle traced (default: to the end)")->check(unsigned_check());
  }
}

unsigned device_array_n(const Device& dev, unsigned requested, bool given) {
  const unsigned n = dev.info().params.array_n;
  if (given && n != requested) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--array-n {}: the {} device has ARRAY_N {} (read from its registers); leave out --array-n "
                            "or give --array-n {}",
                            requested, dev.info().backend, n, n));
  }
  return n;
}

BackendConfig backend_config(const DeviceOpts& o, uint64_t mem_bytes) {
  BackendConfig c;
  c.array_n = o.array_n;
  c.memory.size = mem_bytes;
  c.wave_path = o.wave;
  c.wave_from = o.wave_from;
  c.wave_to = o.wave_to;
  if (!o.wave.empty() && o.multi.devices > 1) {
    throw Error(ErrorKind::kInvalidArgument, "--wave traces one device: it cannot be combined with --devices > 1");
  }
  if (!o.wave.empty() && o.backend != "rtl") {
    throw Error(ErrorKind::kInvalidArgument, "--wave needs --backend rtl (the ref model has no signals)");
  }
  if (o.wave_to < o.wave_from) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--wave-to {} is before --wave-from {}", o.wave_to, o.wave_from));
  }
  return c;
}

void write_file(const std::filesystem::path& p, std::span<const uint8_t> bytes) { write_file_atomic(p, bytes); }

void check_output(const std::string& option, const std::string& path) {
  if (!path.empty()) tpuw::check_output_path(path, option);
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& option_paths) {
  std::vector<std::pair<std::filesystem::path, const std::pair<std::string, std::string>*>> seen;
  for (const auto& op : option_paths) {
    if (op.second.empty()) continue;
    std::error_code ec;
    std::filesystem::path p = std::filesystem::weakly_canonical(op.second, ec);
    if (ec) p = std::filesystem::absolute(op.second, ec).lexically_normal();
    for (const auto& [q, first] : seen) {
      if (q == p) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("{} {}: the same file as {}", op.first, op.second, first->first));
      }
    }
    seen.emplace_back(p, &op);
  }
}

void stage_npy(OutputSet& outs, const std::string& path, const npy::Array& a) {
  outs.add(path, npy::serialize(a), "the .npy file");
}

void stage_trace(OutputSet& outs, const std::string& path, const nlohmann::ordered_json& trace) {
  outs.add(path, std::string_view(trace.dump(1) + "\n"), "the trace file");
}

namespace {

// ---- signals ------------------------------------------------------------------------------------
// The staged waveform's files, for the SIGBUS handler: fixed buffers filled before the FST writer
// starts, read by the handler with async-signal-safe calls only (unlink, rmdir, write, _exit).
constexpr size_t kSignalPathMax = 4096;
char g_wave_file[kSignalPathMax];
char g_wave_hier[kSignalPathMax];
char g_wave_dir[kSignalPathMax];
volatile std::sig_atomic_t g_wave_staged = 0;
volatile std::sig_atomic_t g_file_size_exceeded = 0;

void on_sigxfsz(int) { g_file_size_exceeded = 1; }

// Verilator's FST writer (gtkwave fstapi.c) mmaps temporaries after fwrite()s it never checks: past
// `ulimit -f` or on a full disk the file stays shorter than the mapping and the first access beyond
// its end raises SIGBUS. Nothing can be recovered inside the writer, so the handler removes the
// staged files (all ours: they live in our private directory) and exits 1 with a message instead
// of dying with a core and leaving w.fst and w.fst.hier behind.
void on_sigbus(int) {
  if (g_wave_staged != 0) {
    (void)::unlink(g_wave_file);
    (void)::unlink(g_wave_hier);
    (void)::rmdir(g_wave_dir);
  }
  static const char kMsg[] =
      "tpuw: error: bus error (SIGBUS) writing a memory-mapped file: the FST waveform writer (--wave) ran past the "
      "file size limit (ulimit -f) or out of disk space; no waveform was written\n";
  (void)!::write(2, kMsg, sizeof kMsg - 1);
  ::_exit(kOther);
}

bool copy_path(char* dst, const std::string& src) {
  if (src.size() + 1 > kSignalPathMax) return false;
  std::memcpy(dst, src.c_str(), src.size() + 1);
  return true;
}

// Free bytes for this process on the file system holding `dir` (root may use the reserved blocks).
uint64_t free_bytes(const std::filesystem::path& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return UINT64_MAX;  // unknown: not refused here
  const uint64_t blocks = ::geteuid() == 0 ? v.f_bfree : v.f_bavail;
  return blocks * v.f_frsize;
}

std::filesystem::path dir_of(const std::string& path) {
  const std::filesystem::path d = std::filesystem::path(path).parent_path();
  return d.empty() ? std::filesystem::path(".") : d;
}

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_sigxfsz;
  ::sigaction(SIGXFSZ, &sa, nullptr);
  sa.sa_flags = 0;
  sa.sa_handler = on_sigbus;
  ::sigaction(SIGBUS, &sa, nullptr);
}

StagedOutput* stage_wave(OutputSet& outs, DeviceOpts& o) {
  if (o.wave.empty()) return nullptr;
  tpuw::check_output_path(o.wave, "--wave");
  // Before the writer starts, the limits it cannot survive (see on_sigbus): a file size limit or
  // free space below kWaveMinBytes in FILE's directory or in /tmp (where the writer's tmpfile()s
  // go). Later failures are caught by finish_wave() and, for the mmap'ed files, on_sigbus.
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < kWaveMinBytes) {
    throw Error(ErrorKind::kResource,
                fmt::format("--wave {}: the file size limit (ulimit -f) is {} bytes; a waveform needs at least {} "
                            "MiB (raise the limit or leave out --wave); nothing was run",
                            o.wave, static_cast<uint64_t>(rl.rlim_cur), kWaveMinBytes >> 20));
  }
  for (const std::filesystem::path& d : {dir_of(o.wave), std::filesystem::path("/tmp")}) {
    const uint64_t f = free_bytes(d);
    if (f < kWaveMinBytes) {
      throw Error(ErrorKind::kResource,
                  fmt::format("--wave {}: only {} KiB free on the file system of {}; a waveform needs at least {} MiB "
                              "there; nothing was run",
                              o.wave, f >> 10, d.string(), kWaveMinBytes >> 20));
    }
  }
  StagedOutput& s = outs.add_staged(o.wave, "--wave");
  const std::string file = s.path().string();
  if (copy_path(g_wave_file, file) && copy_path(g_wave_hier, file + ".hier") && copy_path(g_wave_dir, s.dir().string())) {
    g_wave_staged = 1;
  }
  o.wave = file;
  return &s;
}

void finish_wave(Device& dev, const StagedOutput* wave) {
  if (wave == nullptr) return;
  if (SimControl* sim = dev.backend().sim_control()) sim->stop_wave();  // the FST writer closes the file
  g_wave_staged = 0;
  const std::string t = wave->target().string();
  if (g_file_size_exceeded != 0) {
    throw Error(ErrorKind::kResource,
                fmt::format("--wave {}: a write went past the file size limit (ulimit -f); the waveform would be "
                            "incomplete and is not written",
                            t));
  }
  // The FST writer does not check its writes: a disk that is full now may have cut the file short.
  for (const std::filesystem::path& d : {wave->dir(), std::filesystem::path("/tmp")}) {
    if (free_bytes(d) == 0) {
      throw Error(ErrorKind::kResource,
                  fmt::format("--wave {}: the file system of {} is full; the waveform may be incomplete and is not "
                              "written",
                              t, d.string()));
    }
  }
}

nlohmann::ordered_json perf_json(const PerfCounters& p) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [name, v] : p.items()) j[std::string(name)] = v;
  return j;
}

PerfCounters LayerCounters::perf() const {
  PerfCounters p;
  p.cycles = cycles;
  p.mxu_active = mxu_active;
  p.weight_stall = weight_stall;
  p.weight_shift = weight_shift;
  p.dma_wait = dma_wait;
  p.act_busy = act_busy;
  p.instret = instructions;
  p.rd_bytes = rd_bytes;
  p.wr_bytes = wr_bytes;
  return p;
}

void add_energy_option(CLI::App* sub, std::string& path) {
  sub->add_option("--energy-table", path,
                  "JSON object of picojoules per event overriding the energy model's defaults (Horowitz, ISSCC 2014, "
                  "45 nm): int8_mac_pj, bf16_mac_pj, vector_op_pj, sram_byte_pj, acc_byte_pj, dram_byte_pj, source; "
                  "docs/energy.md");
}

runtime::EnergyTable energy_table(const std::string& path) {
  return path.empty() ? runtime::EnergyTable{} : runtime::EnergyTable::load(path);
}

void add_energy_json(nlohmann::ordered_json& j, const runtime::Energy& e, uint64_t useful_macs,
                     const runtime::EnergyTable& table) {
  j["energy"] = e.to_json();
  j["tops_per_w"] = runtime::tops_per_watt(useful_macs, e);
  j["energy_table"] = table.to_json();
}

void check_bf16_output(const std::vector<float>& golden, const std::vector<float>& y, uint32_t classes,
                       const std::string& backend) {
  for (size_t i = 0; i < golden.size(); ++i) {
    if (num::to_bits(golden[i]) != num::to_bits(y[i])) {
      throw Error(ErrorKind::kMismatch,
                  fmt::format("mismatch: output[{}, {}] (fp32 before the host op): {} = {} (0x{:08x}), cpu bf16 "
                              "model = {} (0x{:08x})",
                              i / classes, i % classes, backend, y[i], num::to_bits(y[i]), golden[i],
                              num::to_bits(golden[i])));
    }
  }
}

void LayerCounters::add(const runtime::LayerReport& lr) {
  cycles += lr.cycles;
  rd_bytes += lr.rd_bytes;
  wr_bytes += lr.wr_bytes;
  min_bytes += lr.min_bytes;
  mxu_active += lr.mxu_active;
  weight_stall += lr.weight_stall;
  weight_shift += lr.weight_shift;
  dma_wait += lr.dma_wait;
  act_busy += lr.act_busy;
  instructions += lr.program.instructions;
  vector_cycles += lr.program.vector_rows + 4 * lr.program.vectors;
}

void LayerCounters::add(const PerfCounters& p, uint64_t least_bytes, uint64_t program_instructions) {
  cycles += p.cycles;
  rd_bytes += p.rd_bytes;
  wr_bytes += p.wr_bytes;
  min_bytes += least_bytes;
  mxu_active += p.mxu_active;
  weight_stall += p.weight_stall;
  weight_shift += p.weight_shift;
  dma_wait += p.dma_wait;
  act_busy += p.act_busy;
  instructions += program_instructions;
}

void print_strategy_report(const worker::StrategyReport& r, uint32_t array_n) {
  for (const worker::DeviceUse& d : r.per_device) {
    fmt::print("  device {}: {}: {} {}, busy {:.3f} s ({:.0f}% of wall), {} cycles, utilization {:.3f}{}\n", d.index,
               d.role, d.items, r.strategy == "columns" ? (d.items == 1 ? "block" : "blocks")
                                                        : (d.items == 1 ? "micro-batch" : "micro-batches"),
               d.busy_s, 100.0 * d.busy_fraction, d.perf.cycles, utilization(d.macs, array_n, d.perf.cycles),
               d.uploaded ? ", weights uploaded" : "");
  }
  if (r.strategy == "pipeline") {
    std::vector<std::string> f;
    for (const worker::DeviceUse& d : r.per_device) f.push_back(fmt::format("{:.0f}%", 100.0 * d.steady_busy_fraction));
    fmt::print("  steady state {:.3f} s (last stage started .. first stage done): busy {}\n", r.steady_s,
               fmt::join(f, " / "));
  }
}

nlohmann::ordered_json strategy_report_json(const worker::StrategyReport& r, uint32_t array_n) {
  nlohmann::ordered_json j;
  j["devices"] = r.devices;
  j["strategy"] = r.strategy;
  j["wall_s"] = r.wall_s;
  j["overlap"] = r.overlap;
  j["micro_batch"] = r.micro_batch;
  j["micro_batches"] = r.micro_batches;
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (const worker::DeviceUse& d : r.per_device) {
    nlohmann::ordered_json pd;
    pd["index"] = d.index;
    pd["role"] = d.role;
    pd["items"] = d.items;
    pd["rows"] = d.rows;
    pd["macs"] = d.macs;
    pd["busy_s"] = d.busy_s;
    pd["busy_fraction"] = d.busy_fraction;
    pd["cycles"] = d.perf.cycles;
    pd["utilization"] = utilization(d.macs, array_n, d.perf.cycles);
    pd["uploaded"] = d.uploaded;
    if (r.strategy == "pipeline") pd["steady_busy_fraction"] = d.steady_busy_fraction;
    pd["perf"] = perf_json(d.perf);
    per.push_back(pd);
  }
  j["per_device"] = per;
  if (r.strategy == "pipeline") {
    nlohmann::ordered_json st = nlohmann::ordered_json::array();
    for (const auto& [a, b] : r.stages) st.push_back({{"first_layer", a}, {"last_layer", b}});
    j["stages"] = st;
    j["steady_s"] = r.steady_s;
  }
  return j;
}

void trace_train_step(runtime::Trace* trace, const std::string& device_name, int64_t step, int64_t begin_ns,
                      const runtime::TrainStepReport& rep) {
  if (trace == nullptr) return;
  const int64_t end_ns = trace->now_ns();
  const runtime::Trace::Track main = trace->host_thread("main");
  trace->host_span(main, fmt::format("step {}", step), "host", begin_ns, end_ns,
                   {{"rows", rep.rows}, {"loss", rep.loss}, {"host_loss_seconds", rep.host_loss_seconds},
                    {"host_loss_bytes", rep.host_loss_bytes}});
  if (rep.cycles == 0) return;  // the host trainer: no device
  trace->device_phases(0, device_name, "program", fmt::format("step {}", step), rep.cycles,
                       {{"forward", rep.forward_cycles}, {"backward", rep.backward_cycles}, {"update", rep.update_cycles}},
                       {{"cycles", rep.cycles}, {"macs", rep.macs}, {"utilization", rep.utilization},
                        {"note", "forward, backward and update as TrainStepReport splits PERF_CYCLES (docs/training.md)"}});
}

std::vector<std::string> match_named_inputs(const std::vector<std::string>& args, const std::vector<std::string>& names,
                                            const char* flag) {
  std::vector<std::string> quoted;
  for (const std::string& n : names) quoted.push_back("'" + n + "'");
  const std::string all = fmt::format("{}", fmt::join(quoted, ", "));
  std::vector<std::string> path(names.size());
  for (const std::string& a : args) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} {}: the model has {} inputs ({}); give each as {} NAME=FILE.npy", flag, a,
                              names.size(), all, flag));
    }
    const std::string name = a.substr(0, eq), file = a.substr(eq + 1);
    size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    if (k == names.size()) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}: the model has no input '{}' (its inputs: {})", flag,
                                                           a, name, all));
    }
    if (!path[k].empty()) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}: input '{}' is given twice (also {})", flag, a, name,
                                                           path[k]));
    }
    path[k] = file;
  }
  for (size_t k = 0; k < path.size(); ++k) {
    if (path[k].empty()) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: input '{}' is missing (the model's inputs: {}; give "
                                                           "each as {} NAME=FILE.npy)", flag, names[k], all, flag));
    }
  }
  return path;
}

std::vector<float> input_values(const npy::Array& a, const std::string& path) {
  std::vector<float> x(a.elements());
  switch (a.dtype) {
    case npy::DType::kFloat32: {
      const auto v = a.view<float>();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) {
          throw Error(ErrorKind::kBadFile, fmt::format("{}: element {} is {} (inputs must be finite)", path, i, v[i]));
        }
        x[i] = v[i];
      }
      break;
    }
    case npy::DType::kUint8: {
      const auto v = a.view<uint8_t>();
      for (size_t i = 0; i < v.size(); ++i) x[i] = v[i];
      break;
    }
    case npy::DType::kInt8: {
      const auto v = a.view<int8_t>();
      for (size_t i = 0; i < v.size(); ++i) x[i] = v[i];
      break;
    }
    default:
      throw Error(ErrorKind::kBadFile,
                  fmt::format("{}: dtype is {}, expected float32, uint8 or int8", path, npy::to_string(a.dtype)));
  }
  return x;
}

std::vector<int64_t> load_class_labels(const std::string& path, uint64_t rows, uint32_t classes) {
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
      case npy::DType::kInt64: y[i] = a.view<int64_t>()[i]; break;  // NumPy's default integer, PyTorch's labels
      default:
        throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}, expected integer class labels (uint8, int8, "
                                                     "int32 or int64)", path, npy::to_string(a.dtype)));
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

}  // namespace tpuw::cli
