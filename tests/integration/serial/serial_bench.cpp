// GEMM and bulk-transfer throughput over the simulated UART link (verilated iCEBreaker board, real
// bit timing, 12 MHz board clock) at 115200 and 3 Mbaud. Times are board time (simulated seconds =
// cycles / 12 MHz), i.e. what the real board would take with an ideal host.
//
//   tpuw_serial_bench [--check] [--quick] [--json FILE]
//     --check: every GEMM equals the ref model and bulk transfers reach >= 90% of the line rate
//              (exit 1 otherwise)
//     --quick: 1 KiB bulk and only the 16x16x16 GEMM at 115200 (the CTest run: a few seconds)
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/gemm.h"
#include "tpuw/serial.h"

namespace {

using namespace tpuw;

std::vector<int8_t> random_i8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

std::unique_ptr<serial::SerialBackend> connect(unsigned baud) {
  serial::SerialOptions o;
  o.baud = baud;
  o.timeout_s = 0.05;
  return serial::make_serial_backend(serial::open_sim_board(), o);
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false;
  bool quick = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      fmt::print(stderr, "usage: tpuw_serial_bench [--check] [--quick] [--json FILE]\n");
      return 2;
    }
  }
  try {
    bool ok = true;
    nlohmann::json report = nlohmann::json::array();
    BackendConfig rc;
    rc.array_n = 4;
    Device ref = Device::open("ref", rc);
    const unsigned bauds[] = {115200, 3'000'000};
    const runtime::GemmShape shapes[] = {{16, 16, 16}, {32, 32, 32}};

    for (unsigned baud : bauds) {
      const double line_Bps = baud / 10.0;  // 8N1: 10 bits per byte
      // Bulk: 4 KiB down and up.
      {
        auto be = connect(baud);
        std::vector<uint8_t> data(quick && baud < 1'000'000 ? 1024 : 4096);
        const double nbytes = static_cast<double>(data.size());
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
        double t0 = be->link().now();
        be->mem_write(0x4000, data.data(), data.size());
        const double tw = be->link().now() - t0;
        std::vector<uint8_t> back(data.size());
        t0 = be->link().now();
        be->mem_read(0x4000, back.data(), back.size());
        const double tr = be->link().now() - t0;
        const double eff_w = nbytes / tw / line_Bps, eff_r = nbytes / tr / line_Bps;
        fmt::print("{:>8} baud  bulk {} B: write {:8.0f} B/s ({:5.1f}% of line)  read {:8.0f} B/s ({:5.1f}% of line)\n",
                   baud, data.size(), nbytes / tw, 100 * eff_w, nbytes / tr, 100 * eff_r);
        report.push_back({{"baud", baud}, {"kind", "bulk"}, {"bytes", data.size()}, {"write_s", tw},
                          {"read_s", tr}, {"write_Bps", nbytes / tw}, {"read_Bps", nbytes / tr},
                          {"line_Bps", line_Bps}});
        if (back != data || eff_w < 0.9 || eff_r < 0.9) ok = false;
      }
      // GEMMs.
      for (const auto& s : shapes) {
        if (quick && baud < 1'000'000 && s.m > 16) continue;
        auto be = connect(baud);
        serial::SerialBackend* sb = be.get();
        DeviceOptions dopt;
        dopt.ring_entries = 256;
        Device dev(std::move(be), dopt);
        const auto a = random_i8(s.m * s.k, 11);
        const auto b = random_i8(s.k * s.n, 12);
        sb->reset_stats();
        const double t0 = sb->link().now();
        const auto wall0 = std::chrono::steady_clock::now();
        const auto r = runtime::gemm(dev, a, b, s);
        const double t = sb->link().now() - t0;
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        const auto& st = sb->stats();
        const bool same = r.c == runtime::gemm(ref, a, b, s).c;
        if (!same) ok = false;
        const uint64_t payload = st.payload_tx + st.payload_rx;
        const uint64_t wire = st.tx_bytes + st.rx_bytes;
        const double payload_d = static_cast<double>(payload), wire_d = static_cast<double>(wire);
        const double device_s = static_cast<double>(r.cycles) / sb->board().clock_hz;
        fmt::print("{:>8} baud  gemm {}x{}x{}: {:.3f} s board time ({:.1f} s wall), min bytes {}, payload {} B "
                   "({} tx / {} rx), wire {} B in {} requests; payload {:.0f} B/s, wire {:.1f}% of one "
                   "direction's line rate; device busy {:.2f} ms; {}\n",
                   baud, s.m, s.k, s.n, t, wall, r.min_bytes, payload, st.payload_tx, st.payload_rx, wire,
                   st.requests, payload_d / t, 100.0 * wire_d / t / line_Bps, 1e3 * device_s,
                   same ? "bit-identical to ref" : "MISMATCH");
        report.push_back({{"baud", baud}, {"kind", "gemm"}, {"m", s.m}, {"k", s.k}, {"n", s.n},
                          {"board_s", t}, {"wall_s", wall}, {"min_bytes", r.min_bytes},
                          {"payload_tx", st.payload_tx}, {"payload_rx", st.payload_rx}, {"wire_bytes", wire},
                          {"requests", st.requests}, {"payload_Bps", payload_d / t},
                          {"device_busy_s", device_s}, {"matches_ref", same}});
      }
    }
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    fmt::print("{}\n", report.dump());
    if (check && !ok) {
      fmt::print(stderr, "tpuw_serial_bench: check failed\n");
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "tpuw_serial_bench: {}\n", e.what());
    return 1;
  }
}
