// tpuw: the command-line tool of TPU Worker (device info, assembler, program runner, GEMM, models).
// info, gemm and run take --devices K (and gemm/run --strategy): K devices behind one runtime
// (tpuw/worker/strategies.h), with each device's busy time and the overlap in the report.
//
// Exit codes: 0 ok, 2 bad input or usage, 3 result mismatch (--check, .expect), 4 device fault
// or timeout, 1 anything else.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "cli_common.h"
#include "cmd_run.h"
#include "tpuw/asm.h"
#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/worker/strategies.h"
#include "tpuw/worker/worker.h"

namespace tpuw::cli {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Options shared by the subcommands that open a device.
struct DeviceOpts {
  std::string backend = "rtl";
  unsigned array_n = 16;
  bool json = false;
  std::string wave;
  uint64_t wave_from = 0;
  uint64_t wave_to = UINT64_MAX;
  CLI::Option* array_n_opt = nullptr;
  MultiOpts multi;
};

void add_device_options(CLI::App* sub, DeviceOpts& o, bool wave) {
  add_backend_option(sub, o.backend);
  o.array_n_opt = sub->add_option("--array-n", o.array_n, "MXU size N of the device configuration (N x N array)")
                      ->capture_default_str();
  sub->add_flag("--json", o.json, "print one JSON object instead of the human-readable report");
  if (wave) {
    sub->add_option("--wave", o.wave, "rtl only: write an FST waveform to this file");
    sub->add_option("--wave-from", o.wave_from, "first device cycle traced")->capture_default_str();
    sub->add_option("--wave-to", o.wave_to, "last device cycle traced (default: to the end)");
  }
}

BackendConfig backend_config(const DeviceOpts& o, uint64_t mem_bytes = 64ull << 20) {
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

std::string features_string(uint32_t f) {
  std::vector<std::string> names;
  if (f & spec::reg::kFeaturesWeightDoubleBuffer) names.emplace_back("WEIGHT_DOUBLE_BUFFER");
  if (f & spec::reg::kFeaturesBias) names.emplace_back("BIAS");
  if (f & spec::reg::kFeaturesRelu) names.emplace_back("RELU");
  if (f & spec::reg::kFeaturesPerColumnQuant) names.emplace_back("PER_COLUMN_QUANT");
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, " "));
}

json perf_json(const PerfCounters& p) {
  json j = json::object();
  for (const auto& [name, v] : p.items()) j[std::string(name)] = v;
  return j;
}

// ------------------------------------------------------------------------------------------------
// info
// ------------------------------------------------------------------------------------------------
// info --devices K: opens K devices through a Worker and lists what each one says about itself.
int cmd_info_devices(const DeviceOpts& o) {
  worker::WorkerOptions wo;
  wo.backend = o.backend;
  wo.config = backend_config(o);
  wo.devices = o.multi.devices;
  worker::Worker w(wo);
  std::vector<std::future<DeviceInfo>> futures;
  for (unsigned i = 0; i < w.size(); ++i) {
    futures.push_back(w.submit([](worker::DeviceSlot& s) { return s.device.info(); },
                               worker::TaskOptions{i, fmt::format("info {}", i)}));
  }
  std::vector<DeviceInfo> infos;
  for (auto& f : futures) infos.push_back(f.get());
  if (o.json) {
    json j;
    j["backend"] = o.backend;
    j["array_n"] = o.array_n;
    j["devices"] = json::array();
    for (size_t i = 0; i < infos.size(); ++i) {
      const DeviceInfo& d = infos[i];
      j["devices"].push_back({{"index", i}, {"backend", d.backend}, {"id", fmt::format("0x{:08x}", d.id)},
                              {"version", fmt::format("{}.{}", d.version_major(), d.version_minor())},
                              {"array_n", d.params.array_n}, {"ub_depth", d.params.ub_depth},
                              {"wb_depth", d.params.wb_depth}, {"acc_depth", d.params.acc_depth},
                              {"features", d.features}, {"mem_base", d.mem_base}, {"mem_size", d.mem_size}});
    }
    j["healthy"] = w.healthy();
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  fmt::print("{} devices on {} (each on its own thread, own host memory)\n", infos.size(), o.backend);
  for (size_t i = 0; i < infos.size(); ++i) {
    const DeviceInfo& d = infos[i];
    fmt::print("  device {}: ID 0x{:08x} VERSION {}.{} ARRAY_N {} UB {} WB {} ACC {} rows, features {}, host memory "
               "0x{:x} + {} MiB\n",
               i, d.id, d.version_major(), d.version_minor(), d.params.array_n, d.params.ub_depth, d.params.wb_depth,
               d.params.acc_depth, features_string(d.features), d.mem_base, d.mem_size >> 20);
  }
  return kOk;
}

int cmd_info(const DeviceOpts& o) {
  if (o.multi.devices_opt != nullptr && o.multi.devices_opt->count() > 0) return cmd_info_devices(o);
  Device dev = Device::open(o.backend, backend_config(o));
  const DeviceInfo& i = dev.info();
  const auto& p = i.params;
  if (o.json) {
    json j;
    j["backend"] = i.backend;
    j["id"] = fmt::format("0x{:08x}", i.id);
    j["version"] = fmt::format("{}.{}", i.version_major(), i.version_minor());
    j["array_n"] = p.array_n;
    j["ub_depth"] = p.ub_depth;
    j["wb_depth"] = p.wb_depth;
    j["acc_depth"] = p.acc_depth;
    j["ub_bytes"] = uint64_t{p.ub_depth} * p.array_n;
    j["wb_bytes"] = uint64_t{p.wb_depth} * p.array_n;
    j["acc_bytes"] = uint64_t{p.acc_depth} * p.array_n * 4;
    j["dma_data_w"] = p.dma_data_w;
    j["queue_depth"] = p.queue_depth;
    j["features"] = i.features;
    j["feature_names"] = features_string(i.features);
    j["mem_base"] = i.mem_base;
    j["mem_size"] = i.mem_size;
    j["available_array_sizes"] = backend_array_sizes(o.backend);
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  fmt::print("backend      {}\n", i.backend);
  fmt::print("ID           0x{:08x} (TPUW)\n", i.id);
  fmt::print("VERSION      {}.{}\n", i.version_major(), i.version_minor());
  fmt::print("ARRAY_N      {} ({}x{} MACs/cycle)\n", p.array_n, p.array_n, p.array_n);
  fmt::print("UB_DEPTH     {} rows ({} KiB)\n", p.ub_depth, uint64_t{p.ub_depth} * p.array_n / 1024);
  fmt::print("WB_DEPTH     {} rows ({} KiB, {} weight tiles)\n", p.wb_depth, uint64_t{p.wb_depth} * p.array_n / 1024,
             p.wb_depth / p.array_n);
  fmt::print("ACC_DEPTH    {} rows ({} KiB)\n", p.acc_depth, uint64_t{p.acc_depth} * p.array_n * 4 / 1024);
  fmt::print("DMA_DATA_W   {} bits ({}-byte beats)\n", p.dma_data_w, p.dma_data_w / 8);
  fmt::print("QUEUE_DEPTH  {}\n", p.queue_depth);
  fmt::print("FEATURES     0x{:x} ({})\n", i.features, features_string(i.features));
  fmt::print("host memory  0x{:x} + {} MiB\n", i.mem_base, i.mem_size >> 20);
  fmt::print("configurations built for {}: N = {}\n", o.backend, fmt::join(backend_array_sizes(o.backend), ", "));
  return kOk;
}

// ------------------------------------------------------------------------------------------------
// asm / disasm
// ------------------------------------------------------------------------------------------------
// Programs of up to 16 M instructions (bounded: /dev/zero or a pipe cannot exhaust memory).
std::vector<uint8_t> read_file(const fs::path& p) {
  return read_file_bounded(p, uint64_t{256} << 20, "a file of raw instructions");
}

// Complete or not at all: a temporary beside the target, renamed when every write succeeded.
void write_file(const fs::path& p, std::span<const uint8_t> bytes) { write_file_atomic(p, bytes); }

int cmd_asm(const std::string& in, std::string out) {
  const isa::Program prog = isa::assemble_file(in);
  if (out.empty()) out = fs::path(in).replace_extension(".bin").string();
  write_file(out, prog.code);
  fmt::print("{}: {} instructions ({} bytes) -> {}\n", in, prog.num_instrs(), prog.code.size(), out);
  return kOk;
}

int cmd_disasm(const std::string& in) {
  const std::vector<uint8_t> bytes = read_file(in);
  if (bytes.size() % spec::kInstrBytes != 0) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {} bytes is not a whole number of {}-byte instructions", in,
                                                 bytes.size(), spec::kInstrBytes));
  }
  for (size_t i = 0; i < bytes.size() / spec::kInstrBytes; ++i) {
    const isa::Word w = isa::word_from(std::span<const uint8_t>(bytes).subspan(i * spec::kInstrBytes));
    fmt::print("{:<60} ; {}\n", isa::disassemble_one(w), i);
  }
  return kOk;
}

// ------------------------------------------------------------------------------------------------
// exec
// ------------------------------------------------------------------------------------------------
std::vector<int64_t> decode_elems(std::span<const uint8_t> bytes, isa::ElemType t) {
  std::vector<int64_t> v;
  const size_t es = isa::elem_size(t);
  for (size_t off = 0; off + es <= bytes.size(); off += es) {
    switch (t) {
      case isa::ElemType::kInt8: v.push_back(static_cast<int8_t>(bytes[off])); break;
      case isa::ElemType::kUint8:
      case isa::ElemType::kHex8: v.push_back(bytes[off]); break;
      case isa::ElemType::kInt32: {
        int32_t x;
        std::memcpy(&x, bytes.data() + off, 4);
        v.push_back(x);
        break;
      }
      case isa::ElemType::kUint32: {
        uint32_t x;
        std::memcpy(&x, bytes.data() + off, 4);
        v.push_back(x);
        break;
      }
    }
  }
  return v;
}

std::string format_elem(int64_t v, isa::ElemType t) {
  return t == isa::ElemType::kHex8 ? fmt::format("{:02x}", v) : fmt::format("{}", v);
}

int cmd_exec(DeviceOpts o, const std::string& path) {
  const isa::Program prog = isa::assemble_file(path);
  if (prog.array_n != 0) {
    if (o.array_n_opt->count() > 0 && o.array_n != prog.array_n) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: the program is written for .array_n {}, not --array-n {}",
                                                           path, prog.array_n, o.array_n));
    }
    o.array_n = prog.array_n;
  }
  Device dev = Device::open(o.backend, backend_config(o));
  auto check_region = [&](const std::string& what, const std::string& name, uint64_t addr, uint64_t bytes) {
    const DeviceInfo& i = dev.info();
    if (addr < i.mem_base || addr + bytes > dev.ring_base()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: {} '{}' [0x{:x}, +{}) is outside host memory available to programs "
                              "[0x{:x}, 0x{:x})",
                              path, what, name, addr, bytes, i.mem_base, dev.ring_base()));
    }
    dev.map_fixed(addr, bytes);  // device-visible and inside the DMA window
  };
  for (const auto& z : prog.zeros) {
    check_region(".zero", z.name, z.addr, z.bytes);
    const std::vector<uint8_t> zeros(z.bytes, 0);
    dev.backend().mem_write(z.addr, zeros.data(), zeros.size());
  }
  for (const auto& d : prog.data) {
    check_region(".data", d.name, d.addr, d.bytes.size());
    dev.backend().mem_write(d.addr, d.bytes.data(), d.bytes.size());
  }
  for (const auto& d : prog.dumps) check_region(".dump", d.name, d.addr, d.bytes);
  for (const auto& e : prog.expects) check_region(".expect", e.name, e.addr, e.bytes.size());

  dev.clear_perf();
  const uint64_t cyc0 = dev.busy_cycles();
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<FaultReport> fault;
  std::string fault_msg;
  try {
    dev.wait(dev.submit_code(prog.code));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kDeviceFault) throw;
    fault = dev.fault();
    fault_msg = e.what();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t sim_cycles = dev.busy_cycles() - cyc0;
  const PerfCounters perf = dev.perf();

  int rc = kOk;
  std::vector<std::string> problems;
  if (prog.expect_fault) {
    const auto& ef = *prog.expect_fault;
    if (!fault) {
      problems.push_back(fmt::format("expected fault {} (FAULT_INFO 0x{:x}, instruction {}) did not happen",
                                     spec::to_string(ef.cause), ef.info, ef.index));
    } else if (fault->cause != ef.cause || fault->info != ef.info || fault->program_index != uint64_t{ef.index}) {
      problems.push_back(fmt::format("expected fault {} FAULT_INFO 0x{:x} at instruction {}, got: {}",
                                     spec::to_string(ef.cause), ef.info, ef.index, fault_msg));
    }
  } else if (fault) {
    rc = kDeviceExit;
  }

  json dumps = json::object();
  std::string text;
  for (const auto& d : prog.dumps) {
    std::vector<uint8_t> bytes(d.bytes);
    dev.backend().mem_read(d.addr, bytes.data(), bytes.size());
    if (!d.file.empty()) {
      const fs::path out = fs::path(path).parent_path() / d.file;
      write_file(out, bytes);
      text += fmt::format("{} (0x{:x}, {} bytes) -> {}\n", d.name, d.addr, d.bytes, out.string());
      dumps[d.name] = out.string();
      continue;
    }
    const std::vector<int64_t> v = decode_elems(bytes, d.type);
    dumps[d.name] = v;
    text += fmt::format("{} @ 0x{:x} ({}):\n", d.name, d.addr, isa::to_string(d.type));
    const unsigned cols = std::max(1u, d.columns);
    for (size_t i = 0; i < v.size(); i += cols) {
      std::vector<std::string> row;
      for (size_t j = i; j < std::min(v.size(), i + cols); ++j) row.push_back(format_elem(v[j], d.type));
      text += fmt::format("  {}\n", fmt::join(row, " "));
    }
  }
  json expects = json::array();
  if (!fault) {
    for (const auto& e : prog.expects) {
      std::vector<uint8_t> got(e.bytes.size());
      dev.backend().mem_read(e.addr, got.data(), got.size());
      const auto gv = decode_elems(got, e.type), wv = decode_elems(e.bytes, e.type);
      bool ok = true;
      for (size_t i = 0; i < wv.size(); ++i) {
        if (gv[i] != wv[i]) {
          problems.push_back(fmt::format(".expect {} (line {}): element {} at 0x{:x} is {}, expected {}", e.name, e.line, i,
                                         e.addr + i * isa::elem_size(e.type), gv[i], wv[i]));
          ok = false;
          break;
        }
      }
      expects.push_back({{"name", e.name}, {"ok", ok}});
    }
  }
  if (!problems.empty() && rc == kOk) rc = kMismatchExit;

  if (o.json) {
    json j;
    j["program"] = path;
    j["backend"] = o.backend;
    j["array_n"] = o.array_n;
    j["instructions"] = prog.num_instrs();
    j["cycles"] = perf.cycles;
    j["wall_s"] = wall;
    j["sim_hz"] = wall > 0 ? static_cast<double>(sim_cycles) / wall : 0.0;
    j["perf"] = perf_json(perf);
    if (fault) {
      j["fault"] = {{"cause", spec::to_string(fault->cause)},
                    {"info", fault->info},
                    {"pc", fault->pc},
                    {"index", fault->program_index ? json(*fault->program_index) : json(nullptr)},
                    {"instruction", fault->instruction ? isa::disassemble_one(*fault->instruction) : ""},
                    {"message", fault_msg}};
    } else {
      j["fault"] = nullptr;
    }
    j["dumps"] = dumps;
    j["expects"] = expects;
    j["problems"] = problems;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << text;
    if (fault) {
      fmt::print(stderr, "{}{}\n", prog.expect_fault && problems.empty() ? "expected " : "", fault_msg);
      if (fault->program_index && *fault->program_index < prog.lines.size()) {
        fmt::print(stderr, "  source: {}:{}\n", path, prog.lines[*fault->program_index]);
      }
    }
    for (const auto& p : problems) fmt::print(stderr, "tpuw exec: {}\n", p);
    fmt::print("{}: {} instructions on {} (N={}): {} cycles, {} retired, wall {:.3f} s{}\n", path, prog.num_instrs(),
               o.backend, o.array_n, perf.cycles, perf.instret, wall,
               prog.expects.empty() || fault ? "" : (problems.empty() ? ", all .expect checks passed" : ""));
  }
  return rc;
}

// ------------------------------------------------------------------------------------------------
// gemm
// ------------------------------------------------------------------------------------------------
struct GemmOpts {
  std::string a, b, out;
  uint64_t m = 64, k = 64, n = 64;
  uint64_t seed = 1;
  bool check = false;
  bool quiet = false;
};

struct Operands {
  runtime::GemmShape shape;
  std::vector<int8_t> a, b;
};

uint64_t memory_for(const runtime::GemmPlan& p);

Operands load_operands(const GemmOpts& g, const DeviceParams& params) {
  Operands op;
  if (g.a.empty() != g.b.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--a and --b go together (or use --m/--k/--n for random operands)");
  }
  if (!g.a.empty()) {
    const npy::Array a = npy::load(g.a);
    npy::require(a, g.a, npy::DType::kInt8, 2);
    const npy::Array b = npy::load(g.b);
    npy::require(b, g.b, npy::DType::kInt8, 2);
    if (a.shape[1] != b.shape[0]) {
      throw Error(ErrorKind::kBadFile,
                  fmt::format("inner dimensions differ: {} is [M={}, K={}] but {} is [K={}, N={}]", g.a, a.shape[0],
                              a.shape[1], g.b, b.shape[0], b.shape[1]));
    }
    for (const auto& [arr, name] : {std::pair{&a, &g.a}, std::pair{&b, &g.b}}) {
      if (arr->elements() == 0) {
        throw Error(ErrorKind::kBadFile,
                    fmt::format("{}: shape {} has a zero dimension", *name, npy::shape_string(arr->shape)));
      }
    }
    op.shape = {a.shape[0], a.shape[1], b.shape[1]};
    const auto av = a.view<int8_t>(), bv = b.view<int8_t>();
    op.a.assign(av.begin(), av.end());
    op.b.assign(bv.begin(), bv.end());
    return op;
  }
  if (g.m == 0 || g.k == 0 || g.n == 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--m {} --k {} --n {}: every dimension must be >= 1", g.m, g.k, g.n));
  }
  op.shape = {g.m, g.k, g.n};
  (void)memory_for(runtime::plan_gemm(params, op.shape));  // sizes checked before anything is allocated
  std::mt19937_64 rng(g.seed);
  std::uniform_int_distribution<int> d(-128, 127);
  op.a.resize(g.m * g.k);
  op.b.resize(g.k * g.n);
  for (auto& x : op.a) x = static_cast<int8_t>(d(rng));
  for (auto& x : op.b) x = static_cast<int8_t>(d(rng));
  return op;
}

// Host memory big enough for the packed operands (plus slack for the ring), at least 64 MiB.
uint64_t memory_for(const runtime::GemmPlan& p) {
  const uint64_t need = p.a_bytes() + p.b_bytes() + p.c_bytes() + (8ull << 20);
  const uint64_t size = std::max<uint64_t>(64ull << 20, (need + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (size > (4ull << 30)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("GEMM needs {} MiB of host memory; the device addresses at most 4 GiB", need >> 20));
  }
  return size;
}

void compare(const std::vector<int32_t>& got, const std::vector<int32_t>& want, const runtime::GemmShape& s,
             const std::string& got_name, const std::string& want_name) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      throw Error(ErrorKind::kMismatch,
                  fmt::format("mismatch: first differing element C[{}, {}]: {} = {}, {} = {}", i / s.n, i % s.n,
                              got_name, got[i], want_name, want[i]));
    }
  }
}

// gemm --devices K --strategy data: B's columns split over K devices (tpuw/worker/strategies.h).
int cmd_gemm_devices(const DeviceOpts& o, const GemmOpts& g, const Operands& op, uint64_t mem) {
  worker::WorkerOptions wo;
  wo.backend = o.backend;
  wo.config = backend_config(o, mem);
  wo.devices = o.multi.devices;
  worker::Worker w(wo);
  const worker::GemmStrategyResult r = worker::gemm_parallel(w, op.a, op.b, op.shape);
  json check_json = nullptr;
  if (g.check) {
    // The same GEMM on one device of the same backend, and on the CPU.
    compare(r.c, runtime::gemm_cpu(op.a, op.b, op.shape), op.shape, fmt::format("{} x{}", o.backend, w.size()), "cpu");
    check_json = json{{"cpu", "equal"}};
    DeviceOpts oo = o;
    oo.wave.clear();
    Device dev1 = Device::open(o.backend, backend_config(oo, mem));
    compare(r.c, runtime::gemm(dev1, op.a, op.b, op.shape).c, op.shape, fmt::format("{} x{}", o.backend, w.size()),
            fmt::format("{} x1", o.backend));
    check_json["one_device"] = "equal";
  }
  if (!g.out.empty()) npy::save(g.out, npy::Array::from<int32_t>({op.shape.m, op.shape.n}, r.c));
  const worker::StrategyReport& rep = r.report;
  uint64_t cycles = 0;
  for (const worker::DeviceUse& d : rep.per_device) cycles += d.perf.cycles;
  const uint64_t macs = op.shape.m * op.shape.k * op.shape.n;
  const double macs_per_s = rep.wall_s > 0 ? static_cast<double>(macs) / rep.wall_s : 0.0;
  if (o.json) {
    json j;
    j["backend"] = o.backend;
    j["array_n"] = o.array_n;
    j["m"] = op.shape.m;
    j["k"] = op.shape.k;
    j["n"] = op.shape.n;
    j["cycles"] = cycles;
    j["macs"] = macs;
    j["macs_per_s"] = macs_per_s;
    const json report = strategy_report_json(rep, o.array_n);
    for (auto it = report.begin(); it != report.end(); ++it) j[it.key()] = it.value();
    j["strategy"] = "data";
    j["split"] = "columns";
    j["check"] = check_json;
    if (!g.out.empty()) j["out"] = g.out;
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("gemm {}x{}x{} on {} (N={}) x {} device{}, strategy data (B's columns split): wall {:.3f} s, {:.3g} "
               "MAC/s, overlap {:.2f} (sum of busy time / (devices x wall))\n",
               op.shape.m, op.shape.k, op.shape.n, o.backend, o.array_n, rep.devices, rep.devices == 1 ? "" : "s",
               rep.wall_s, macs_per_s, rep.overlap);
    print_strategy_report(rep, o.array_n);
    if (g.check) fmt::print("  check: {}\n", check_json.dump());
  }
  return kOk;
}

int cmd_gemm(const DeviceOpts& o, const GemmOpts& g) {
  if (o.multi.strategy == "pipeline") {
    throw Error(ErrorKind::kInvalidArgument,
                "tpuw gemm --strategy pipeline: a single GEMM has no layers to pipeline; use --strategy data (B's "
                "columns split over the devices)");
  }
  const DeviceParams* params = find_device_config(o.array_n);
  if (params == nullptr) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--array-n {}: no such configuration (built: {})", o.array_n,
                            fmt::join(backend_array_sizes("ref"), ", ")));
  }
  const Operands op = load_operands(g, *params);
  if (!g.out.empty()) {
    const fs::path parent = fs::path(g.out).parent_path();
    std::error_code ec;
    if (!parent.empty() && !fs::is_directory(parent, ec)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--out {}: directory {} does not exist", g.out, parent.string()));
    }
  }
  const uint64_t mem = memory_for(runtime::plan_gemm(*params, op.shape));
  if (multi_selected(o.multi)) return cmd_gemm_devices(o, g, op, mem);
  Device dev = Device::open(o.backend, backend_config(o, mem));

  const bool show_progress = !g.quiet && isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  bool progress_shown = false;
  runtime::GemmOptions gopt;
  if (show_progress) {
    gopt.progress = [&](double f) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (el < 2.0) return;
      progress_shown = true;
      fmt::print(stderr, "\rtpuw gemm: {:3.0f}% of folds dispatched ({:.0f} s)", 100.0 * f, el);
    };
  }
  const runtime::GemmResult r = runtime::gemm(dev, op.a, op.b, op.shape, gopt);
  if (progress_shown) fmt::print(stderr, "\n");

  json check_json = nullptr;
  if (g.check) {
    const auto cpu = runtime::gemm_cpu(op.a, op.b, op.shape);
    compare(r.c, cpu, op.shape, o.backend, "cpu");
    check_json = json{{"cpu", "equal"}};
    const std::string other = o.backend == "rtl" ? "ref" : "rtl";
    if (!backend_array_sizes(other).empty()) {
      DeviceOpts oo = o;
      oo.backend = other;
      oo.wave.clear();
      Device dev2 = Device::open(other, backend_config(oo, mem));
      const runtime::GemmResult r2 = runtime::gemm(dev2, op.a, op.b, op.shape);
      compare(r.c, r2.c, op.shape, o.backend, other);
      check_json[other] = "equal";
      check_json[other + "_cycles"] = r2.cycles;
    } else {
      check_json[other] = "not built";
    }
  }
  if (!g.out.empty()) {
    npy::save(g.out, npy::Array::from<int32_t>({op.shape.m, op.shape.n}, r.c));
  }
  const double sim_hz = r.wall_s > 0 ? static_cast<double>(r.sim_cycles) / r.wall_s : 0.0;
  if (o.json) {
    json j;
    j["backend"] = o.backend;
    j["array_n"] = o.array_n;
    j["m"] = op.shape.m;
    j["k"] = op.shape.k;
    j["n"] = op.shape.n;
    j["cycles"] = r.cycles;
    j["utilization"] = r.utilization;
    j["wall_s"] = r.wall_s;
    j["sim_hz"] = sim_hz;
    j["rd_bytes"] = r.perf.rd_bytes;
    j["wr_bytes"] = r.perf.wr_bytes;
    j["min_bytes"] = r.min_bytes;
    j["instructions"] = r.instructions;
    j["perf"] = perf_json(r.perf);
    j["plan"] = {{"m_tile", r.plan.m_tile}, {"m_tiles", r.plan.m_tiles}, {"k_blocks", r.plan.k_blocks},
                 {"n_blocks", r.plan.n_blocks}, {"folds", r.plan.folds}, {"a_resident", r.plan.a_resident},
                 {"a_slots", r.plan.a_slots}, {"w_slots", r.plan.w_slots}};
    j["check"] = check_json;
    if (!g.out.empty()) j["out"] = g.out;
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("gemm {}x{}x{} on {} (N={}): {} cycles, utilization {:.3f}, wall {:.3f} s, {:.2f} M simulated cycles/s\n",
               op.shape.m, op.shape.k, op.shape.n, o.backend, o.array_n, r.cycles, r.utilization, r.wall_s,
               sim_hz / 1e6);
    fmt::print("  perf: mxu_active {} weight_stall {} weight_shift {} dma_wait {} instret {}; "
               "bytes read {} written {} (minimum {})\n",
               r.perf.mxu_active, r.perf.weight_stall, r.perf.weight_shift, r.perf.dma_wait, r.perf.instret,
               r.perf.rd_bytes, r.perf.wr_bytes, r.min_bytes);
    if (g.check) fmt::print("  check: {}\n", check_json.dump());
  }
  return kOk;
}

int run(int argc, char** argv) {
  CLI::App app{"tpuw: TPU Worker device tool (info, asm, disasm, exec, gemm, run).\n"
               "Exit codes: 0 ok, 2 bad input/usage, 3 mismatch, 4 device fault/timeout, 1 other."};
  app.require_subcommand(1);

  DeviceOpts info_o, exec_o, gemm_o;
  auto* info = app.add_subcommand("info", "print the device configuration read from its registers");
  info_o.backend = "rtl";
  add_device_options(info, info_o, false);
  info_o.multi.devices_opt = info->add_option("--devices", info_o.multi.devices, "open K devices and list each one")
                                 ->check(CLI::Range(1u, 64u));

  std::string asm_in, asm_out;
  auto* as = app.add_subcommand("asm", "assemble a program (.s) into raw 16-byte instructions");
  as->add_option("IN", asm_in, "assembly source")->required()->check(CLI::ExistingFile);
  as->add_option("-o,--output", asm_out, "output file (default: IN with .bin)");

  std::string dis_in;
  auto* dis = app.add_subcommand("disasm", "disassemble raw instructions");
  dis->add_option("IN", dis_in, "binary file (a multiple of 16 bytes)")->required()->check(CLI::ExistingFile);

  std::string exec_in;
  auto* ex = app.add_subcommand("exec", "run an assembly program: load its data, run, dump its regions, check its .expect");
  ex->add_option("PROG", exec_in, "assembly source (.s); its .array_n selects the configuration")
      ->required()
      ->check(CLI::ExistingFile);
  add_device_options(ex, exec_o, true);

  GemmOpts g;
  auto* ge = app.add_subcommand("gemm", "C[M,N] int32 = A[M,K] int8 . B[K,N] int8 on the device");
  ge->add_option("--a", g.a, "A as .npy, int8 [M, K]");
  ge->add_option("--b", g.b, "B as .npy, int8 [K, N]");
  ge->add_option("--out", g.out, "write C as .npy, int32 [M, N]");
  ge->add_option("--m", g.m, "rows of A (random operands)")->capture_default_str();
  ge->add_option("--k", g.k, "columns of A / rows of B (random operands)")->capture_default_str();
  ge->add_option("--n", g.n, "columns of B (random operands)")->capture_default_str();
  ge->add_option("--seed", g.seed, "seed of the random operands")->capture_default_str();
  ge->add_flag("--check", g.check, "also compute with the other backend and on the CPU; exit 3 on any difference");
  ge->add_flag("-q,--quiet", g.quiet, "no progress on stderr");
  add_device_options(ge, gemm_o, true);
  add_multi_options(ge, gemm_o.multi, {"data", "pipeline"},
                    "how the GEMM uses several devices: data (B's columns split, A to every device; the default); "
                    "pipeline is for tpuw run");
  const RunCommand run_cmd(app);  // tpuw run (cmd_run.cpp)

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kBadInput;
  }

  if (*info) return cmd_info(info_o);
  if (*as) return cmd_asm(asm_in, asm_out);
  if (*dis) return cmd_disasm(dis_in);
  if (*ex) return cmd_exec(exec_o, exec_in);
  if (*ge) return cmd_gemm(gemm_o, g);
  if (run_cmd.selected()) return run_cmd.execute();
  return kBadInput;
}

}  // namespace
}  // namespace tpuw::cli

int main(int argc, char** argv) {
  // Past `ulimit -f` a write fails with EFBIG (reported, the output file left as it was) instead
  // of the default SIGXFSZ killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return tpuw::cli::run(argc, argv);
  } catch (const tpuw::Error& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return tpuw::cli::exit_code(e.kind());
  } catch (const std::exception& e) {
    fmt::print(stderr, "tpuw: error: {}\n", e.what());
    return tpuw::cli::kOther;
  }
}
