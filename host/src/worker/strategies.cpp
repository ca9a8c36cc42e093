// Work split across a Worker's devices (tpuw/worker/strategies.h): data-parallel and pipelined
// networks, column-split GEMM.
//
// Per device, a network lives in the slot's resident cache as a ResidentNetwork: its weights
// (uploaded once) and, for the current micro-batch size, two slots of per-batch buffers with a
// program compiled for each. stream() drives one device through a sequence of micro-batches with
// the two slots: micro-batch j is written and submitted before the task waits for j-1, so the ring
// always holds the next batch.
#include "tpuw/worker/strategies.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <memory>
#include <mutex>

#include "tpuw/device_configs.h"
#include "tpuw/error.h"

namespace tpuw::worker {

uint64_t auto_micro_batch(uint64_t batch, unsigned devices) {
  constexpr uint64_t kMaxAutoMicroBatch = 256;
  constexpr uint64_t kAutoMicroBatchesPerDevice = 4;
  const uint64_t per = kAutoMicroBatchesPerDevice * std::max(1u, devices);
  return std::clamp<uint64_t>((batch + per - 1) / per, 1, kMaxAutoMicroBatch);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNetworkKeyPrefix = "network/";

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- resident networks --------------------------------------------------------------------------
struct ResidentNetwork {
  runtime::NetworkWeights weights;
  uint64_t micro_batch = 0;
  runtime::NetworkPlanOptions plan_options;
  struct BatchSlot {
    runtime::NetworkBuffers buffers;
    runtime::CompiledNetwork program;
  };
  std::vector<BatchSlot> slots;  // two: double buffering
};

bool same_plan_options(const runtime::NetworkPlanOptions& a, const runtime::NetworkPlanOptions& b) {
  return a.max_m_tile == b.max_m_tile && a.force_spill == b.force_spill;
}

// The device's copy of `net` for micro-batches of `micro_batch` rows: found in the resident cache
// under `key`, or uploaded (replacing any other network: one model per device at a time).
std::shared_ptr<ResidentNetwork> resident_network(DeviceSlot& slot, const std::string& key, const nn::QNetwork& net,
                                                  uint64_t micro_batch, const runtime::NetworkPlanOptions& po,
                                                  bool& uploaded) {
  std::shared_ptr<ResidentNetwork> rn;
  if (auto it = slot.resident.find(key); it != slot.resident.end()) {
    rn = std::static_pointer_cast<ResidentNetwork>(it->second);
  } else {
    for (auto it2 = slot.resident.begin(); it2 != slot.resident.end();) {
      it2 = it2->first.starts_with(kNetworkKeyPrefix) ? slot.resident.erase(it2) : std::next(it2);
    }
    rn = std::make_shared<ResidentNetwork>();
    rn->weights = runtime::upload_network_weights(slot.device, net);
    slot.resident[key] = rn;
    uploaded = true;
  }
  if (rn->slots.empty() || rn->micro_batch != micro_batch || !same_plan_options(rn->plan_options, po)) {
    rn->slots.clear();  // frees the old buffers first
    const runtime::NetworkPlan plan = runtime::plan_network(slot.device.info().params, net, micro_batch, po);
    for (int i = 0; i < 2; ++i) {
      ResidentNetwork::BatchSlot s;
      s.buffers = runtime::alloc_network_buffers(slot.device, plan);
      s.program = runtime::compile_network(plan, runtime::network_addresses(rn->weights, s.buffers));
      rn->slots.push_back(std::move(s));
    }
    rn->micro_batch = micro_batch;
    rn->plan_options = po;
  }
  return rn;
}

// ---- one device streaming micro-batches -----------------------------------------------------------
struct TaskUse {
  unsigned device = 0;
  uint64_t items = 0, rows = 0, macs = 0;
  double busy_s = 0;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> busy;  // intervals driving the device
  PerfCounters perf;
  bool uploaded = false;
};

// Input of micro-batch j: its int8 rows, or nullopt when not available yet (and !block).
using GetFn = std::function<std::optional<std::span<const int8_t>>(uint64_t j, bool block)>;
using PutFn = std::function<void(uint64_t j, runtime::NetworkRunResult&& r)>;

// Counters of `now` minus `before` (both cumulative since the same clear_perf()).
PerfCounters perf_delta(const PerfCounters& now, const PerfCounters& before) {
  PerfCounters d;
  d.cycles = now.cycles - before.cycles;
  d.mxu_active = now.mxu_active - before.mxu_active;
  d.weight_stall = now.weight_stall - before.weight_stall;
  d.weight_shift = now.weight_shift - before.weight_shift;
  d.dma_wait = now.dma_wait - before.dma_wait;
  d.act_busy = now.act_busy - before.act_busy;
  d.instret = now.instret - before.instret;
  d.rd_bytes = now.rd_bytes - before.rd_bytes;
  d.wr_bytes = now.wr_bytes - before.wr_bytes;
  return d;
}

// The host track of the thread driving device `index` (--trace).
std::string driver_thread(unsigned index) { return fmt::format("device {} driver", index); }

void stream(DeviceSlot& slot, ResidentNetwork& rn, uint64_t first, uint64_t count, const GetFn& get, const PutFn& put,
            TaskUse& use, runtime::Trace* trace) {
  Device& dev = slot.device;
  dev.clear_perf();
  const runtime::Trace::Track track = trace != nullptr ? trace->host_thread(driver_thread(slot.index)) : runtime::Trace::Track{};
  const std::string dev_name = trace != nullptr ? runtime::trace_device_name(dev) : std::string();
  PerfCounters seen;  // counters already laid on the device's tracks
  auto timed = [&](auto&& fn, const std::string& what) {
    auto span = runtime::Trace::scope(trace, track, what);
    const auto t0 = Clock::now();
    fn();
    const auto t1 = Clock::now();
    use.busy.emplace_back(t0, t1);
    use.busy_s += seconds(t1 - t0);
  };
  struct InFlight {
    uint64_t j;
    uint32_t fence;
    size_t slot;
  };
  std::optional<InFlight> pending;
  auto finish = [&] {
    const InFlight f = *pending;
    pending.reset();
    timed([&] { dev.wait(f.fence); }, trace != nullptr ? fmt::format("wait micro-batch {}", f.j) : std::string());
    if (trace != nullptr) {
      // The simulated device advances only inside wait(): the counters since the last wait are
      // this micro-batch's program.
      const PerfCounters now = dev.perf();
      trace->device_program(slot.index, dev_name, fmt::format("micro-batch {} ({} rows)", f.j, rn.micro_batch),
                            perf_delta(now, seen));
      seen = now;
    }
    runtime::NetworkRunResult r;
    const ResidentNetwork::BatchSlot& s = rn.slots[f.slot];
    runtime::read_network_output(dev, s.program, s.buffers, r);
    put(f.j, std::move(r));
  };
  for (uint64_t j = first; j < first + count; ++j) {
    std::optional<std::span<const int8_t>> in = get(j, false);
    if (!in) {
      if (pending) finish();  // let the device run while the input is on its way
      in = get(j, true);
    }
    // Slot j % 2 was last used by micro-batch j-2, which has finished (only j-1 can be pending).
    const size_t si = j % 2;
    uint32_t fence = 0;
    timed([&] { fence = runtime::submit_network(dev, rn.slots[si].program, rn.slots[si].buffers, *in); },
          trace != nullptr ? fmt::format("submit micro-batch {}", j) : std::string());
    if (pending) finish();  // micro-batch j is queued behind j-1: the device does not drain
    pending = InFlight{j, fence, si};
    ++use.items;
    use.rows += rn.micro_batch;
  }
  if (pending) finish();
  use.perf = dev.perf();
}

// ---- hand-over between pipeline stages ------------------------------------------------------------
// Keeps every item (a retried stage replays from its first micro-batch); put() is idempotent.
template <class T>
class Channel {
 public:
  explicit Channel(uint64_t n) : items_(n) {}
  void put(uint64_t j, std::vector<T>&& v) {
    {
      std::lock_guard lk(mu_);
      if (!items_[j]) items_[j] = std::make_shared<const std::vector<T>>(std::move(v));
    }
    cv_.notify_all();
  }
  std::shared_ptr<const std::vector<T>> get(uint64_t j, bool block) {
    std::unique_lock lk(mu_);
    if (block) cv_.wait(lk, [&] { return items_[j] != nullptr || closed_; });
    if (!items_[j] && closed_) throw Cancelled(reason_);
    return items_[j];
  }
  void close(const std::string& reason) {
    {
      std::lock_guard lk(mu_);
      if (closed_) return;
      closed_ = true;
      reason_ = reason;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<const std::vector<T>>> items_;
  bool closed_ = false;
  std::string reason_;
};

// Waits for every future (tasks reference the caller's data), then rethrows the first error.
template <class T>
std::vector<T> collect(std::vector<std::future<T>>& futures, const std::function<void(size_t)>& on_error = {}) {
  std::vector<T> out;
  std::exception_ptr first;
  for (size_t i = 0; i < futures.size(); ++i) {
    try {
      out.push_back(futures[i].get());
    } catch (...) {
      if (!first) first = std::current_exception();
      if (on_error) on_error(i);
    }
  }
  if (first) std::rethrow_exception(first);
  return out;
}

uint64_t layer_macs(const nn::QLayer& l) { return uint64_t{l.k} * l.n; }

// Micro-batch j of the input: a span into it, or (last, short one) a zero-padded copy in `pad`.
std::span<const int8_t> micro_input(std::span<const int8_t> x, uint64_t batch, uint64_t k, uint64_t mb, uint64_t j,
                                    std::vector<int8_t>& pad) {
  const uint64_t r0 = j * mb, rows = std::min(mb, batch - r0);
  const std::span<const int8_t> s = x.subspan(r0 * k, rows * k);
  if (rows == mb) return s;
  pad.assign(mb * k, 0);
  std::copy(s.begin(), s.end(), pad.begin());
  return pad;
}

// `devices`: the worker's devices; `counted`: the devices the work was meant for (overlap denominator).
void finish_report(StrategyReport& rep, const std::vector<TaskUse>& uses, unsigned devices, unsigned counted,
                   Clock::time_point t0, Clock::time_point t1) {
  rep.wall_s = seconds(t1 - t0);
  std::vector<DeviceUse> per(devices);
  std::vector<bool> used(devices, false);
  for (unsigned i = 0; i < devices; ++i) per[i].index = i;
  for (const TaskUse& u : uses) {
    if (u.device >= devices) continue;
    DeviceUse& d = per[u.device];
    used[u.device] = true;
    d.items += u.items;
    d.rows += u.rows;
    d.macs += u.macs;
    d.busy_s += u.busy_s;
    d.perf += u.perf;
    d.uploaded = d.uploaded || u.uploaded;
  }
  double busy = 0;
  for (unsigned i = 0; i < devices; ++i) {
    if (!used[i]) continue;
    DeviceUse& d = per[i];
    d.busy_fraction = rep.wall_s > 0 ? d.busy_s / rep.wall_s : 0.0;
    busy += d.busy_s;
    rep.per_device.push_back(d);
  }
  rep.devices = counted;
  rep.overlap = rep.wall_s > 0 && rep.devices > 0 ? busy / (rep.devices * rep.wall_s) : 0.0;
}

// Checks the network (naming the bad layer) and the input before any task runs.
void check_input(const Worker& worker, const nn::QNetwork& net, std::span<const int8_t> x, uint64_t batch) {
  if (batch == 0) throw Error(ErrorKind::kInvalidArgument, "network: batch must be >= 1");
  if (net.layers.empty()) throw Error(ErrorKind::kInvalidArgument, "network: no layers");
  if (const DeviceParams* params = find_device_config(worker.options().config.array_n)) {
    runtime::plan_network(*params, net, 1);
  }
  if (x.size() != batch * net.input_features) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("network input has {} elements, expected batch*k = {}*{}",
                                                         x.size(), batch, net.input_features));
  }
}

// ---- data parallel --------------------------------------------------------------------------------
struct DataOut {
  uint64_t first = 0, count = 0;  // micro-batches
  std::vector<int32_t> out_i32;
  std::vector<int8_t> out_q;
  TaskUse use;
};

NetworkStrategyResult run_data(Worker& worker, const nn::QNetwork& net, std::span<const int8_t> x, uint64_t batch,
                               const NetworkStrategyOptions& o) {
  const unsigned k_dev = worker.size();
  const uint64_t mb = o.micro_batch > 0 ? std::min(o.micro_batch, batch) : auto_micro_batch(batch, k_dev);
  const uint64_t m = (batch + mb - 1) / mb;
  const uint64_t tasks = std::min<uint64_t>(k_dev, m);
  const std::string key = std::string(kNetworkKeyPrefix) + network_fingerprint(net);
  const uint64_t k0 = net.input_features, n_out = net.layers.back().n;
  const bool int32_out = net.layers.back().int32_output;
  uint64_t net_macs = 0;
  for (const nn::QLayer& l : net.layers) net_macs += layer_macs(l);

  const auto t0 = Clock::now();
  std::vector<std::future<DataOut>> futures;
  for (uint64_t t = 0; t < tasks; ++t) {
    const uint64_t first = t * m / tasks, last = (t + 1) * m / tasks;
    const NetworkStrategyOptions* opt = &o;
    futures.push_back(worker.submit(
        [&net, x, batch, mb, first, count = last - first, key, k0, n_out, int32_out, net_macs, opt](DeviceSlot& slot) {
          DataOut out;
          out.first = first;
          out.count = count;
          out.use.device = slot.index;
          const uint64_t r0 = first * mb, r1 = std::min(batch, (first + count) * mb);
          if (int32_out) {
            out.out_i32.resize((r1 - r0) * n_out);
          } else {
            out.out_q.resize((r1 - r0) * n_out);
          }
          out.use.macs = (r1 - r0) * net_macs;
          auto up_span = runtime::Trace::scope(
              opt->trace, opt->trace != nullptr ? opt->trace->host_thread(driver_thread(slot.index)) : runtime::Trace::Track{},
              "upload weights + compile");
          std::shared_ptr<ResidentNetwork> rn = resident_network(slot, key, net, mb, opt->plan, out.use.uploaded);
          up_span.end();
          std::vector<int8_t> pad;
          const GetFn get = [&](uint64_t j, bool) -> std::optional<std::span<const int8_t>> {
            return micro_input(x, batch, k0, mb, j, pad);
          };
          const PutFn put = [&](uint64_t j, runtime::NetworkRunResult&& r) {
            const uint64_t a = j * mb, rows = std::min(mb, batch - a);
            if (int32_out) {
              std::copy_n(r.output_i32.begin(), rows * n_out, out.out_i32.begin() + static_cast<ptrdiff_t>((a - r0) * n_out));
            } else {
              std::copy_n(r.output_q.begin(), rows * n_out, out.out_q.begin() + static_cast<ptrdiff_t>((a - r0) * n_out));
            }
          };
          stream(slot, *rn, first, count, get, put, out.use, opt->trace);
          return out;
        },
        TaskOptions{std::nullopt, fmt::format("data micro-batches {}-{}", first, last - 1)}));
  }
  std::vector<DataOut> outs = collect(futures);
  const auto t1 = Clock::now();

  NetworkStrategyResult res;
  res.macs = batch * net_macs;
  for (const DataOut& d : outs) {
    res.output_i32.insert(res.output_i32.end(), d.out_i32.begin(), d.out_i32.end());
    res.output_q.insert(res.output_q.end(), d.out_q.begin(), d.out_q.end());
  }
  StrategyReport& rep = res.report;
  rep.strategy = "data";
  rep.micro_batch = mb;
  rep.micro_batches = m;
  std::vector<TaskUse> uses;
  for (const DataOut& d : outs) uses.push_back(d.use);
  finish_report(rep, uses, k_dev, k_dev, t0, t1);
  // Roles: the rows each device ran.
  for (DeviceUse& du : rep.per_device) {
    std::vector<std::string> parts;
    for (const DataOut& d : outs) {
      if (d.use.device != du.index) continue;
      parts.push_back(fmt::format("rows {}-{}", d.first * mb, std::min(batch, (d.first + d.count) * mb) - 1));
    }
    du.role = fmt::format("{}", fmt::join(parts, ", "));
  }
  return res;
}

// ---- data parallel, programs compiled per micro-batch (CNNs) -----------------------------------------
struct MicroOut {
  uint64_t first = 0, count = 0;  // micro-batches
  TaskUse use;
};

StrategyReport micro_batches(Worker& worker, uint64_t batch, uint64_t micro_batch, const MicroBatchFn& run,
                             runtime::Trace* trace) {
  if (batch == 0) throw Error(ErrorKind::kInvalidArgument, "micro-batches: batch must be >= 1");
  const unsigned k_dev = worker.size();
  const uint64_t mb = micro_batch > 0 ? std::min(micro_batch, batch) : auto_micro_batch(batch, k_dev);
  const uint64_t m = (batch + mb - 1) / mb;
  // One task per micro-batch, not one contiguous range per device: nothing is resident between
  // micro-batches (each run compiles and uploads its own programs), so a device that is free takes
  // the next micro-batch, no device waits while another runs two ranges back to back, and a fault
  // re-runs only its own micro-batch elsewhere.
  const uint64_t tasks = m;
  const auto t0 = Clock::now();
  std::vector<std::future<MicroOut>> futures;
  for (uint64_t t = 0; t < tasks; ++t) {
    const uint64_t first = t * m / tasks, last = (t + 1) * m / tasks;
    futures.push_back(worker.submit(
        [&run, trace, batch, mb, first, count = last - first](DeviceSlot& slot) {
          MicroOut out;
          out.first = first;
          out.count = count;
          out.use.device = slot.index;
          const runtime::Trace::Track track =
              trace != nullptr ? trace->host_thread(driver_thread(slot.index)) : runtime::Trace::Track{};
          for (uint64_t j = first; j < first + count; ++j) {
            const uint64_t r0 = j * mb, rows = std::min(mb, batch - r0);
            auto span = runtime::Trace::scope(trace, track,
                                              trace != nullptr ? fmt::format("micro-batch {} (rows {}-{})", j, r0, r0 + rows - 1)
                                                               : std::string());
            const auto a = Clock::now();
            const MicroBatchUse u = run(slot, j, r0, rows);
            const auto b = Clock::now();
            span.end();
            out.use.busy.emplace_back(a, b);
            out.use.busy_s += seconds(b - a);
            out.use.perf += u.perf;
            out.use.macs += u.macs;
            out.use.rows += rows;
            ++out.use.items;
          }
          return out;
        },
        TaskOptions{std::nullopt, fmt::format("data micro-batch {}", first)}));
  }
  std::vector<MicroOut> outs = collect(futures);
  const auto t1 = Clock::now();
  StrategyReport rep;
  rep.strategy = "data";
  rep.micro_batch = mb;
  rep.micro_batches = m;
  std::vector<TaskUse> uses;
  for (const MicroOut& d : outs) uses.push_back(d.use);
  finish_report(rep, uses, k_dev, k_dev, t0, t1);
  for (DeviceUse& du : rep.per_device) {
    // The device's micro-batches as row ranges, adjacent ones joined (outs are in micro-batch order).
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [first, last) micro-batches
    for (const MicroOut& d : outs) {
      if (d.use.device != du.index) continue;
      if (!ranges.empty() && ranges.back().second == d.first) {
        ranges.back().second = d.first + d.count;
      } else {
        ranges.emplace_back(d.first, d.first + d.count);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [a, b] : ranges) parts.push_back(fmt::format("rows {}-{}", a * mb, std::min(batch, b * mb) - 1));
    du.role = fmt::format("{}", fmt::join(parts, ", "));
  }
  return rep;
}

// ---- pipeline -------------------------------------------------------------------------------------
NetworkStrategyResult run_pipeline(Worker& worker, const nn::QNetwork& net, std::span<const int8_t> x,
                                   uint64_t batch, const NetworkStrategyOptions& o) {
  std::vector<uint64_t> macs;
  for (const nn::QLayer& l : net.layers) macs.push_back(layer_macs(l));
  const std::vector<std::pair<size_t, size_t>> stages = partition_layers(macs, worker.size());
  const auto n_stages = static_cast<unsigned>(stages.size());
  const uint64_t mb = o.micro_batch > 0 ? std::min(o.micro_batch, batch) : auto_micro_batch(batch, n_stages);
  const uint64_t m = (batch + mb - 1) / mb;
  const uint64_t k0 = net.input_features, n_out = net.layers.back().n;
  const bool int32_out = net.layers.back().int32_output;

  // Stage networks (the last layer of every stage but the final one has an int8 output).
  std::vector<nn::QNetwork> sub(n_stages);
  std::vector<std::string> keys(n_stages);
  std::vector<uint64_t> stage_macs(n_stages, 0);
  for (unsigned s = 0; s < n_stages; ++s) {
    sub[s].input_features = net.layers[stages[s].first].k;
    sub[s].input_scale = 1.0f;
    for (size_t l = stages[s].first; l <= stages[s].second; ++l) {
      sub[s].layers.push_back(net.layers[l]);
      stage_macs[s] += macs[l];
    }
    keys[s] = std::string(kNetworkKeyPrefix) + network_fingerprint(sub[s]);
  }
  // channels[s] feeds stage s (s >= 1); the final stage's results go to out_i32 / out_q.
  std::vector<std::unique_ptr<Channel<int8_t>>> channels;
  for (unsigned s = 0; s <= n_stages; ++s) channels.push_back(std::make_unique<Channel<int8_t>>(m));
  Channel<int32_t> out_i32(m);

  const auto t0 = Clock::now();
  std::vector<std::future<TaskUse>> futures;
  for (unsigned s = 0; s < n_stages; ++s) {
    const NetworkStrategyOptions* opt = &o;
    const bool last_stage = s + 1 == n_stages;
    futures.push_back(worker.submit(
        [&, s, opt, last_stage](DeviceSlot& slot) {
          TaskUse use;
          use.device = slot.index;
          use.macs = batch * stage_macs[s];
          auto up_span = runtime::Trace::scope(
              opt->trace, opt->trace != nullptr ? opt->trace->host_thread(driver_thread(slot.index)) : runtime::Trace::Track{},
              "upload weights + compile");
          std::shared_ptr<ResidentNetwork> rn = resident_network(slot, keys[s], sub[s], mb, opt->plan, use.uploaded);
          up_span.end();
          std::vector<int8_t> pad;
          std::shared_ptr<const std::vector<int8_t>> held;
          const GetFn get = [&](uint64_t j, bool block) -> std::optional<std::span<const int8_t>> {
            if (s == 0) return micro_input(x, batch, k0, mb, j, pad);
            held = channels[s]->get(j, block);
            if (!held) return std::nullopt;
            return std::span<const int8_t>(*held);
          };
          const PutFn put = [&](uint64_t j, runtime::NetworkRunResult&& r) {
            if (last_stage && int32_out) {
              out_i32.put(j, std::move(r.output_i32));
            } else {
              channels[s + 1]->put(j, std::move(r.output_q));
            }
          };
          stream(slot, *rn, 0, m, get, put, use, opt->trace);
          return use;
        },
        TaskOptions{s, fmt::format("pipeline stage {} (layers {}-{})", s, stages[s].first, stages[s].second)}));
  }
  const std::vector<TaskUse> uses = collect<TaskUse>(futures, [&](size_t failed) {
    for (size_t c = failed + 1; c <= n_stages; ++c) {
      channels[c]->close(fmt::format("pipeline stage {} stopped: stage {} failed", c, failed));
    }
    out_i32.close(fmt::format("pipeline stage {} failed", failed));
  });
  const auto t1 = Clock::now();

  NetworkStrategyResult res;
  for (uint64_t j = 0; j < m; ++j) {
    const uint64_t rows = std::min(mb, batch - j * mb);
    if (int32_out) {
      const auto v = out_i32.get(j, false);
      res.output_i32.insert(res.output_i32.end(), v->begin(), v->begin() + static_cast<ptrdiff_t>(rows * n_out));
    } else {
      const auto v = channels[n_stages]->get(j, false);
      res.output_q.insert(res.output_q.end(), v->begin(), v->begin() + static_cast<ptrdiff_t>(rows * n_out));
    }
  }
  for (const uint64_t v : macs) res.macs += batch * v;
  StrategyReport& rep = res.report;
  rep.strategy = "pipeline";
  rep.micro_batch = mb;
  rep.micro_batches = m;
  rep.stages = stages;
  finish_report(rep, uses, worker.size(), n_stages, t0, t1);
  // Steady state: the last stage has started, the first has not finished.
  const Clock::time_point w0 = uses.back().busy.empty() ? t1 : uses.back().busy.front().first;
  const Clock::time_point w1 = uses.front().busy.empty() ? t0 : uses.front().busy.back().second;
  rep.steady_s = w1 > w0 ? seconds(w1 - w0) : 0.0;
  for (unsigned s = 0; s < n_stages; ++s) {
    auto it = std::find_if(rep.per_device.begin(), rep.per_device.end(),
                           [&](const DeviceUse& d) { return d.index == uses[s].device; });
    if (it == rep.per_device.end()) continue;
    it->role = fmt::format("stage {}: layers {}-{}", s, stages[s].first, stages[s].second);
    if (rep.steady_s <= 0) continue;
    double in = 0;
    for (const auto& [a, b] : uses[s].busy) {
      const auto lo = std::max(a, w0), hi = std::min(b, w1);
      if (hi > lo) in += seconds(hi - lo);
    }
    it->steady_busy_fraction = in / rep.steady_s;
  }
  return res;
}

}  // namespace

std::string_view to_string(Strategy s) { return s == Strategy::kPipeline ? "pipeline" : "data"; }

std::optional<Strategy> parse_strategy(std::string_view name) {
  if (name == "data") return Strategy::kData;
  if (name == "pipeline") return Strategy::kPipeline;
  return std::nullopt;
}

std::vector<std::pair<size_t, size_t>> partition_layers(std::span<const uint64_t> layer_macs, unsigned stages) {
  const size_t n = layer_macs.size();
  if (n == 0) return {};
  const size_t s_count = std::clamp<size_t>(stages, 1, n);
  // best[s][i]: the smallest possible largest stage sum for layers [0, i) in s stages; cut[s][i]
  // the start of the last of them.
  std::vector<uint64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_macs[i];
  constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> best(s_count + 1, std::vector<uint64_t>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(s_count + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= s_count; ++s) {
    for (size_t i = s; i <= n; ++i) {
      for (size_t j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == kInf) continue;
        const uint64_t v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<std::pair<size_t, size_t>> out(s_count);
  size_t end = n;
  for (size_t s = s_count; s >= 1; --s) {
    const size_t begin = cut[s][end];
    out[s - 1] = {begin, end - 1};
    end = begin;
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> split_columns(uint64_t n, unsigned parts, uint64_t align) {
  if (n == 0) return {};
  align = std::max<uint64_t>(align, 1);
  const uint64_t units = (n + align - 1) / align;
  const uint64_t p = std::clamp<uint64_t>(parts, 1, units);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t i = 0; i < p; ++i) {
    const uint64_t u0 = i * units / p, u1 = (i + 1) * units / p;
    out.emplace_back(u0 * align, std::min(n, u1 * align));
  }
  return out;
}

std::string network_fingerprint(const nn::QNetwork& net) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits
  auto bytes = [&](const void* p, size_t size) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < size; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  };
  auto value = [&](uint64_t v) { bytes(&v, sizeof v); };
  value(net.input_features);
  value(net.layers.size());
  for (const nn::QLayer& l : net.layers) {
    value(l.k);
    value(l.n);
    value((l.relu ? 1u : 0u) | (l.int32_output ? 2u : 0u));
    value(l.w_q.size());
    bytes(l.w_q.data(), l.w_q.size());
    value(l.bias_q.size());
    bytes(l.bias_q.data(), l.bias_q.size() * sizeof(int32_t));
    value(l.mult.size());
    bytes(l.mult.data(), l.mult.size() * sizeof(int32_t));
    value(l.shift.size());
    bytes(l.shift.data(), l.shift.size());
    value(l.lut.size());
    bytes(l.lut.data(), l.lut.size());
  }
  return fmt::format("{:016x}-{}x{}", h, net.layers.size(), net.input_features);
}

NetworkStrategyResult run_network_parallel(Worker& worker, const nn::QNetwork& net, std::span<const int8_t> input_q,
                                           uint64_t batch, const NetworkStrategyOptions& options) {
  check_input(worker, net, input_q, batch);
  return options.strategy == Strategy::kPipeline ? run_pipeline(worker, net, input_q, batch, options)
                                                 : run_data(worker, net, input_q, batch, options);
}

StrategyReport run_micro_batches(Worker& worker, uint64_t batch, uint64_t micro_batch, const MicroBatchFn& run,
                                 runtime::Trace* trace) {
  return micro_batches(worker, batch, micro_batch, run, trace);
}

GemmStrategyResult gemm_parallel(Worker& worker, std::span<const int8_t> a, std::span<const int8_t> b,
                                 const runtime::GemmShape& shape, runtime::Trace* trace) {
  if (shape.m == 0 || shape.k == 0 || shape.n == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("gemm: shape {}x{}x{} has a zero dimension", shape.m, shape.k, shape.n));
  }
  if (a.size() != shape.m * shape.k || b.size() != shape.k * shape.n) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("gemm: A has {} elements (expected {}), B has {} (expected {})",
                                                         a.size(), shape.m * shape.k, b.size(), shape.k * shape.n));
  }
  const auto blocks = split_columns(shape.n, worker.size(), std::max(1u, worker.options().config.array_n));
  struct BlockOut {
    std::vector<int32_t> c;
    TaskUse use;
  };
  const auto t0 = Clock::now();
  std::vector<std::future<BlockOut>> futures;
  for (const auto& [c0, c1] : blocks) {
    const uint64_t nb = c1 - c0;
    std::vector<int8_t> bb(shape.k * nb);
    for (uint64_t r = 0; r < shape.k; ++r) {
      std::copy_n(b.begin() + static_cast<ptrdiff_t>(r * shape.n + c0), nb, bb.begin() + static_cast<ptrdiff_t>(r * nb));
    }
    futures.push_back(worker.submit(
        [a, bb = std::move(bb), shape, nb, c0, c1, trace](DeviceSlot& slot) {
          BlockOut out;
          const int64_t begin_ns = trace != nullptr ? trace->now_ns() : 0;
          const runtime::GemmResult r = runtime::gemm(slot.device, a, bb, {shape.m, shape.k, nb});
          if (trace != nullptr) {
            // Split at the measured submit + wait time (compile and upload before it).
            const int64_t end_ns = trace->now_ns();
            const int64_t run_ns = std::min<int64_t>(end_ns - begin_ns, static_cast<int64_t>(r.wall_s * 1e9));
            const runtime::Trace::Track t = trace->host_thread(driver_thread(slot.index));
            trace->host_span(t, fmt::format("gemm columns {}-{}", c0, c1 - 1), "host", begin_ns, end_ns);
            trace->host_span(t, "compile + upload", "host", begin_ns, end_ns - run_ns);
            trace->host_span(t, "submit + wait", "host", end_ns - run_ns, end_ns);
            trace->device_program(slot.index, runtime::trace_device_name(slot.device),
                                  fmt::format("int8 gemm columns {}-{}", c0, c1 - 1), r.perf);
          }
          out.c = r.c;
          out.use.device = slot.index;
          out.use.items = 1;
          out.use.rows = nb;
          out.use.macs = shape.m * shape.k * nb;
          out.use.busy_s = r.wall_s;
          out.use.perf = r.perf;
          return out;
        },
        TaskOptions{std::nullopt, fmt::format("gemm columns {}-{}", c0, c1 - 1)}));
  }
  const std::vector<BlockOut> outs = collect(futures);
  const auto t1 = Clock::now();

  GemmStrategyResult res;
  res.c.assign(shape.m * shape.n, 0);
  std::vector<TaskUse> uses;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [c0, c1] = blocks[i];
    const uint64_t nb = c1 - c0;
    for (uint64_t r = 0; r < shape.m; ++r) {
      std::copy_n(outs[i].c.begin() + static_cast<ptrdiff_t>(r * nb), nb,
                  res.c.begin() + static_cast<ptrdiff_t>(r * shape.n + c0));
    }
    uses.push_back(outs[i].use);
  }
  StrategyReport& rep = res.report;
  rep.strategy = "columns";
  rep.micro_batches = blocks.size();
  finish_report(rep, uses, worker.size(), worker.size(), t0, t1);
  for (DeviceUse& du : rep.per_device) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (outs[i].use.device == du.index) parts.push_back(fmt::format("columns {}-{}", blocks[i].first, blocks[i].second - 1));
    }
    du.role = fmt::format("{}", fmt::join(parts, ", "));
  }
  return res;
}

}  // namespace tpuw::worker
