// Pipeline training (tpuw/worker/pipeline_trainer.h; docs/scaling.md "Pipeline training").
#include "tpuw/worker/pipeline_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <future>
#include <limits>
#include <mutex>
#include <optional>

#include "step_args.h"
#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer.h"
#include "tpuw/worker/mirrored_trainer.h"

namespace tpuw::worker {
namespace {

constexpr const char* kKey = "tpuw.pipeline_trainer.stage";

struct Stage {
  std::unique_ptr<runtime::DeviceTrainer> trainer;
};

runtime::DeviceTrainer* stage_trainer(DeviceSlot& s) {
  const auto it = s.resident.find(kKey);
  if (it == s.resident.end()) return nullptr;
  return static_cast<Stage*>(it->second.get())->trainer.get();
}

// Training MACs of one row through layer l: forward, dW, and dX unless it is the first layer.
uint64_t layer_macs(const compiler::TrainModel& m, size_t l) {
  const auto io = static_cast<uint64_t>(m.layers[l].in) * static_cast<uint64_t>(m.layers[l].out);
  return (l == 0 ? 2 : 3) * io;
}

// One device program of a stage, for the cycle schedule.
struct Op {
  enum Kind { kForward, kBackward, kUpdate } kind;
  size_t micro = 0;
  uint64_t cycles = 0;
};

struct StageOut {
  std::vector<Op> ops;
  uint64_t forward = 0, backward = 0, update = 0;
  uint64_t boundary_bytes = 0, stash_bytes = 0, gather_bytes = 0;
};

// What the stages of one step share: the messages across the boundaries and the rows' losses.
struct StepCtx {
  std::mutex mu;
  std::condition_variable cv;
  bool abort = false;
  // fwd[s][m]: the activation for stage s of micro-batch m; bwd[s][m]: the input gradient for stage s.
  std::vector<std::vector<std::optional<std::vector<uint8_t>>>> fwd, bwd;
  std::vector<double> row_loss;

  StepCtx(size_t K, size_t n, size_t rows) : fwd(K), bwd(K), row_loss(rows, 0.0) {
    for (size_t s = 0; s < K; ++s) {
      fwd[s].resize(n);
      bwd[s].resize(n);
    }
  }
  void post(std::optional<std::vector<uint8_t>>& slot, std::vector<uint8_t> v) {
    {
      std::lock_guard lk(mu);
      slot = std::move(v);
    }
    cv.notify_all();
  }
  // Waits for a message; throws when another stage has failed (its error is the one reported).
  std::vector<uint8_t> take(std::optional<std::vector<uint8_t>>& slot) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return abort || slot.has_value(); });
    if (!slot) throw Error(ErrorKind::kCancelled, "pipeline training: another stage failed");
    std::vector<uint8_t> v = std::move(*slot);
    slot.reset();
    return v;
  }
  void fail() {
    {
      std::lock_guard lk(mu);
      abort = true;
    }
    cv.notify_all();
  }
};

}  // namespace

std::vector<PipelineStage> partition_layers(const compiler::TrainModel& model, unsigned stages) {
  const size_t L = model.layers.size();
  if (stages < 1 || stages > L) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("pipeline training: {} stages for a model of {} layers: each stage needs at least one layer",
                            stages, L));
  }
  std::vector<uint64_t> pre(L + 1, 0);
  for (size_t l = 0; l < L; ++l) pre[l + 1] = pre[l] + layer_macs(model, l);
  // best[k][j]: the least largest stage over splits of layers [0, j) into k stages; cut[k][j] the
  // first layer of the k-th stage in that split (the first, smallest such cut).
  constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> best(stages + 1, std::vector<uint64_t>(L + 1, kInf));
  std::vector<std::vector<size_t>> cut(stages + 1, std::vector<size_t>(L + 1, 0));
  best[0][0] = 0;
  for (unsigned k = 1; k <= stages; ++k) {
    for (size_t j = k; j <= L; ++j) {
      for (size_t i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInf) continue;
        const uint64_t v = std::max(best[k - 1][i], pre[j] - pre[i]);
        if (v < best[k][j]) {
          best[k][j] = v;
          cut[k][j] = i;
        }
      }
    }
  }
  std::vector<PipelineStage> out(stages);
  size_t j = L;
  for (unsigned k = stages; k >= 1; --k) {
    const size_t i = cut[k][j];
    out[k - 1] = PipelineStage{k - 1, i, j - i, pre[j] - pre[i]};
    j = i;
  }
  return out;
}

struct PipelineTrainer::Impl {
  Worker& worker;
  compiler::TrainModel model;
  int64_t batch = 0;
  int64_t micro_rows = 0;
  int64_t micro_batches = 0;
  runtime::SgdConfig sgd;
  unsigned K = 0;
  uint32_t array_n = 0;
  std::string backend;
  std::vector<PipelineStage> stages;
  int64_t steps = 0;
  PipelineStats last, last_full, total;

  Impl(Worker& w, compiler::TrainModel m, int64_t b, const runtime::SgdConfig& s)
      : worker(w), model(std::move(m)), batch(b), sgd(s), K(w.size()) {}

  // The stage's trainer, or Error(kDeviceFault) when a device reset took it.
  runtime::DeviceTrainer& trainer(DeviceSlot& s) const {
    runtime::DeviceTrainer* t = stage_trainer(s);
    if (t == nullptr) {
      throw Error(ErrorKind::kDeviceFault,
                  fmt::format("pipeline training, step {}: device {} (stage {}) lost its variables in a device reset; "
                              "pipeline training keeps no replica to reload them from (resume from a checkpoint)",
                              steps + 1, s.index, s.index));
    }
    return *t;
  }

  // Runs `task` on every device at once (tasks may wait on each other); the first real error wins.
  template <class F>
  auto on_all(F task, const std::string& what, const std::shared_ptr<StepCtx>& ctx = nullptr) {
    using R = std::invoke_result_t<F&, DeviceSlot&>;
    std::vector<std::future<R>> fs;
    for (unsigned d = 0; d < K; ++d) {
      fs.push_back(worker.submit(
          [task, ctx](DeviceSlot& s) mutable -> R {
            try {
              return task(s);
            } catch (...) {
              if (ctx) ctx->fail();
              throw;
            }
          },
          TaskOptions{.device = d, .name = fmt::format("pipeline: {} stage {}", what, d)}));
    }
    std::vector<R> out(K);
    std::exception_ptr first, cancelled;
    for (unsigned d = 0; d < K; ++d) {
      try {
        out[d] = fs[d].get();
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kCancelled) {
          if (!cancelled) cancelled = std::current_exception();
        } else if (!first) {
          first = std::current_exception();
        }
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    if (cancelled) std::rethrow_exception(cancelled);
    return out;
  }
};

PipelineTrainer::PipelineTrainer(Worker& worker, compiler::TrainModel model, int64_t batch,
                                 const runtime::SgdConfig& sgd, const PipelineOptions& options)
    : impl_(std::make_unique<Impl>(worker, std::move(model), batch, sgd)) {
  Impl& im = *impl_;
  if (batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("pipeline trainer: batch {} < 1", batch));
  if (options.micro_batches < 1 || options.micro_batches > batch) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("pipeline trainer: {} micro-batches for batch {}: must be in [1, batch]",
                            options.micro_batches, batch));
  }
  im.micro_batches = options.micro_batches;
  im.micro_rows = (batch + options.micro_batches - 1) / options.micro_batches;
  im.stages = partition_layers(im.model, im.K);
  const auto info = im.on_all(
      [&im](DeviceSlot& s) {
        auto st = std::make_shared<Stage>();
        st->trainer = std::make_unique<runtime::DeviceTrainer>(s.device, im.model, im.micro_rows, im.sgd);
        s.resident[kKey] = std::move(st);
        return std::pair<uint32_t, std::string>{s.device.info().params.array_n, s.device.info().backend};
      },
      "create");
  im.array_n = info[0].first;
  im.backend = info[0].second;
}

PipelineTrainer::~PipelineTrainer() = default;

uint64_t PipelineTrainer::memory_bytes(const compiler::TrainModel& model, int64_t batch, int64_t micro_batches,
                                       uint32_t array_n) {
  const int64_t m = std::max<int64_t>(micro_batches, 1);
  return runtime::DeviceTrainer::memory_bytes(model, (std::max<int64_t>(batch, 1) + m - 1) / m, array_n);
}

runtime::TrainStepReport PipelineTrainer::step(std::span<const float> inputs, std::span<const int64_t> labels,
                                               int64_t rows) {
  Impl& im = *impl_;
  const int64_t in = im.model.input_features, classes = im.model.classes();
  detail::check_step_args("pipeline trainer", im.model, im.batch, inputs, labels, rows);
  const auto n = static_cast<size_t>((rows + im.micro_rows - 1) / im.micro_rows);
  const unsigned K = im.K;
  auto ctx = std::make_shared<StepCtx>(K, n, static_cast<size_t>(rows));
  const auto stage_task = [&im, ctx, inputs, labels, rows, in, classes, n, K](DeviceSlot& s) {
    StageOut o;
    runtime::DeviceTrainer& t = im.trainer(s);
    const PipelineStage& sg = im.stages[s.index];
    const size_t a = sg.first_layer, b = sg.first_layer + sg.layers;
    const bool first = s.index == 0, last = s.index + 1 == K;
    const auto mrows = [&](size_t m) {
      return std::min(im.micro_rows, rows - static_cast<int64_t>(m) * im.micro_rows);
    };
    std::vector<std::vector<uint8_t>> stash(n);
    std::vector<std::vector<float>> dz(last ? n : 0);
    // Forward: micro-batches 0 .. n-1.
    for (size_t m = 0; m < n; ++m) {
      const int64_t r0 = static_cast<int64_t>(m) * im.micro_rows, nm = mrows(m);
      if (first) {
        t.write_input(inputs.subspan(static_cast<size_t>(r0 * in), static_cast<size_t>(nm * in)), nm);
      } else {
        const std::vector<uint8_t> act = ctx->take(ctx->fwd[s.index][m]);
        o.boundary_bytes += act.size();
        t.write_activation(a - 1, act);
      }
      uint64_t c = 0;
      for (size_t l = a; l < b; ++l) c += t.forward_layer(l);
      o.ops.push_back(Op{Op::kForward, m, c});
      o.forward += c;
      if (last) {
        const std::vector<float> z = t.read_logits(nm);
        dz[m].resize(static_cast<size_t>(nm * classes));
        for (int64_t i = 0; i < nm; ++i) {
          ctx->row_loss[static_cast<size_t>(r0 + i)] = softmax_cross_entropy_row(
              z.data() + i * classes, labels[static_cast<size_t>(r0 + i)], classes, rows, dz[m].data() + i * classes);
        }
      } else {
        ctx->post(ctx->fwd[s.index + 1][m], t.read_activation(b - 1));
      }
      // The last stage runs micro-batch n-1's backward right away: nothing to keep for it.
      if (!(last && m + 1 == n)) {
        stash[m] = t.stash_activations(a, b);
        o.stash_bytes += stash[m].size();
      }
    }
    // Backward: micro-batches n-1 .. 0, each layer's gradient read out per micro-batch.
    std::vector<std::vector<std::vector<float>>> grads(sg.layers, std::vector<std::vector<float>>(n));
    for (size_t m = n; m-- > 0;) {
      if (!stash[m].empty()) t.restore_activations(a, b, stash[m]);
      stash[m] = {};
      if (last) {
        t.set_logit_grad(dz[m], mrows(m));
      } else {
        const std::vector<uint8_t> g = ctx->take(ctx->bwd[s.index][m]);
        o.boundary_bytes += g.size();
        t.write_input_grad(b, g);
      }
      uint64_t c = 0;
      for (size_t l = b; l-- > a;) {
        c += t.backward_layer(l);
        grads[l - a][m] = t.read_gradient(l);
        o.gather_bytes += 4 * grads[l - a][m].size();
      }
      o.ops.push_back(Op{Op::kBackward, m, c});
      o.backward += c;
      if (!first) ctx->post(ctx->bwd[s.index - 1][m], t.read_input_grad(a));
    }
    // Update: the fixed tree over the micro-batches, then the same program as every trainer.
    uint64_t c = 0;
    for (size_t l = a; l < b; ++l) {
      t.write_gradient(l, tree_sum(std::move(grads[l - a])));
      c += t.apply_update(l);
    }
    o.ops.push_back(Op{Op::kUpdate, 0, c});
    o.update = c;
    return o;
  };
  std::vector<StageOut> outs = im.on_all(stage_task, fmt::format("step {}", im.steps + 1), ctx);

  // The cycle schedule: each stage's programs in order, a forward after the stage before finished
  // that micro-batch, a backward after the stage after finished it.
  std::vector<std::vector<uint64_t>> fend(K, std::vector<uint64_t>(n, 0)), bend(K, std::vector<uint64_t>(n, 0));
  std::vector<std::vector<char>> fdone(K, std::vector<char>(n, 0)), bdone(K, std::vector<char>(n, 0));
  std::vector<size_t> next(K, 0);
  std::vector<uint64_t> clock(K, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (unsigned s = 0; s < K; ++s) {
      while (next[s] < outs[s].ops.size()) {
        const Op& op = outs[s].ops[next[s]];
        uint64_t ready = 0;
        if (op.kind == Op::kForward && s > 0) {
          if (fdone[s - 1][op.micro] == 0) break;
          ready = fend[s - 1][op.micro];
        } else if (op.kind == Op::kBackward && s + 1 < K) {
          if (bdone[s + 1][op.micro] == 0) break;
          ready = bend[s + 1][op.micro];
        }
        clock[s] = std::max(clock[s], ready) + op.cycles;
        if (op.kind == Op::kForward) {
          fend[s][op.micro] = clock[s];
          fdone[s][op.micro] = 1;
        } else if (op.kind == Op::kBackward) {
          bend[s][op.micro] = clock[s];
          bdone[s][op.micro] = 1;
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (unsigned s = 0; s < K; ++s) {
    if (next[s] != outs[s].ops.size()) throw Error(ErrorKind::kInternal, "pipeline: the cycle schedule is stuck");
  }
  PipelineStats st;
  st.steps = 1;
  st.step_cycles = *std::max_element(clock.begin(), clock.end());
  st.busy_cycles.resize(K);
  unsigned busiest = 0;
  for (unsigned s = 0; s < K; ++s) {
    st.busy_cycles[s] = outs[s].forward + outs[s].backward + outs[s].update;
    if (st.busy_cycles[s] > st.busy_cycles[busiest]) busiest = s;
    st.boundary_bytes += outs[s].boundary_bytes;
    st.stash_bytes += outs[s].stash_bytes;
    st.gather_bytes += outs[s].gather_bytes;
  }

  runtime::TrainStepReport r;
  r.rows = rows;
  double loss = 0;
  for (double v : ctx->row_loss) loss += v;
  r.loss = loss / static_cast<double>(rows);
  r.forward_cycles = outs[busiest].forward;
  r.backward_cycles = outs[busiest].backward;
  r.update_cycles = outs[busiest].update;
  r.cycles = st.step_cycles;
  r.macs = im.model.step_macs(rows);
  const double peak = static_cast<double>(im.array_n) * static_cast<double>(im.array_n) * K;
  r.utilization = r.cycles > 0 ? static_cast<double>(r.macs) / (peak * static_cast<double>(r.cycles)) : 0.0;
  r.host_loss_bytes = static_cast<uint64_t>(rows * classes) * 8;

  ++im.steps;
  im.last = st;
  if (rows == im.batch) im.last_full = st;
  PipelineStats& tot = im.total;
  tot.steps += 1;
  tot.step_cycles += st.step_cycles;
  tot.busy_cycles.resize(K, 0);
  for (unsigned s = 0; s < K; ++s) tot.busy_cycles[s] += st.busy_cycles[s];
  tot.boundary_bytes += st.boundary_bytes;
  tot.stash_bytes += st.stash_bytes;
  tot.gather_bytes += st.gather_bytes;
  return r;
}

std::vector<float> PipelineTrainer::logits(std::span<const float> inputs, int64_t rows) {
  Impl& im = *impl_;
  const int64_t in = im.model.input_features;
  if (rows < 0 || inputs.size() != static_cast<uint64_t>(rows * in)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("pipeline trainer: {} input values for {} rows of {} features", inputs.size(), rows, in));
  }
  std::vector<float> out;
  for (int64_t r0 = 0; r0 < rows; r0 += im.micro_rows) {
    const int64_t n = std::min(im.micro_rows, rows - r0);
    std::vector<uint8_t> act;
    for (unsigned s = 0; s < im.K; ++s) {
      const PipelineStage& sg = im.stages[s];
      const bool last = s + 1 == im.K;
      act = im.worker
                .submit(
                    [&, s, last](DeviceSlot& slot) {
                      runtime::DeviceTrainer& t = im.trainer(slot);
                      if (s == 0) {
                        t.write_input(inputs.subspan(static_cast<size_t>(r0 * in), static_cast<size_t>(n * in)), n);
                      } else {
                        t.write_activation(sg.first_layer - 1, act);
                      }
                      for (size_t l = sg.first_layer; l < sg.first_layer + sg.layers; ++l) (void)t.forward_layer(l);
                      if (!last) return t.read_activation(sg.first_layer + sg.layers - 1);
                      const std::vector<float> z = t.read_logits(n);
                      out.insert(out.end(), z.begin(), z.end());
                      return std::vector<uint8_t>{};
                    },
                    TaskOptions{.device = s, .name = fmt::format("pipeline: logits stage {}", s)})
                .get();
    }
  }
  return out;
}

runtime::TrainState PipelineTrainer::state() const {
  Impl& im = *impl_;
  std::vector<runtime::TrainState> parts = im.on_all([&im](DeviceSlot& s) { return im.trainer(s).state(); }, "state");
  runtime::TrainState out;
  for (unsigned s = 0; s < im.K; ++s) {
    const PipelineStage& sg = im.stages[s];
    for (size_t l = sg.first_layer; l < sg.first_layer + sg.layers; ++l) {
      const compiler::TrainLayer& ly = im.model.layers[l];
      for (const std::string& name : {ly.weight, ly.bias}) {
        if (name.empty()) continue;
        out.params[name] = parts[s].params.at(name);
        out.momentum[name] = parts[s].momentum.at(name);
      }
    }
  }
  out.steps = im.steps;
  return out;
}

void PipelineTrainer::load_state(const runtime::TrainState& s) {
  Impl& im = *impl_;
  (void)im.on_all(
      [&im, &s](DeviceSlot& slot) {
        if (stage_trainer(slot) == nullptr) {
          auto st = std::make_shared<Stage>();
          st->trainer = std::make_unique<runtime::DeviceTrainer>(slot.device, im.model, im.micro_rows, im.sgd);
          slot.resident[kKey] = std::move(st);
        }
        stage_trainer(slot)->load_state(s);
        return 0;
      },
      "load state");
  im.steps = s.steps;
}

int64_t PipelineTrainer::batch() const { return impl_->batch; }
int64_t PipelineTrainer::classes() const { return impl_->model.classes(); }
std::string PipelineTrainer::name() const { return impl_->backend; }
int64_t PipelineTrainer::micro_rows() const { return impl_->micro_rows; }
int64_t PipelineTrainer::micro_batches() const { return impl_->micro_batches; }
const std::vector<PipelineStage>& PipelineTrainer::stages() const { return impl_->stages; }
const PipelineStats& PipelineTrainer::last_step() const { return impl_->last; }
const PipelineStats& PipelineTrainer::last_full_step() const { return impl_->last_full; }
const PipelineStats& PipelineTrainer::totals() const { return impl_->total; }

}  // namespace tpuw::worker
