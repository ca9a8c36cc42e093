// tpuw info (cmd_info.h).
#include "cmd_info.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstddef>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/worker/worker.h"

namespace tpuw::cli {

struct InfoOpts {
  DeviceOpts device;
};

namespace {

using json = nlohmann::ordered_json;

std::string features_string(uint32_t f) {
  std::vector<std::string> names;
  if (f & spec::reg::kFeaturesWeightDoubleBuffer) names.emplace_back("WEIGHT_DOUBLE_BUFFER");
  if (f & spec::reg::kFeaturesBias) names.emplace_back("BIAS");
  if (f & spec::reg::kFeaturesRelu) names.emplace_back("RELU");
  if (f & spec::reg::kFeaturesPerColumnQuant) names.emplace_back("PER_COLUMN_QUANT");
  if (f & spec::reg::kFeaturesTranspose) names.emplace_back("TRANSPOSE");
  if (f & spec::reg::kFeaturesBf16) names.emplace_back("BF16");
  if (f & spec::reg::kFeaturesLut) names.emplace_back("LUT");
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, " "));
}

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
    j["tpuw_version"] = version_string();
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
  (void)device_array_n(dev, o.array_n, o.array_n_opt != nullptr && o.array_n_opt->count() > 0);
  const DeviceInfo& i = dev.info();
  const auto& p = i.params;
  if (o.json) {
    json j;
    j["tpuw_version"] = version_string();
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

}  // namespace

InfoCommand::InfoCommand(CLI::App& app) : opts_(std::make_shared<InfoOpts>()) {
  DeviceOpts& info_o = opts_->device;
  auto* info = app.add_subcommand("info", "print the device configuration read from its registers");
  info_o.backend = "rtl";
  add_device_options(info, info_o, false);
  info_o.multi.devices_opt = info->add_option("--devices", info_o.multi.devices, "open K devices and list each one")
                                 ->check(unsigned_check() & CLI::Range(1u, kMaxDevices));
  sub_ = info;
}

bool InfoCommand::selected() const { return sub_ != nullptr && sub_->parsed(); }

int InfoCommand::execute() const { return cmd_info(opts_->device); }

}  // namespace tpuw::cli
