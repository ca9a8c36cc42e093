// tpuw exec (cmd_exec.h).
#include "cmd_exec.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli_common.h"
#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/spec.h"

namespace tpuw::cli {

struct ExecOpts {
  DeviceOpts device;
  std::string prog;
};

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

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
  check_output("--wave", o.wave);
  const isa::Program prog = isa::assemble_file(path);
  // The .dump files (beside the program) and --wave: checked before the program runs, staged, and
  // committed only when exec exits 0 (README.md, "Output files").
  std::vector<std::pair<std::string, std::string>> out_paths = {{"--wave", o.wave}};
  for (const auto& d : prog.dumps) {
    if (d.file.empty()) continue;
    const std::string out = (fs::path(path).parent_path() / d.file).string();
    check_output(fmt::format(".dump {}", d.name), out);
    out_paths.emplace_back(fmt::format(".dump {}", d.name), out);
  }
  check_distinct_outputs(out_paths);
  OutputSet outs;
  if (prog.array_n != 0) {
    if (o.array_n_opt->count() > 0 && o.array_n != prog.array_n) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: the program is written for .array_n {}, not --array-n {}",
                                                           path, prog.array_n, o.array_n));
    }
    o.array_n = prog.array_n;
  }
  (void)backend_config(o);  // --wave with a backend other than rtl: refused before staging
  const StagedOutput* wave = stage_wave(outs, o);
  Device dev = Device::open(o.backend, backend_config(o));
  // A serial board has its own N: a mismatching --array-n or .array_n is refused before anything runs.
  o.array_n = device_array_n(dev, o.array_n, (o.array_n_opt != nullptr && o.array_n_opt->count() > 0) || prog.array_n != 0);
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
      outs.add(out, bytes, "the .dump file");
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
  finish_wave(dev, wave);
  if (rc == kOk) {
    outs.commit();
  } else if (!outs.empty()) {  // any other exit: no output appears (outs removes its temporaries)
    fmt::print(stderr, "tpuw exec: exit {}: the .dump files{} are not written\n", rc, wave ? " and --wave" : "");
  }

  if (o.json) {
    json j;
    j["program"] = path;
    j["tpuw_version"] = version_string();
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

}  // namespace

ExecCommand::ExecCommand(CLI::App& app) : opts_(std::make_shared<ExecOpts>()) {
  DeviceOpts& exec_o = opts_->device;
  std::string& exec_in = opts_->prog;
  auto* ex = app.add_subcommand("exec", "run an assembly program: load its data, run, dump its regions, check its .expect");
  ex->add_option("PROG", exec_in, "assembly source (.s); its .array_n selects the configuration")
      ->required()
      ->check(CLI::ExistingFile);
  add_device_options(ex, exec_o, true);
  sub_ = ex;
}

bool ExecCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int ExecCommand::execute() const { return cmd_exec(opts_->device, opts_->prog); }

}  // namespace tpuw::cli
