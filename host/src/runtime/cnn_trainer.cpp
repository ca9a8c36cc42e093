// Training CNNs in bf16 (tpuw/runtime/cnn_trainer.h).
#include "tpuw/runtime/cnn_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/training.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv_bf16.h"
#include "tpuw/runtime/conv_train_bf16.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/runtime/maxpool.h"
#include "owning_trainer.h"
#include "train_programs.h"

namespace tpuw::runtime {
namespace {

using Kind = Bf16ConvLayer::Kind;

std::vector<float> rounded(std::span<const float> v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16::round(v[i]);
  return r;
}

// One parameter array: fp32 master (the model's values) and momentum.
struct Param {
  std::vector<float>* master = nullptr;
  std::vector<float> momentum;
};

}  // namespace

struct CnnTrainer::Impl {
  Device* device = nullptr;
  compiler::CnnTrainModel model;
  int64_t batch = 0;
  SgdConfig sgd;
  uint32_t array_n = 16;
  int64_t steps = 0;
  uint64_t host_bytes = 0;
  // Momentum per parameter, by initializer name (the masters live in model.net).
  std::map<std::string, std::vector<float>> momentum;

  // Figures of the current step.
  uint64_t cycles = 0, macs = 0;

  // Every device program of a step, compiled once per batch size (train_programs.h); null without
  // a device. `slot` names a program: conv-part layer l uses l*kSlots + role, dense layer i
  // kDenseBase + i*kSlots + role.
  std::unique_ptr<detail::TrainProgramCache> cache;
  static constexpr uint64_t kSlots = 16, kDenseBase = uint64_t{1} << 32;
  enum Role : uint64_t { kFwd = 0, kDx = 1, kDw = 2, kRelu = 3, kPool = 4 /* and 5 */, kResidual = 6, kGradSum = 7, kResidualRelu = 8 };

  const compiler::CnnResidual* residual_to(size_t l) const {
    for (const compiler::CnnResidual& r : model.residuals) {
      if (r.to == l) return &r;
    }
    return nullptr;
  }

  // bf16(relu?(a + b)) (add_bf16): a residual Add, or the two paths of a gradient summed.
  std::vector<float> add(uint64_t slot, std::span<const float> a, std::span<const float> b, bool relu) {
    if (device == nullptr) return add_bf16_host(a, b, relu);
    ReluBackwardResult r = cached ? cache->add(slot, a, b, relu) : add_bf16(*device, a, b, relu);
    cycles += r.cycles;
    return std::move(r.d);
  }
  bool cached = true;  // false for logits(): evaluation batches of any size are not kept

  // Tap lanes: a Conv with one input channel and 2 .. N taps runs on the device as a 1x1
  // convolution over its im2col, tap t in lane t (in_c = taps), so each output pixel is one MATMUL
  // row instead of one per tap, and its dW GEMM gathers one weight tile per pixel block instead of
  // one per tap. Same sums as the tap-by-tap program: there each tap's column sum holds one product
  // (exact), added to the ACC tap after tap; here the products are summed down the column in the
  // same tap order, the same roundings (docs/training.md "Tap lanes"). The input of such a layer,
  // as im2col planes [b][tap][ho][wo], is kept per forward slot for the dW.
  std::map<uint64_t, std::vector<float>> lane_x;
  bool tap_lanes(const Bf16ConvLayer& l) const {
    const uint64_t taps = uint64_t{l.geom.kernel_h} * l.geom.kernel_w;
    return device != nullptr && l.kind == Kind::kConv && l.geom.in_c == 1 && taps > 1 && taps <= array_n;
  }
  static Bf16ConvLayer lane_layer(const Bf16ConvLayer& l) { return detail::tap_lane_layer(l); }
  static std::vector<float> lane_input(const Bf16ConvLayer& l, std::span<const float> x, uint64_t rows) {
    return detail::tap_lane_input(l, x, rows);
  }
  // A Conv / AveragePool: the bf16 convolution program; a MaxPool: the inference max-pool program
  // (identity-weight taps + VECTOR MAX; contract max_pool_bf16_host, which multiplies nothing).
  std::vector<float> conv_fwd(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> a, uint64_t rows) {
    const bool pool = l.kind == Kind::kMaxPool;
    if (device == nullptr) return pool ? max_pool_bf16_host(l, a, rows, array_n) : conv2d_bf16_host(l, a, rows, array_n);
    if (tap_lanes(l)) {
      const Bf16ConvLayer t = lane_layer(l);
      std::vector<float> xl = lane_input(l, a, rows);
      ConvBf16RunResult r = cached ? cache->conv(slot, t, xl, rows) : run_conv2d_bf16(*device, t, xl, rows);
      cycles += r.cycles;
      macs += r.plan.macs();
      if (cached) lane_x[slot] = std::move(xl);
      return std::move(r.y);
    }
    ConvBf16RunResult r = cached ? cache->conv(slot, l, a, rows)
                                 : (pool ? run_max_pool_bf16(*device, l, a, rows) : run_conv2d_bf16(*device, l, a, rows));
    cycles += r.cycles;
    if (!pool) macs += r.plan.macs();
    return std::move(r.y);
  }

  std::vector<float> gemm(uint64_t slot, const Bf16GemmSpec& spec, std::span<const float> a, std::span<const float> b,
                          std::span<const float> bias = {}) {
    if (device == nullptr) return gemm_bf16_host(spec, array_n, rounded(a), rounded(b), {}, bias);
    Bf16GemmResult r = cached ? cache->gemm(slot, spec, a, b, bias) : gemm_bf16(*device, spec, a, b, {}, bias);
    cycles += r.cycles;
    macs += r.plan.macs();
    return std::move(r.c);
  }

  std::vector<float> conv_dx(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> dy, uint64_t rows) {
    if (device == nullptr) return conv_input_grad_bf16_host(l, dy, rows, array_n);
    uint64_t mc = 0;
    // The forward program of this layer (slot - kDx + kFwd) holds its weights: read in place.
    ConvInputGradResult r = detail::conv_input_grad_cached(*cache, slot, l, dy, rows, &mc, slot - kDx + kFwd);
    cycles += r.run.cycles;
    macs += mc;
    host_bytes += r.host_bytes;
    return std::move(r.dx);
  }

  std::vector<float> max_pool_dx(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x,
                                 std::span<const float> y, std::span<const float> dy, uint64_t rows) {
    if (device == nullptr) return max_pool_backward_bf16_host(l, x, y, dy, rows, array_n);
    MaxPoolBackwardResult r = detail::max_pool_backward_cached(*cache, slot, l, x, y, dy, rows);
    cycles += r.cycles;
    macs += r.macs;
    host_bytes += r.host_bytes;
    return std::move(r.dx);
  }

  std::vector<float> relu_bwd(uint64_t slot, std::span<const float> y, std::span<const float> g) {
    if (device == nullptr) return relu_backward_host(y, g);
    ReluBackwardResult r = cache->relu_backward(slot, y, g);
    cycles += r.cycles;
    return std::move(r.d);
  }

  ConvParamGradResult conv_dw(uint64_t slot, const Bf16ConvLayer& l, std::span<const float> x,
                              std::span<const float> dy, uint64_t rows) {
    if (device == nullptr) return conv_param_grads_bf16_host(l, x, dy, rows, array_n);
    const std::vector<float> d = conv_grad_rows(l, dy, rows);
    ConvParamGradResult r;
    // The im2col on the device (one-hot convolutions over the forward's uploaded input), where the
    // layout allows; else laid out here. A tap-lanes layer: the 1x1 layer over the forward's planes
    // (its dW [O][taps] is the layer's [O][1][KH][KW]).
    uint64_t mc = 0;
    const auto lx = lane_x.find(slot - kDw + kFwd);
    const bool lanes = tap_lanes(l) && lx != lane_x.end();
    if (lanes ? cache->conv_param_grads(slot, slot - kDw + kFwd, lane_layer(l), lx->second, d, rows, r, mc)
              : cache->conv_param_grads(slot, slot - kDw + kFwd, l, x, d, rows, r, mc)) {
      cycles += r.gemm.cycles;
      macs += mc;
      host_bytes += r.host_bytes;
      return r;
    }
    const std::vector<float> a = conv_im2col(l, x, rows);
    r.gemm = cache->gemm(slot, detail::conv_param_grad_spec(l, rows), a, d);
    detail::split_conv_param_grads(l, r.gemm.c, r);
    cycles += r.gemm.cycles;
    macs += r.gemm.plan.macs();
    host_bytes += 2 * (a.size() + d.size());
    return r;
  }

  // Forward: acts[l] = input of conv layer l (acts[convs] = the flattened features), head[l] = the
  // dense layer l's output (bf16 values; the last one the fp32 logits).
  void forward(std::span<const float> x, uint64_t rows, std::vector<std::vector<float>>& acts,
               std::vector<std::vector<float>>& head) {
    const compiler::Bf16Cnn& net = model.net;
    acts.assign(1, rounded(x));
    for (size_t l = 0; l < net.convs.size(); ++l) {
      std::vector<float> y = conv_fwd(l * kSlots + kFwd, net.convs[l], acts.back(), rows);
      if (const compiler::CnnResidual* r = residual_to(l)) y = add(l * kSlots + kResidual, y, acts[r->from], r->relu);
      acts.push_back(std::move(y));
    }
    head.clear();
    const std::vector<nn::DenseLayer>& dl = net.head.layers;
    for (size_t i = 0; i < dl.size(); ++i) {
      const bool last = i + 1 == dl.size();
      Bf16GemmSpec s;
      s.shape = {rows, dl[i].k, dl[i].n};
      s.bias = true;
      s.bf16_out = !last || dl[i].relu;
      s.relu = dl[i].relu;
      head.push_back(gemm(kDenseBase + i * kSlots + kFwd, s, i == 0 ? std::span<const float>(acts.back()) : std::span<const float>(head.back()),
                          dl[i].w, dl[i].b));
    }
  }

  // The trained parameters in a fixed order (conv weights and biases, then dense), with their
  // gradients of the step: the flat layout of the device-resident masters.
  struct ParamRef {
    const std::string* name;
    std::vector<float>* w;
    const std::vector<float>* g;
  };
  std::vector<ParamRef> params(const std::vector<ConvParamGradResult>* conv_g,
                               const std::vector<std::vector<float>>* dense_dw,
                               const std::vector<std::vector<float>>* dense_db) {
    std::vector<ParamRef> p;
    compiler::Bf16Cnn& net = model.net;
    for (size_t l = 0; l < net.convs.size(); ++l) {
      if (net.convs[l].kind != Kind::kConv) continue;
      p.push_back({&model.conv_weight[l], &net.convs[l].w, conv_g ? &(*conv_g)[l].dw : nullptr});
      if (!model.conv_bias[l].empty()) {
        p.push_back({&model.conv_bias[l], &net.convs[l].bias, conv_g ? &(*conv_g)[l].db : nullptr});
      }
    }
    for (size_t i = 0; i < net.head.layers.size(); ++i) {
      p.push_back({&model.dense_weight[i], &net.head.layers[i].w, dense_dw ? &(*dense_dw)[i] : nullptr});
      if (!model.dense_bias[i].empty()) {
        p.push_back({&model.dense_bias[i], &net.head.layers[i].b, dense_db ? &(*dense_db)[i] : nullptr});
      }
    }
    return p;
  }

  // Device-resident SGD state: fp32 masters, momentum and the step's gradient, flat in params()
  // order; the update program compiled once. `resident` is false until the first device step and
  // after load_state (the host copies are then written to the device).
  HostBuffer dev_w, dev_v, dev_g;
  std::vector<isa::Word> sgd_code;
  uint64_t sgd_elems = 0;
  bool resident = false;

  void device_update(const std::vector<ParamRef>& ps) {
    uint64_t total = 0;
    for (const ParamRef& p : ps) total += p.w->size();
    const uint64_t an = array_n, bytes = std::max<uint64_t>((total + an - 1) / an * an * 4, 64);
    if (sgd_code.empty() || sgd_elems != total) {
      dev_w = device->alloc(bytes, 4096);
      dev_v = device->alloc(bytes, 4096);
      dev_g = device->alloc(bytes, 4096);
      sgd_code = detail::sgd_program(device->info().params, total, dev_w.addr(), dev_v.addr(), dev_g.addr(), sgd.lr,
                                     sgd.momentum, sgd.weight_decay);
      sgd_elems = total;
      resident = false;
    }
    std::vector<float> flat(total);
    if (!resident) {
      uint64_t at = 0;
      for (const ParamRef& p : ps) {
        std::copy(p.w->begin(), p.w->end(), flat.begin() + static_cast<ptrdiff_t>(at));
        at += p.w->size();
      }
      device->write(dev_w, 0, flat.data(), total * 4);
      at = 0;
      for (const ParamRef& p : ps) {
        const auto it = momentum.find(*p.name);
        if (it != momentum.end() && it->second.size() == p.w->size()) {
          std::copy(it->second.begin(), it->second.end(), flat.begin() + static_cast<ptrdiff_t>(at));
        } else {
          std::fill_n(flat.begin() + static_cast<ptrdiff_t>(at), p.w->size(), 0.0f);
        }
        at += p.w->size();
      }
      device->write(dev_v, 0, flat.data(), total * 4);
      resident = true;
    }
    uint64_t at = 0;
    for (const ParamRef& p : ps) {
      std::copy(p.g->begin(), p.g->end(), flat.begin() + static_cast<ptrdiff_t>(at));
      at += p.g->size();
    }
    device->write(dev_g, 0, flat.data(), total * 4);
    device->clear_perf();
    device->wait(device->submit(sgd_code));
    update_cycles = device->perf().cycles;
    cycles += update_cycles;
    // The masters come back for the next step's weight layouts; the momentum stays resident.
    device->read(dev_w, 0, flat.data(), total * 4);
    at = 0;
    for (const ParamRef& p : ps) {
      std::copy_n(flat.begin() + static_cast<ptrdiff_t>(at), p.w->size(), p.w->begin());
      at += p.w->size();
    }
  }

  // The device-resident momentum, by name (state()).
  std::map<std::string, std::vector<float>> device_momentum() {
    std::map<std::string, std::vector<float>> out;
    const std::vector<ParamRef> ps = params(nullptr, nullptr, nullptr);
    std::vector<float> flat(sgd_elems);
    device->read(dev_v, 0, flat.data(), sgd_elems * 4);
    uint64_t at = 0;
    for (const ParamRef& p : ps) {
      out[*p.name].assign(flat.begin() + static_cast<ptrdiff_t>(at),
                          flat.begin() + static_cast<ptrdiff_t>(at + p.w->size()));
      at += p.w->size();
    }
    return out;
  }
  uint64_t update_cycles = 0;

  // torch.optim.SGD on one parameter in the device's fp32 arithmetic (docs/numerics.md).
  void update(const std::string& name, std::vector<float>& w, std::span<const float> g) {
    std::vector<float>& v = momentum[name];
    if (v.empty()) v.assign(w.size(), 0.0f);
    const uint32_t wd = num::to_bits(sgd.weight_decay), mom = num::to_bits(sgd.momentum), nlr = num::to_bits(-sgd.lr);
    for (size_t i = 0; i < w.size(); ++i) {
      const uint32_t wi = num::to_bits(w[i]);
      uint32_t d = num::to_bits(g[i]);
      if (sgd.weight_decay != 0.0f) d = num::axpy(wi, wd, d);
      if (sgd.momentum != 0.0f) {
        const uint32_t vi = num::axpy(num::to_bits(v[i]), mom, d);
        v[i] = num::to_float(vi);
        w[i] = num::to_float(num::axpy(vi, nlr, wi));
      } else {
        w[i] = num::to_float(num::axpy(d, nlr, wi));
      }
    }
  }
};

CnnTrainer::CnnTrainer(Device* device, compiler::CnnTrainModel model, int64_t batch, const SgdConfig& sgd,
                       uint32_t array_n)
    : impl_(std::make_unique<Impl>()) {
  if (batch < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("CNN trainer: batch {} must be >= 1", batch));
  if (!std::isfinite(sgd.lr) || sgd.lr <= 0.0f) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("CNN trainer: learning rate {} must be finite and > 0", sgd.lr));
  }
  model.net.check();
  if (model.net.head.layers.empty()) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: CNN training needs dense layers after the convolutions "
                                                     "(the logits of a Flatten + Linear head)",
                                                     model.net.head.source));
  }
  if (device != nullptr) {
    const auto f = device->info().features;
    if ((f & spec::reg::kFeaturesBf16) == 0 || (f & spec::reg::kFeaturesTranspose) == 0) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("CNN training: the {} device lacks bf16 or TRANSPOSE (FEATURES)", device->info().backend));
    }
    array_n = device->info().params.array_n;
  }
  impl_->device = device;
  if (device != nullptr) impl_->cache = std::make_unique<detail::TrainProgramCache>(*device);
  impl_->model = std::move(model);
  impl_->batch = batch;
  impl_->sgd = sgd;
  impl_->array_n = array_n;
}

CnnTrainer::~CnnTrainer() = default;

TrainStepReport CnnTrainer::step(std::span<const float> inputs, std::span<const int64_t> labels, int64_t rows) {
  Impl& m = *impl_;
  compiler::Bf16Cnn& net = m.model.net;
  if (rows < 1 || rows > m.batch || labels.size() != static_cast<size_t>(rows) ||
      inputs.size() != static_cast<size_t>(rows) * net.in_c * net.in_h * net.in_w) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("CNN trainer: {} rows (batch {}), {} labels, {} input values ({} per row)", rows, m.batch,
                            labels.size(), inputs.size(), uint64_t{net.in_c} * net.in_h * net.in_w));
  }
  const auto n = static_cast<uint64_t>(rows);
  m.cycles = m.macs = m.host_bytes = 0;
  TrainStepReport rep;
  rep.rows = rows;
  std::vector<std::vector<float>> acts, head;
  m.forward(inputs, n, acts, head);
  rep.forward_cycles = m.cycles;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> g;
  rep.loss = compiler::softmax_cross_entropy(head.back(), labels, rows, classes(), &g);
  rep.host_loss_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.host_loss_bytes = 2 * 4 * n * static_cast<uint64_t>(classes());

  // Backward: the dense head from the last layer, then the convolutions.
  std::vector<nn::DenseLayer>& dl = net.head.layers;
  std::vector<std::vector<float>> dense_dw(dl.size()), dense_db(dl.size());
  for (size_t i = dl.size(); i-- > 0;) {
    const uint64_t slot = Impl::kDenseBase + i * Impl::kSlots;
    if (dl[i].relu) g = m.relu_bwd(slot + Impl::kRelu, head[i], g);
    const std::vector<float>& x = i == 0 ? acts.back() : head[i - 1];
    const uint64_t k = dl[i].k, nn_ = dl[i].n;
    std::vector<float> x1(n * (k + 1));  // [X | 1]
    for (uint64_t r = 0; r < n; ++r) {
      std::copy(x.begin() + static_cast<ptrdiff_t>(r * k), x.begin() + static_cast<ptrdiff_t>((r + 1) * k),
                x1.begin() + static_cast<ptrdiff_t>(r * (k + 1)));
      x1[r * (k + 1) + k] = 1.0f;
    }
    m.host_bytes += 2 * x1.size();
    Bf16GemmSpec s;
    s.shape = {k + 1, n, nn_};
    s.trans_a = true;
    const std::vector<float> gm = m.gemm(slot + Impl::kDw, s, x1, g);
    dense_dw[i].assign(gm.begin(), gm.begin() + static_cast<ptrdiff_t>(k * nn_));
    dense_db[i].assign(gm.begin() + static_cast<ptrdiff_t>(k * nn_), gm.end());
    Bf16GemmSpec sx;
    sx.shape = {n, nn_, k};
    sx.trans_b = true;
    g = m.gemm(slot + Impl::kDx, sx, g, dl[i].w);
  }
  std::vector<ConvParamGradResult> conv_g(net.convs.size());
  // The gradient of a residual's skip path, per layer `from` (added to the main path's at acts[from]).
  std::map<size_t, std::vector<float>> skip_g;
  for (size_t l = net.convs.size(); l-- > 0;) {
    const Bf16ConvLayer& L = net.convs[l];
    const uint64_t slot = l * Impl::kSlots;
    if (const compiler::CnnResidual* r = m.residual_to(l)) {
      // The block output's gradient: the ReLU after the Add, then both paths carry it.
      if (r->relu) g = m.relu_bwd(slot + Impl::kResidualRelu, acts[l + 1], g);
      if (r->from > 0) {
        std::vector<float>& sg = skip_g[r->from];
        sg = sg.empty() ? g : m.add(slot + Impl::kGradSum, sg, g, false);
      }
    }
    if (L.kind == Kind::kConv) {
      if (L.relu) g = m.relu_bwd(slot + Impl::kRelu, acts[l + 1], g);
      conv_g[l] = m.conv_dw(slot + Impl::kDw, L, acts[l], g, n);
    }
    if (l == 0) break;
    if (L.kind == Kind::kMaxPool) {
      g = m.max_pool_dx(slot + Impl::kPool, L, acts[l], acts[l + 1], g, n);
    } else {
      g = m.conv_dx(slot + Impl::kDx, L, g, n);
    }
    if (const auto it = skip_g.find(l); it != skip_g.end()) g = m.add(slot + Impl::kGradSum, g, it->second, false);
  }
  rep.backward_cycles = m.cycles - rep.forward_cycles;

  // Update: on the device (masters and momentum resident, one VECTOR AXPY program), or its
  // contract on the host in the device's arithmetic.
  const std::vector<Impl::ParamRef> ps = m.params(&conv_g, &dense_dw, &dense_db);
  if (m.device != nullptr) {
    m.device_update(ps);
    rep.update_cycles = m.update_cycles;
  } else {
    for (const Impl::ParamRef& p : ps) m.update(*p.name, *p.w, *p.g);
  }
  ++m.steps;
  rep.cycles = m.cycles;
  rep.host_layout_bytes = m.host_bytes;
  rep.macs = m.macs;
  const double peak = static_cast<double>(m.array_n) * m.array_n;
  rep.utilization = m.cycles > 0 ? static_cast<double>(m.macs) / (peak * static_cast<double>(m.cycles)) : 0.0;
  return rep;
}

std::vector<float> CnnTrainer::logits(std::span<const float> inputs, int64_t rows) {
  Impl& m = *impl_;
  const compiler::Bf16Cnn& net = m.model.net;
  if (rows < 1 || inputs.size() != static_cast<size_t>(rows) * net.in_c * net.in_h * net.in_w) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("CNN trainer: {} input values for {} rows ({} per row)",
                                                         inputs.size(), rows, uint64_t{net.in_c} * net.in_h * net.in_w));
  }
  std::vector<std::vector<float>> acts, head;
  m.cached = false;
  try {
    m.forward(inputs, static_cast<uint64_t>(rows), acts, head);
  } catch (...) {
    m.cached = true;
    throw;
  }
  m.cached = true;
  return std::move(head.back());
}

TrainState CnnTrainer::state() const {
  const Impl& m = *impl_;
  const compiler::Bf16Cnn& net = m.model.net;
  TrainState s;
  s.steps = m.steps;
  const std::map<std::string, std::vector<float>> mom =
      m.device != nullptr && m.resident ? impl_->device_momentum() : m.momentum;
  auto put = [&](const std::string& name, std::vector<float> v) {
    if (name.empty()) return;
    const auto it = mom.find(name);
    s.momentum[name] = it != mom.end() ? it->second : std::vector<float>(v.size(), 0.0f);
    s.params[name] = std::move(v);
  };
  auto stored = [](const nn::DenseLayer& d, bool out_in, std::span<const float> w) {
    if (!out_in) return std::vector<float>(w.begin(), w.end());
    std::vector<float> t(w.size());
    for (uint64_t k = 0; k < d.k; ++k) {
      for (uint64_t j = 0; j < d.n; ++j) t[j * d.k + k] = w[k * d.n + j];
    }
    return t;
  };
  for (size_t l = 0; l < net.convs.size(); ++l) {
    if (net.convs[l].kind != Kind::kConv) continue;
    put(m.model.conv_weight[l], net.convs[l].w);
    put(m.model.conv_bias[l], net.convs[l].bias);
  }
  for (size_t i = 0; i < net.head.layers.size(); ++i) {
    const nn::DenseLayer& d = net.head.layers[i];
    const bool oi = m.model.dense_out_in[i] != 0;
    put(m.model.dense_weight[i], stored(d, oi, d.w));
    put(m.model.dense_bias[i], d.b);
    // Momentum in the stored layout too.
    const auto it = mom.find(m.model.dense_weight[i]);
    if (it != mom.end()) s.momentum[m.model.dense_weight[i]] = stored(d, oi, it->second);
  }
  return s;
}

void CnnTrainer::load_state(const TrainState& s) {
  Impl& m = *impl_;
  compiler::Bf16Cnn& net = m.model.net;
  auto get = [&](const std::string& name, std::vector<float>& dst) {
    if (name.empty()) return;
    const auto it = s.params.find(name);
    if (it == s.params.end() || it->second.size() != dst.size()) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("CNN trainer state: parameter '{}' missing or of the wrong "
                                                           "size",
                                                           name));
    }
    dst = it->second;
    const auto mt = s.momentum.find(name);
    m.momentum[name] = mt != s.momentum.end() ? mt->second : std::vector<float>(dst.size(), 0.0f);
  };
  auto internal = [](const nn::DenseLayer& d, std::span<const float> st) {
    std::vector<float> w(st.size());
    for (uint64_t k = 0; k < d.k; ++k) {
      for (uint64_t j = 0; j < d.n; ++j) w[k * d.n + j] = st[j * d.k + k];
    }
    return w;
  };
  for (size_t l = 0; l < net.convs.size(); ++l) {
    if (net.convs[l].kind != Kind::kConv) continue;
    get(m.model.conv_weight[l], net.convs[l].w);
    get(m.model.conv_bias[l], net.convs[l].bias);
  }
  for (size_t i = 0; i < net.head.layers.size(); ++i) {
    nn::DenseLayer& d = net.head.layers[i];
    get(m.model.dense_weight[i], d.w);
    get(m.model.dense_bias[i], d.b);
    if (m.model.dense_out_in[i] != 0) {
      d.w = internal(d, d.w);
      std::vector<float>& v = m.momentum[m.model.dense_weight[i]];
      v = internal(d, v);
    }
  }
  m.steps = s.steps;
  m.resident = false;  // the next device step writes these masters and momenta to the device
}

int64_t CnnTrainer::batch() const { return impl_->batch; }
int64_t CnnTrainer::classes() const { return impl_->model.classes(); }
std::string CnnTrainer::name() const {
  return impl_->device == nullptr ? std::string("bf16-contract") : impl_->device->info().backend;
}
uint64_t CnnTrainer::last_host_bytes() const { return impl_->host_bytes; }
uint64_t CnnTrainer::compiled_programs() const { return impl_->cache ? impl_->cache->compiled() : 0; }

TrainableModel describe_trainable_cnn(compiler::Graph g) {
  TrainableModel t;
  t.source = g.source;
  if (g.inputs.size() == 1) {
    const compiler::GraphInput& in = g.inputs[0];
    t.input_name = g.value(in.value).name;
    for (const int64_t d : in.declared) t.input_shape.push_back(d < 0 ? -1 : d);
  }
  compiler::CnnTrainModel m = compiler::build_cnn_training_model(std::move(g));
  const compiler::Bf16Cnn& net = m.net;
  t.input_features = static_cast<int64_t>(uint64_t{net.in_c} * net.in_h * net.in_w);
  if (t.input_shape.size() != 4) t.input_shape = {-1, net.in_c, net.in_h, net.in_w};
  t.classes = m.classes();
  for (size_t l = 0; l < net.convs.size(); ++l) {
    const Bf16ConvLayer& c = net.convs[l];
    if (c.kind != Kind::kConv) continue;
    const ConvGeometry& cg = c.geom;
    t.param_dims[m.conv_weight[l]] = {cg.out_c, cg.in_c, cg.kernel_h, cg.kernel_w};
    if (!m.conv_bias[l].empty()) t.param_dims[m.conv_bias[l]] = {cg.out_c};
  }
  for (size_t i = 0; i < net.head.layers.size(); ++i) {
    const nn::DenseLayer& d = net.head.layers[i];
    t.param_dims[m.dense_weight[i]] = m.dense_out_in[i] != 0 ? compiler::Dims{d.n, d.k} : compiler::Dims{d.k, d.n};
    if (!m.dense_bias[i].empty()) t.param_dims[m.dense_bias[i]] = {d.n};
  }
  CnnTrainer tr(nullptr, std::move(m), 1, SgdConfig{});
  t.initial_params = tr.state().params;
  return t;
}

std::unique_ptr<Trainer> make_cnn_trainer(const std::filesystem::path& model, const DeviceTrainerOptions& options) {
  if (options.batch < 1) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--batch {}: must be >= 1", options.batch));
  }
  compiler::CnnTrainModel tm = compiler::build_cnn_training_model(compiler::import_onnx_file(model));
  BackendConfig cfg;
  cfg.array_n = options.array_n;
  // Every program of a step keeps its buffers (the program cache, twice for a partial last batch):
  // per layer its largest layout (im2col, bf16, padded; the max-pool routing's fp32 tap planes) a
  // few times over, summed over the layers, at least the default.
  uint64_t need = 0;
  for (const Bf16ConvLayer& l : tm.net.convs) {
    const uint64_t px = static_cast<uint64_t>(options.batch) * l.geom.out_h() * l.geom.out_w();
    const uint64_t cols = uint64_t{l.geom.in_c} * l.geom.kernel_h * l.geom.kernel_w + 1;
    const uint64_t pool = 4 * (px * l.geom.in_c + 4096) * (2 * uint64_t{l.geom.kernel_h} * l.geom.kernel_w + 2);
    need += std::max(2 * (px + 64) * (cols + 64) + 4 * (px + 64) * (l.geom.out_c + 64), pool);
  }
  cfg.memory.size = std::max<uint64_t>(cfg.memory.size, ((4 * need + (16ull << 20)) + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1});
  if (cfg.memory.size > (4ull << 30)) {
    throw Error(ErrorKind::kUnsupported, fmt::format("{}: training at batch {} needs more than 4 GiB of device memory",
                                                     model.string(), options.batch));
  }
  Device dev = Device::open(options.backend, cfg);
  return std::make_unique<OwningTrainer<CnnTrainer>>(std::move(dev), [&](Device& d) {
    return CnnTrainer(&d, std::move(tm), options.batch, options.sgd);
  });
}

}  // namespace tpuw::runtime
