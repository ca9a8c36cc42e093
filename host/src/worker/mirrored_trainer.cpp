// Mirrored-variable training (tpuw/worker/mirrored_trainer.h; docs/scaling.md).
#include "tpuw/worker/mirrored_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "step_args.h"
#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer.h"

namespace tpuw::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kKey = "tpuw.mirrored_trainer.replica";

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Replica {
  std::unique_ptr<runtime::DeviceTrainer> trainer;
};

runtime::DeviceTrainer* replica(DeviceSlot& s) {
  const auto it = s.resident.find(kKey);
  if (it == s.resident.end()) return nullptr;
  return static_cast<Replica*>(it->second.get())->trainer.get();
}

bool is_device_failure(ErrorKind k) { return k == ErrorKind::kDeviceFault || k == ErrorKind::kTimeout; }

// Level sizes of the reduction tree over n leaves: n, ceil(n/2), ..., 1.
std::vector<size_t> tree_levels(size_t n) {
  std::vector<size_t> v{n};
  while (v.back() > 1) v.push_back((v.back() + 1) / 2);
  return v;
}

// One tree node from its children: a + b elementwise (fp32, round to nearest even), or a alone.
std::vector<float> combine(std::vector<float> a, const std::vector<float>* b) {
  if (b != nullptr) {
    for (size_t j = 0; j < a.size(); ++j) a[j] = a[j] + (*b)[j];
  }
  return a;
}

// The shared state of one step: chunk gradients arriving per layer, the reduction tree, losses.
struct StepCtx {
  size_t layers = 0;
  std::vector<size_t> levels;  // node counts per tree level
  std::mutex mu;
  std::condition_variable cv;
  // nodes[l][k][i]: node i of level k of layer l's tree; ready: computed; claimed: being computed.
  std::vector<std::vector<std::vector<std::vector<float>>>> nodes;
  std::vector<std::vector<std::vector<char>>> ready, claimed, consumed;
  size_t roots = 0;  // layers whose root is ready
  size_t in_flight = 0;  // nodes being computed
  bool abort = false;
  std::vector<double> row_loss;  // per row of the step, written by the device that owns the row
  Clock::time_point t0;
  std::vector<std::pair<double, double>> ops;  // reduction intervals, seconds from t0
  std::function<void(const std::string&, const std::string&, Clock::time_point, Clock::time_point)> trace;
  double reduce_s = 0;

  StepCtx(size_t L, size_t chunks, size_t rows) : layers(L), levels(tree_levels(chunks)), row_loss(rows, 0.0) {
    nodes.resize(L);
    ready.resize(L);
    claimed.resize(L);
    consumed.resize(L);
    for (size_t l = 0; l < L; ++l) {
      for (size_t n : levels) {
        nodes[l].emplace_back(n);
        ready[l].emplace_back(n, 0);
        claimed[l].emplace_back(n, 0);
        consumed[l].emplace_back(n, 0);
      }
    }
  }

  // A node whose children are ready and that nobody computes yet, latest layer first (mu held).
  bool find_op(size_t& fl, size_t& fk, size_t& fi) const {
    for (size_t l = layers; l-- > 0;) {
      for (size_t k = 1; k < levels.size(); ++k) {
        for (size_t i = 0; i < levels[k]; ++i) {
          if (claimed[l][k][i] != 0) continue;
          const size_t a = 2 * i, b = 2 * i + 1;
          if (ready[l][k - 1][a] != 0 && (b >= levels[k - 1] || ready[l][k - 1][b] != 0)) {
            fl = l;
            fk = k;
            fi = i;
            return true;
          }
        }
      }
    }
    return false;
  }

  // Node (k, i) of layer l computed elsewhere (another rank). Ignored if already here.
  void deposit_node(size_t l, size_t k, size_t i, std::vector<float> g) {
    std::lock_guard lk(mu);
    if (ready[l][k][i] != 0) return;
    nodes[l][k][i] = std::move(g);
    ready[l][k][i] = 1;
    claimed[l][k][i] = 1;
    if (k + 1 == levels.size()) ++roots;
    cv.notify_all();
  }

  // Blocks until the reducer can do nothing more with what is here; returns the maximal nodes
  // (ready, not yet summed into a parent) as (layer, level, index) with their data copied.
  struct Node {
    size_t l, k, i;
    std::vector<float> data;
  };
  std::vector<Node> frontier() {
    std::unique_lock lk(mu);
    size_t a = 0, b = 0, c = 0;
    cv.wait(lk, [&] { return in_flight == 0 && !find_op(a, b, c); });
    std::vector<Node> out;
    for (size_t l = 0; l < layers; ++l) {
      for (size_t k = 0; k < levels.size(); ++k) {
        for (size_t i = 0; i < levels[k]; ++i) {
          if (ready[l][k][i] != 0 && consumed[l][k][i] == 0) out.push_back(Node{l, k, i, nodes[l][k][i]});
        }
      }
    }
    return out;
  }

  // Chunk c's gradient of layer l. A redone chunk delivers the same bits again: ignored.
  void deposit(size_t l, size_t c, std::vector<float> g) {
    std::lock_guard lk(mu);
    if (ready[l][0][c] != 0) return;
    nodes[l][0][c] = std::move(g);
    ready[l][0][c] = 1;
    claimed[l][0][c] = 1;
    if (levels.size() == 1) ++roots;
    cv.notify_all();
  }

  // The reducer thread: computes any node whose children are ready, latest layer first, until
  // every root is ready or the step is abandoned.
  void reduce() {
    std::unique_lock lk(mu);
    for (;;) {
      if (abort || roots == layers) return;
      size_t fl = 0, fk = 0, fi = 0;
      if (!find_op(fl, fk, fi)) {
        cv.wait(lk);
        continue;
      }
      claimed[fl][fk][fi] = 1;
      ++in_flight;
      std::vector<float> a = std::move(nodes[fl][fk - 1][2 * fi]);
      consumed[fl][fk - 1][2 * fi] = 1;
      std::vector<float> b;
      const bool has_b = 2 * fi + 1 < levels[fk - 1];
      if (has_b) {
        b = std::move(nodes[fl][fk - 1][2 * fi + 1]);
        consumed[fl][fk - 1][2 * fi + 1] = 1;
      }
      lk.unlock();
      const auto s = Clock::now();
      std::vector<float> out = combine(std::move(a), has_b ? &b : nullptr);
      const auto e = Clock::now();
      lk.lock();
      nodes[fl][fk][fi] = std::move(out);
      ready[fl][fk][fi] = 1;
      --in_flight;
      ops.emplace_back(seconds(t0, s), seconds(t0, e));
      if (trace) trace("reducer", fmt::format("sum layer {} level {} node {}", fl, fk, fi), s, e);
      reduce_s += seconds(s, e);
      if (fk + 1 == levels.size()) ++roots;
      cv.notify_all();
    }
  }

  const std::vector<float>& root(size_t l) const { return nodes[l].back()[0]; }
};

struct ComputeOut {
  bool lost = false;  // the device's replica is gone (it was reset): reload and redo
  uint64_t forward_cycles = 0, backward_cycles = 0;
  uint64_t gather_bytes = 0;
  double gather_s = 0;
  Clock::time_point end;
};

struct UpdateOut {
  bool lost = false;
  uint64_t cycles = 0;
  uint64_t broadcast_bytes = 0;
  double broadcast_s = 0;
  std::vector<std::vector<uint8_t>> shard;  // sharded update: this device's updated shard per layer
  uint64_t shard_bytes = 0;                 // updated shards written into this replica
  double shard_s = 0;                       // reading its shard and writing the others'
};

// Softmax cross-entropy of one row with the gradient divided by the step's rows (as
// compiler::softmax_cross_entropy over the whole step computes it, bit for bit).
double row_loss(const float* z, int64_t y, int64_t classes, int64_t step_rows, float* grad) {
  double mx = z[0];
  for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, static_cast<double>(z[c]));
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - mx);
  for (int64_t c = 0; c < classes; ++c) {
    const double p = std::exp(static_cast<double>(z[c]) - mx) / sum;
    grad[c] = static_cast<float>((p - (c == y ? 1.0 : 0.0)) / static_cast<double>(step_rows));
  }
  return std::log(sum) - (static_cast<double>(z[y]) - mx);
}

// The ranks' exchange: a status byte (0 ok, 1 error), then either the error (kind, message) or the
// rank's rows' losses and its maximal local tree nodes.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_array(const T* p, size_t n) {
    put<uint64_t>(n);
    const auto* b = reinterpret_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, int rank) : bytes_(b), rank_(rank) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_array() {
    const auto n = get<uint64_t>();
    if (n > (bytes_.size() - pos_) / sizeof(T)) need(bytes_.size() + 1);
    std::vector<T> v(n);
    std::memcpy(v.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  void need(size_t n) const {
    if (pos_ + n > bytes_.size()) {
      throw Error(ErrorKind::kInternal,
                  fmt::format("mirrored training: the exchange from rank {} is truncated ({} bytes)", rank_,
                              bytes_.size()));
    }
  }
  const std::vector<uint8_t>& bytes_;
  int rank_;
  size_t pos_ = 0;
};

// Waits for every future (results and errors dropped): tasks may reference the caller's data.
template <class T>
void drain(std::vector<std::optional<std::future<T>>>& fs) {
  for (auto& f : fs) {
    if (f && f->valid()) f->wait();
  }
}

}  // namespace

std::vector<float> tree_sum(std::vector<std::vector<float>> parts) {
  if (parts.empty()) return {};
  while (parts.size() > 1) {
    std::vector<std::vector<float>> up;
    for (size_t i = 0; i < parts.size(); i += 2) {
      if (i + 1 < parts.size() && parts[i + 1].size() != parts[i].size()) {
        throw Error(ErrorKind::kInvalidArgument, "tree_sum: parts of different sizes");
      }
      up.push_back(combine(std::move(parts[i]), i + 1 < parts.size() ? &parts[i + 1] : nullptr));
    }
    parts = std::move(up);
  }
  return std::move(parts[0]);
}

double softmax_cross_entropy_row(const float* z, int64_t label, int64_t classes, int64_t step_rows, float* grad) {
  return row_loss(z, label, classes, step_rows, grad);
}

struct MirroredTrainer::Impl {
  Worker& worker;
  compiler::TrainModel model;
  int64_t batch = 0;
  int64_t chunk_rows = 0;
  runtime::SgdConfig sgd;
  MirroredOptions opts;
  unsigned K = 0;
  uint32_t array_n = 0;
  std::string backend;
  int64_t steps = 0;
  MirroredStats last, total;
  std::vector<std::string> events;

  Impl(Worker& w, compiler::TrainModel m, int64_t b, const runtime::SgdConfig& s, const MirroredOptions& o)
      : worker(w), model(std::move(m)), batch(b), sgd(s), opts(o), K(w.size()) {}

  void hook(DeviceSlot& s, const std::string& phase) const {
    if (opts.fault_hook) opts.fault_hook(s, steps + 1, phase);
  }
  void span(unsigned device, const std::string& name, Clock::time_point a, Clock::time_point b) const {
    if (opts.trace) opts.trace(fmt::format("device {}", device), name, a, b);
  }

  std::unique_ptr<runtime::DeviceTrainer> make_replica(Device& dev) const {
    return std::make_unique<runtime::DeviceTrainer>(dev, model, chunk_rows, sgd);
  }

  // Reloads device d's replica from the first other device that still holds one; throws
  // Error(kDeviceFault) when none does or d cannot take it.
  void reload(unsigned d, const std::string& why) {
    std::optional<std::vector<uint8_t>> bytes;
    unsigned src = 0;
    for (unsigned e = 0; e < K && !bytes; ++e) {
      if (e == d) continue;
      try {
        bytes = worker
                    .submit(
                        [](DeviceSlot& s) -> std::optional<std::vector<uint8_t>> {
                          runtime::DeviceTrainer* t = replica(s);
                          if (t == nullptr) return std::nullopt;
                          return t->replica_bytes();
                        },
                        TaskOptions{.device = e, .name = fmt::format("mirrored: read replica {}", e)})
                    .get();
        src = e;
      } catch (const Error&) {
        bytes.reset();  // that one failed too: try the next
      }
    }
    if (!bytes) {
      throw Error(ErrorKind::kDeviceFault,
                  fmt::format("mirrored training, step {}: device {} failed ({}) and no other device holds a replica "
                              "to reload it from",
                              steps + 1, d, why));
    }
    worker
        .submit(
            [this, &bytes](DeviceSlot& s) {
              auto r = std::make_shared<Replica>();
              r->trainer = make_replica(s.device);
              r->trainer->load_replica_bytes(*bytes);
              s.resident[kKey] = std::move(r);
            },
            TaskOptions{.device = d, .name = fmt::format("mirrored: reload replica {}", d)})
        .get();
    events.push_back(fmt::format("step {}: device {} failed ({}); reset by the worker, reloaded from device {} ({} bytes)",
                                 steps + 1, d, why, src, bytes->size()));
  }
};

MirroredTrainer::MirroredTrainer(Worker& worker, compiler::TrainModel model, int64_t batch,
                                 const runtime::SgdConfig& sgd, const MirroredOptions& options)
    : impl_(std::make_unique<Impl>(worker, std::move(model), batch, sgd, options)) {
  Impl& im = *impl_;
  if (batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("mirrored trainer: batch {} < 1", batch));
  if (options.chunks < 1 || options.chunks > batch) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("mirrored trainer: {} chunks for batch {}: must be in [1, batch]", options.chunks, batch));
  }
  im.chunk_rows = (batch + options.chunks - 1) / options.chunks;
  std::vector<std::future<std::pair<uint32_t, std::string>>> fs;
  for (unsigned d = 0; d < im.K; ++d) {
    fs.push_back(worker.submit(
        [&im](DeviceSlot& s) {
          auto r = std::make_shared<Replica>();
          r->trainer = im.make_replica(s.device);
          s.resident[kKey] = std::move(r);
          return std::pair<uint32_t, std::string>{s.device.info().params.array_n, s.device.info().backend};
        },
        TaskOptions{.device = d, .name = fmt::format("mirrored: replica {}", d)}));
  }
  std::exception_ptr first;
  for (auto& f : fs) {
    try {
      const auto [n, b] = f.get();
      im.array_n = n;
      im.backend = b;
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

MirroredTrainer::~MirroredTrainer() = default;

uint64_t MirroredTrainer::memory_bytes(const compiler::TrainModel& model, int64_t batch, int64_t chunks,
                                       uint32_t array_n) {
  const int64_t c = std::max<int64_t>(chunks, 1);
  return runtime::DeviceTrainer::memory_bytes(model, (std::max<int64_t>(batch, 1) + c - 1) / c, array_n);
}

runtime::TrainStepReport MirroredTrainer::step(std::span<const float> inputs, std::span<const int64_t> labels,
                                               int64_t rows) {
  Impl& im = *impl_;
  const int64_t in = im.model.input_features, classes = im.model.classes();
  detail::check_step_args("mirrored trainer", im.model, im.batch, inputs, labels, rows);
  const size_t L = im.model.layers.size();
  const auto nc = static_cast<size_t>((rows + im.chunk_rows - 1) / im.chunk_rows);
  auto ctx = std::make_shared<StepCtx>(L, nc, static_cast<size_t>(rows));
  ctx->t0 = Clock::now();
  ctx->trace = im.opts.trace;
  MirroredStats st;

  const auto compute = [&im, ctx, inputs, labels, rows, in, classes, L](size_t c0, size_t c1) {
    return [&im, ctx, inputs, labels, rows, in, classes, L, c0, c1](DeviceSlot& s) {
      ComputeOut o;
      runtime::DeviceTrainer* t = replica(s);
      if (t == nullptr) {
        o.lost = true;
        return o;
      }
      for (size_t c = c0; c < c1; ++c) {
        const int64_t r0 = static_cast<int64_t>(c) * im.chunk_rows;
        const int64_t n = std::min(im.chunk_rows, rows - r0);
        const std::string fwd = fmt::format("forward chunk {}", c);
        im.hook(s, fwd);
        const auto f0 = Clock::now();
        const std::vector<float> z =
            t->forward_chunk(inputs.subspan(static_cast<size_t>(r0 * in), static_cast<size_t>(n * in)), n);
        o.forward_cycles += t->last_perf()[0].cycles;
        im.span(s.index, fwd, f0, Clock::now());
        std::vector<float> dz(static_cast<size_t>(n * classes));
        for (int64_t i = 0; i < n; ++i) {
          ctx->row_loss[static_cast<size_t>(r0 + i)] =
              row_loss(z.data() + i * classes, labels[static_cast<size_t>(r0 + i)], classes, rows,
                       dz.data() + i * classes);
        }
        t->set_logit_grad(dz, n);
        for (size_t l = L; l-- > 0;) {
          const std::string bwd = fmt::format("backward chunk {} layer {}", c, l);
          im.hook(s, bwd);
          const auto b0 = Clock::now();
          o.backward_cycles += t->backward_layer(l);
          const auto g0 = Clock::now();
          im.span(s.index, bwd, b0, g0);
          std::vector<float> g = t->read_gradient(l);
          const auto g1 = Clock::now();
          o.gather_s += seconds(g0, g1);
          im.span(s.index, fmt::format("gather chunk {} layer {}", c, l), g0, g1);
          o.gather_bytes += 4 * g.size();
          ctx->deposit(l, c, std::move(g));
        }
      }
      o.end = Clock::now();
      return o;
    };
  };

  // The reducer thread; abandoned (and joined) if the compute phase ends in an error.
  struct Reducer {
    std::shared_ptr<StepCtx> ctx;
    std::thread thread;
    ~Reducer() { stop(); }
    void stop() {
      {
        std::lock_guard lk(ctx->mu);
        ctx->abort = true;
      }
      ctx->cv.notify_all();
      if (thread.joinable()) thread.join();
    }
  } reducer{ctx, std::thread([ctx] { ctx->reduce(); })};
  const auto stop_reducer = [&] { reducer.stop(); };

  // Compute phase: replica g = rank*K + d of the P*K takes chunks [g*nc/(P*K), (g+1)*nc/(P*K)).
  const size_t P = im.opts.collective != nullptr ? static_cast<size_t>(im.opts.collective->size()) : 1;
  const size_t R = im.opts.collective != nullptr ? static_cast<size_t>(im.opts.collective->rank()) : 0;

  std::vector<std::pair<size_t, size_t>> range(im.K);
  std::vector<std::optional<std::future<ComputeOut>>> fs(im.K);
  std::vector<ComputeOut> outs(im.K);
  std::vector<unsigned> redone(im.K, 0);
  const auto submit_compute = [&](unsigned d) {
    fs[d] = im.worker.submit(compute(range[d].first, range[d].second),
                             TaskOptions{.device = d, .name = fmt::format("mirrored: step {} device {}", im.steps + 1, d)});
  };
  const auto fail_step = [&](const std::string& what, ErrorKind kind) {
    stop_reducer();
    drain(fs);
    if (P > 1) {
      // The other ranks wait for this rank's part in the exchange: tell them, then stop.
      Writer w;
      w.put<uint8_t>(1);
      w.put<uint32_t>(static_cast<uint32_t>(kind));
      w.put_array(what.data(), what.size());
      try {
        (void)im.opts.collective->allgather(w.bytes);
      } catch (const Error&) {  // they are gone too: the local error is the one to report
      }
    }
    throw Error(kind, P > 1 ? fmt::format("rank {}: {}", R, what) : what);
  };
  const size_t replicas = P * im.K;
  for (unsigned d = 0; d < im.K; ++d) {
    const size_t g = R * im.K + d;
    range[d] = {g * nc / replicas, (g + 1) * nc / replicas};
    if (range[d].first < range[d].second) submit_compute(d);
  }
  for (unsigned d = 0; d < im.K; ++d) {
    while (fs[d]) {
      std::string why;
      try {
        ComputeOut o = fs[d]->get();
        fs[d].reset();
        if (!o.lost) {
          outs[d] = o;
          break;
        }
        why = "its replica was lost in a device reset";
      } catch (const Error& e) {
        fs[d].reset();
        if (!is_device_failure(e.kind())) fail_step(e.what(), e.kind());
        why = e.what();
      }
      if (++redone[d] > im.opts.max_recoveries) {
        fail_step(fmt::format("mirrored training, step {}: device {} failed {} times in one step, last: {}",
                              im.steps + 1, d, redone[d], why),
                  ErrorKind::kDeviceFault);
      }
      try {
        im.reload(d, why);
      } catch (const Error& e) {
        fail_step(e.what(), e.kind());
      }
      im.events.push_back(fmt::format("step {}: device {} redoes chunks {}-{}", im.steps + 1, d, range[d].first,
                                      range[d].second - 1));
      ++st.recoveries;
      submit_compute(d);
    }
  }
  if (P > 1) {
    // The ranks' exchange: this rank's rows' losses and maximal local tree nodes to every rank.
    const auto x0 = Clock::now();
    Writer w;
    w.put<uint8_t>(0);
    for (unsigned d = 0; d < im.K; ++d) {
      if (range[d].first >= range[d].second) continue;
      const auto r0 = static_cast<size_t>(range[d].first * static_cast<size_t>(im.chunk_rows));
      const auto r1 = std::min(static_cast<size_t>(rows), range[d].second * static_cast<size_t>(im.chunk_rows));
      w.put<uint64_t>(r0);
      w.put_array(ctx->row_loss.data() + r0, r1 - r0);
    }
    w.put<uint64_t>(UINT64_MAX);
    for (const StepCtx::Node& n : ctx->frontier()) {
      w.put<uint64_t>(n.l);
      w.put<uint64_t>(n.k);
      w.put<uint64_t>(n.i);
      w.put_array(n.data.data(), n.data.size());
    }
    w.put<uint64_t>(UINT64_MAX);
    std::vector<std::vector<uint8_t>> all;
    try {
      all = im.opts.collective->allgather(w.bytes);
    } catch (const Error& e) {
      stop_reducer();
      throw Error(e.kind(), fmt::format("rank {}: mirrored training, step {}: {}", R, im.steps + 1, e.what()));
    }
    // Errors first: every rank stops the same way.
    for (size_t q = 0; q < all.size(); ++q) {
      Reader rd(all[q], static_cast<int>(q));
      if (rd.get<uint8_t>() != 0) {
        const auto kind = static_cast<ErrorKind>(rd.get<uint32_t>());
        const std::vector<char> msg = rd.get_array<char>();
        stop_reducer();
        throw Error(kind, fmt::format("rank {}: {}", q, std::string(msg.begin(), msg.end())));
      }
    }
    for (size_t q = 0; q < all.size(); ++q) {
      if (q == R) continue;
      st.exchange_bytes += all[q].size();
      Reader rd(all[q], static_cast<int>(q));
      (void)rd.get<uint8_t>();
      for (auto r0 = rd.get<uint64_t>(); r0 != UINT64_MAX; r0 = rd.get<uint64_t>()) {
        const std::vector<double> v = rd.get_array<double>();
        if (r0 + v.size() > ctx->row_loss.size()) throw Error(ErrorKind::kInternal, "mirrored: rows out of range");
        std::copy(v.begin(), v.end(), ctx->row_loss.begin() + static_cast<std::ptrdiff_t>(r0));
      }
      for (auto l = rd.get<uint64_t>(); l != UINT64_MAX; l = rd.get<uint64_t>()) {
        const auto k = rd.get<uint64_t>(), i = rd.get<uint64_t>();
        std::vector<float> data = rd.get_array<float>();
        if (l >= L || k >= ctx->levels.size() || i >= ctx->levels[k]) {
          throw Error(ErrorKind::kInternal, fmt::format("mirrored: rank {} sent node ({}, {}, {})", q, l, k, i));
        }
        ctx->deposit_node(l, k, i, std::move(data));
      }
    }
    const auto x1 = Clock::now();
    st.exchange_seconds = seconds(x0, x1);
    if (im.opts.trace) im.opts.trace(fmt::format("rank {}", R), "exchange", x0, x1);
  }
  reducer.thread.join();
  const auto t_compute = Clock::now();
  Clock::time_point compute_end = ctx->t0;
  for (unsigned d = 0; d < im.K; ++d) {
    if (range[d].first < range[d].second) compute_end = std::max(compute_end, outs[d].end);
    st.gather_bytes += outs[d].gather_bytes;
    st.gather_seconds += outs[d].gather_s;
  }
  const double ce = seconds(ctx->t0, compute_end);
  for (const auto& [a, b] : ctx->ops) st.hidden_seconds += std::max(0.0, std::min(b, ce) - a);
  st.reduce_seconds = ctx->reduce_s;
  st.compute_seconds = seconds(ctx->t0, t_compute);

  // Update phase: every replica the same reduced gradient. Sharded (P·K > 1, the default): replica
  // g = rank·K + d updates shard g of P·K of every layer (ZeRO-1 style), then the updated shards
  // are copied into every other replica (across ranks by one allgather), so each replica again
  // holds all variables, bit-identical to the whole update. Not sharded: every replica runs the
  // whole update program.
  const size_t S = im.opts.shard_update ? replicas : 1;
  const size_t g0 = S > 1 ? R * im.K : 0;  // this rank's first shard
  const auto update = [&im, ctx, L, S, g0](DeviceSlot& s) {
    UpdateOut o;
    runtime::DeviceTrainer* t = replica(s);
    if (t == nullptr) {
      o.lost = true;
      return o;
    }
    const size_t shard = S > 1 ? g0 + s.index : 0;
    for (size_t l = 0; l < L; ++l) {
      im.hook(s, fmt::format("update layer {}", l));
      const auto w0 = Clock::now();
      if (S > 1) {
        t->write_gradient_shard(l, shard, S, ctx->root(l));
        o.broadcast_bytes += 4 * t->gradient_shard_elems(l, shard, S);
      } else {
        t->write_gradient(l, ctx->root(l));
        o.broadcast_bytes += 4 * ctx->root(l).size();
      }
      const auto w1 = Clock::now();
      o.broadcast_s += seconds(w0, w1);
      im.span(s.index, fmt::format("broadcast layer {}", l), w0, w1);
      o.cycles += t->apply_update_shard(l, shard, S);
      im.span(s.index, fmt::format("update layer {}", l), w1, Clock::now());
    }
    if (S > 1) {
      const auto x0 = Clock::now();
      for (size_t l = 0; l < L; ++l) o.shard.push_back(t->shard_bytes(l, shard, S));
      const auto x1 = Clock::now();
      o.shard_s += seconds(x0, x1);
      im.span(s.index, "read updated shard", x0, x1);
    }
    return o;
  };
  std::vector<std::optional<std::future<UpdateOut>>> us(im.K);
  for (unsigned d = 0; d < im.K; ++d) {
    us[d] = im.worker.submit(update, TaskOptions{.device = d, .name = fmt::format("mirrored: update {}", d)});
  }
  std::vector<UpdateOut> uo(im.K);
  std::vector<std::pair<unsigned, std::string>> failed;
  for (unsigned d = 0; d < im.K; ++d) {
    try {
      uo[d] = us[d]->get();
      if (uo[d].lost) failed.emplace_back(d, "its replica was lost in a device reset");
    } catch (const Error& e) {
      if (!is_device_failure(e.kind())) {
        drain(us);
        throw;
      }
      failed.emplace_back(d, e.what());
    }
  }
  if (S == 1) {
    // A replica that failed during the update takes the updated variables of a healthy one.
    for (const auto& [d, why] : failed) {
      im.reload(d, why + ", during the update");
      ++st.recoveries;
    }
  } else {
    // Only replica g ever updates shard g, so every other replica still holds shard g's starting
    // values: reload a failed device from one of this rank's others and redo its shard. With
    // several ranks an error here travels in the shards' allgather, as in the compute phase.
    std::string error;
    ErrorKind error_kind = ErrorKind::kInternal;
    try {
      for (auto [d, why] : failed) {
        for (unsigned tries = 1;; ++tries) {
          if (tries > im.opts.max_recoveries) {
            throw Error(ErrorKind::kDeviceFault,
                        fmt::format("mirrored training, step {}: device {} failed {} times in its update, last: {}",
                                    im.steps + 1, d, tries - 1, why));
          }
          im.reload(d, why + ", during the update");
          ++st.recoveries;
          im.events.push_back(fmt::format("step {}: device {} redoes its update shard", im.steps + 1, d));
          try {
            uo[d] = im.worker.submit(update, TaskOptions{.device = d, .name = fmt::format("mirrored: update {}", d)})
                        .get();
            if (!uo[d].lost) break;
            why = "its replica was lost in a device reset";
          } catch (const Error& e) {
            if (!is_device_failure(e.kind())) throw;
            why = e.what();
          }
        }
      }
    } catch (const Error& e) {
      if (P == 1) throw;
      error = e.what();
      error_kind = e.kind();
    }
    // shards[g][l]: replica g's updated shard of layer l.
    std::vector<std::vector<std::vector<uint8_t>>> shards(S);
    if (error.empty()) {
      for (unsigned d = 0; d < im.K; ++d) shards[g0 + d] = std::move(uo[d].shard);
    }
    if (P > 1) {
      const auto x0 = Clock::now();
      Writer w;
      if (!error.empty()) {
        w.put<uint8_t>(1);
        w.put<uint32_t>(static_cast<uint32_t>(error_kind));
        w.put_array(error.data(), error.size());
      } else {
        w.put<uint8_t>(0);
        for (unsigned d = 0; d < im.K; ++d) {
          for (const std::vector<uint8_t>& b : shards[g0 + d]) w.put_array(b.data(), b.size());
        }
      }
      std::vector<std::vector<uint8_t>> all;
      try {
        all = im.opts.collective->allgather(w.bytes);
      } catch (const Error& e) {
        if (!error.empty()) throw Error(error_kind, fmt::format("rank {}: {}", R, error));
        throw Error(e.kind(), fmt::format("rank {}: mirrored training, step {}: {}", R, im.steps + 1, e.what()));
      }
      if (!error.empty()) throw Error(error_kind, fmt::format("rank {}: {}", R, error));
      for (size_t q = 0; q < all.size(); ++q) {
        Reader rd(all[q], static_cast<int>(q));
        if (rd.get<uint8_t>() != 0) {
          const auto kind = static_cast<ErrorKind>(rd.get<uint32_t>());
          const std::vector<char> msg = rd.get_array<char>();
          throw Error(kind, fmt::format("rank {}: {}", q, std::string(msg.begin(), msg.end())));
        }
      }
      for (size_t q = 0; q < all.size(); ++q) {
        if (q == R) continue;
        st.exchange_bytes += all[q].size();
        Reader rd(all[q], static_cast<int>(q));
        (void)rd.get<uint8_t>();
        for (size_t d = 0; d < im.K; ++d) {
          for (size_t l = 0; l < L; ++l) shards[q * im.K + d].push_back(rd.get_array<uint8_t>());
        }
        if (!rd.done()) throw Error(ErrorKind::kInternal, fmt::format("mirrored: rank {} sent extra shard bytes", q));
      }
      const auto x1 = Clock::now();
      st.exchange_seconds += seconds(x0, x1);
      if (im.opts.trace) im.opts.trace(fmt::format("rank {}", R), "exchange shards", x0, x1);
    }
    // Every replica takes the other replicas' updated shards.
    const auto take = [&im, &shards, L, S, g0](DeviceSlot& s) {
      UpdateOut o;
      runtime::DeviceTrainer* t = replica(s);
      if (t == nullptr) {
        o.lost = true;
        return o;
      }
      const auto x0 = Clock::now();
      for (size_t q = 0; q < S; ++q) {
        if (q == g0 + s.index) continue;
        for (size_t l = 0; l < L; ++l) {
          t->load_shard_bytes(l, q, S, shards[q].at(l));
          o.shard_bytes += shards[q][l].size();
        }
      }
      const auto x1 = Clock::now();
      o.shard_s = seconds(x0, x1);
      im.span(s.index, "load updated shards", x0, x1);
      return o;
    };
    std::vector<std::optional<std::future<UpdateOut>>> ts(im.K);
    for (unsigned d = 0; d < im.K; ++d) {
      ts[d] = im.worker.submit(take, TaskOptions{.device = d, .name = fmt::format("mirrored: shards {}", d)});
    }
    failed.clear();
    for (unsigned d = 0; d < im.K; ++d) {
      try {
        const UpdateOut o = ts[d]->get();
        uo[d].shard_bytes += o.shard_bytes;
        uo[d].shard_s += o.shard_s;
        if (o.lost) failed.emplace_back(d, "its replica was lost in a device reset");
      } catch (const Error& e) {
        if (!is_device_failure(e.kind())) {
          drain(ts);
          throw;
        }
        failed.emplace_back(d, e.what());
      }
    }
    // Those that completed hold the whole updated state.
    for (const auto& [d, why] : failed) {
      im.reload(d, why + ", while taking the updated shards");
      ++st.recoveries;
    }
  }
  st.update_seconds = seconds(t_compute, Clock::now());
  for (unsigned d = 0; d < im.K; ++d) {
    st.broadcast_bytes += uo[d].broadcast_bytes;
    st.broadcast_seconds += uo[d].broadcast_s;
    st.shard_bytes += uo[d].shard_bytes;
    st.shard_seconds += uo[d].shard_s;
  }

  runtime::TrainStepReport r;
  r.rows = rows;
  double loss = 0;
  for (double v : ctx->row_loss) loss += v;
  r.loss = loss / static_cast<double>(rows);
  unsigned slow = 0;
  uint64_t most = 0;
  for (unsigned d = 0; d < im.K; ++d) {
    const uint64_t c = outs[d].forward_cycles + outs[d].backward_cycles + uo[d].cycles;
    if (c > most) {
      most = c;
      slow = d;
    }
  }
  r.forward_cycles = outs[slow].forward_cycles;
  r.backward_cycles = outs[slow].backward_cycles;
  r.update_cycles = uo[slow].cycles;
  r.cycles = most;
  r.macs = im.model.step_macs(rows);
  // The MACs are the whole global batch's, computed by every replica of every rank.
  const size_t ranks = im.opts.collective != nullptr ? static_cast<size_t>(im.opts.collective->size()) : 1;
  const double peak = static_cast<double>(im.array_n) * static_cast<double>(im.array_n) * static_cast<double>(ranks * im.K);
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  r.host_loss_bytes = static_cast<uint64_t>(rows * classes) * 8;

  st.device_cycles.resize(im.K);
  for (unsigned d = 0; d < im.K; ++d) {
    st.device_cycles[d] = {outs[d].forward_cycles, outs[d].backward_cycles, uo[d].cycles};
  }
  ++im.steps;
  st.steps = 1;
  im.last = st;
  MirroredStats& tot = im.total;
  tot.steps += 1;
  tot.gather_bytes += st.gather_bytes;
  tot.broadcast_bytes += st.broadcast_bytes;
  tot.gather_seconds += st.gather_seconds;
  tot.reduce_seconds += st.reduce_seconds;
  tot.broadcast_seconds += st.broadcast_seconds;
  tot.hidden_seconds += st.hidden_seconds;
  tot.compute_seconds += st.compute_seconds;
  tot.update_seconds += st.update_seconds;
  tot.recoveries += st.recoveries;
  tot.exchange_bytes += st.exchange_bytes;
  tot.exchange_seconds += st.exchange_seconds;
  tot.shard_bytes += st.shard_bytes;
  tot.shard_seconds += st.shard_seconds;
  return r;
}

std::vector<float> MirroredTrainer::logits(std::span<const float> inputs, int64_t rows) {
  Impl& im = *impl_;
  std::exception_ptr last;
  for (unsigned d = 0; d < im.K; ++d) {
    try {
      std::optional<std::vector<float>> v =
          im.worker
              .submit(
                  [&](DeviceSlot& s) -> std::optional<std::vector<float>> {
                    runtime::DeviceTrainer* t = replica(s);
                    if (t == nullptr) return std::nullopt;
                    return t->logits(inputs, rows);
                  },
                  TaskOptions{.device = d, .name = "mirrored: logits"})
              .get();
      if (v) return std::move(*v);
    } catch (const Error& e) {
      if (!is_device_failure(e.kind())) throw;
      last = std::current_exception();
    }
  }
  if (last) std::rethrow_exception(last);
  throw Error(ErrorKind::kDeviceFault, "mirrored trainer: no device holds a replica");
}

runtime::TrainState MirroredTrainer::state() const {
  const Impl& im = *impl_;
  for (unsigned d = 0; d < im.K; ++d) {
    try {
      std::optional<runtime::TrainState> s =
          im.worker
              .submit(
                  [](DeviceSlot& slot) -> std::optional<runtime::TrainState> {
                    runtime::DeviceTrainer* t = replica(slot);
                    if (t == nullptr) return std::nullopt;
                    return t->state();
                  },
                  TaskOptions{.device = d, .name = "mirrored: state"})
              .get();
      if (s) {
        s->steps = im.steps;
        return std::move(*s);
      }
    } catch (const Error& e) {
      if (!is_device_failure(e.kind()) || d + 1 == im.K) throw;
    }
  }
  throw Error(ErrorKind::kDeviceFault, "mirrored trainer: no device holds a replica");
}

void MirroredTrainer::load_state(const runtime::TrainState& s) {
  Impl& im = *impl_;
  std::vector<std::future<void>> fs;
  for (unsigned d = 0; d < im.K; ++d) {
    fs.push_back(im.worker.submit(
        [&](DeviceSlot& slot) {
          if (replica(slot) == nullptr) {
            auto r = std::make_shared<Replica>();
            r->trainer = im.make_replica(slot.device);
            slot.resident[kKey] = std::move(r);
          }
          replica(slot)->load_state(s);
        },
        TaskOptions{.device = d, .name = "mirrored: load state"}));
  }
  std::exception_ptr first;
  for (auto& f : fs) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  im.steps = s.steps;
}

int64_t MirroredTrainer::batch() const { return impl_->batch; }
int64_t MirroredTrainer::classes() const { return impl_->model.classes(); }
std::string MirroredTrainer::name() const { return impl_->backend; }
int64_t MirroredTrainer::chunk_rows() const { return impl_->chunk_rows; }
unsigned MirroredTrainer::devices() const { return impl_->K; }
const MirroredStats& MirroredTrainer::last_step() const { return impl_->last; }
const MirroredStats& MirroredTrainer::totals() const { return impl_->total; }
const std::vector<std::string>& MirroredTrainer::events() const { return impl_->events; }

}  // namespace tpuw::worker
