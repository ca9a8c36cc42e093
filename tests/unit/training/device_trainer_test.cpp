// The device trainer on the ref backend: one SGD step of a small MLP against the host fp32 step
// (within bf16 tolerance), logits against the float forward pass, resume bit-identity, and the
// argument errors. Device tests skip while the ref backend lacks FEATURES.BF16/TRANSPOSE.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "support/mlp_train_fixtures.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/training.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/device_trainer.h"
#include "tpuw/runtime/device_trainer_factory.h"
#include "tpuw/runtime/gemm_bf16.h"
#include "tpuw/spec.h"

namespace tpuw::runtime {
namespace {

using test::Batch;
using test::make_batch;
using test::MlpDims;
using test::small_mlp;

bool has_features(const Device& dev) { return test::has_training_features(dev); }

double rel_norm(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The exact contract of one device step on the host (docs/training.md, docs/numerics.md): the same
// padded batch rows, GEMMs by gemm_bf16_host, SELECT/COLSUM/AXPY by tpuw/numerics.h.
struct ModelStep {
  double loss = 0;
  compiler::TrainModel after;  // params after the step
  std::map<std::string, std::vector<float>> momentum;
};

float f(uint32_t b) { return num::to_float(b); }
uint32_t u(float x) { return num::to_bits(x); }

ModelStep contract_step(const compiler::TrainModel& m, const std::map<std::string, std::vector<float>>& mom0,
                        const SgdConfig& sgd, uint32_t an, int64_t batch, const Batch& b, int64_t rows) {
  const uint64_t bp = (static_cast<uint64_t>(batch) + an - 1) / an * an;
  const size_t L = m.layers.size();
  std::vector<std::vector<float>> xs(L), zs(L);
  std::vector<std::vector<float>> wbf(L);
  xs[0].assign(bp * static_cast<uint64_t>(m.input_features), 0.0f);
  for (size_t i = 0; i < b.x.size(); ++i) xs[0][i] = bf16::round(b.x[i]);
  std::vector<float> logits;
  for (size_t l = 0; l < L; ++l) {
    const compiler::TrainLayer& ly = m.layers[l];
    const bool last = l + 1 == L;
    for (float w : m.params.at(ly.weight)) wbf[l].push_back(bf16::round(w));
    Bf16GemmSpec s;
    s.shape = {bp, static_cast<uint64_t>(ly.in), static_cast<uint64_t>(ly.out)};
    s.trans_b = ly.weight_out_in;
    s.bias = true;
    s.bf16_out = !last;
    s.relu = !last && ly.relu;
    s.z_out = s.relu;
    std::vector<float> out = gemm_bf16_host(s, an, xs[l], wbf[l], {}, m.params.at(ly.bias), &zs[l]);
    if (last) logits = std::move(out); else xs[l + 1] = std::move(out);
  }
  ModelStep r;
  const int64_t C = m.classes();
  std::vector<float> grad;
  r.loss = compiler::softmax_cross_entropy(std::span<const float>(logits).first(static_cast<size_t>(rows * C)), b.y,
                                           rows, C, &grad);
  std::vector<float> src(bp * static_cast<uint64_t>(C), 0.0f);
  std::copy(grad.begin(), grad.end(), src.begin());
  std::map<std::string, std::vector<float>> grads;
  for (size_t l = L; l-- > 0;) {
    const compiler::TrainLayer& ly = m.layers[l];
    const auto out = static_cast<uint64_t>(ly.out), in = static_cast<uint64_t>(ly.in);
    std::vector<float> d = src;
    if (l + 1 < L && ly.relu) {
      for (size_t i = 0; i < d.size(); ++i) d[i] = f(num::select(u(zs[l][i]), u(d[i])));
    }
    std::vector<float> db(out);
    for (uint64_t j = 0; j < out; ++j) {
      uint32_t acc = 0;
      for (uint64_t r0 = 0; r0 < bp; ++r0) acc = num::colsum_step(acc, u(d[r0 * out + j]));
      db[j] = f(acc);
    }
    grads[ly.bias] = db;
    std::vector<float> dzb(d.size());
    for (size_t i = 0; i < d.size(); ++i) dzb[i] = bf16::to_float(num::activate_bf16(u(d[i]), 0, false, false));
    Bf16GemmSpec s;
    s.trans_a = true;
    if (ly.weight_out_in) {
      s.shape = {out, bp, in};
      grads[ly.weight] = gemm_bf16_host(s, an, dzb, xs[l]);
    } else {
      s.shape = {in, bp, out};
      grads[ly.weight] = gemm_bf16_host(s, an, xs[l], dzb);
    }
    if (l == 0) break;
    Bf16GemmSpec dx;
    dx.shape = {bp, out, in};
    dx.trans_b = !ly.weight_out_in;
    src = gemm_bf16_host(dx, an, dzb, wbf[l]);
  }
  r.after = m;
  for (auto& [name, w] : r.after.params) {
    const std::vector<float>& g = grads.at(name);
    std::vector<float> v = mom0.count(name) ? mom0.at(name) : std::vector<float>(w.size(), 0.0f);
    for (size_t i = 0; i < w.size(); ++i) {
      uint32_t dd = u(g[i]);
      if (sgd.weight_decay != 0.0f) dd = num::axpy(u(w[i]), u(sgd.weight_decay), dd);
      if (sgd.momentum != 0.0f) {
        v[i] = f(num::axpy(u(v[i]), u(sgd.momentum), dd));
        w[i] = f(num::axpy(u(v[i]), u(-sgd.lr), u(w[i])));
      } else {
        w[i] = f(num::axpy(dd, u(-sgd.lr), u(w[i])));
      }
    }
    r.momentum[name] = v;
  }
  return r;
}

// Two steps of a DeviceTrainer of `batch` rows on `dev` (N = an): `batch` rows, then a partial
// batch of `second` rows (make_batch seeds `seed`, `seed` + 1), each equal to the contract's step
// bit for bit: the loss, every parameter and every momentum.
void expect_steps_equal_contract(Device& dev, uint32_t an, compiler::TrainModel m, int64_t batch, int64_t second,
                                 uint32_t seed, const SgdConfig& sgd, bool fuse) {
  DeviceTrainerSchedule opt;
  opt.fuse_update = fuse;
  DeviceTrainer t(dev, m, batch, sgd, opt);
  std::map<std::string, std::vector<float>> mom;
  for (int step = 0; step < 2; ++step) {
    const int64_t rows = step == 0 ? batch : second;
    const Batch b = make_batch(rows, seed + static_cast<uint32_t>(step));
    const TrainStepReport r = t.step(b.x, b.y, rows);
    const ModelStep want = contract_step(m, mom, sgd, an, batch, b, rows);
    EXPECT_EQ(std::bit_cast<uint64_t>(r.loss), std::bit_cast<uint64_t>(want.loss)) << "N=" << an << " step " << step;
    const TrainState s = t.state();
    for (const auto& [name, w] : want.after.params) {
      const std::vector<float>& got = s.params.at(name);
      ASSERT_EQ(got.size(), w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(w[i]))
            << "N=" << an << " fused " << fuse << " step " << step << " " << name << "[" << i << "]";
        ASSERT_EQ(std::bit_cast<uint32_t>(s.momentum.at(name)[i]), std::bit_cast<uint32_t>(want.momentum.at(name)[i]))
            << "momentum N=" << an << " step " << step << " " << name << "[" << i << "]";
      }
    }
    m = want.after;
    mom = want.momentum;
  }
}

TEST(DeviceTrainer, StepsEqualTheHostContractModelBitForBit) {
  for (uint32_t an : {16u, 4u}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
    for (const auto& [sgd, fuse] : {std::pair{SgdConfig{0.05f, 0.9f, 0.01f}, true},
                                    std::pair{SgdConfig{0.05f, 0.9f, 0.01f}, false},
                                    std::pair{SgdConfig{0.1f, 0.0f, 0.0f}, true}}) {
      expect_steps_equal_contract(dev, an, small_mlp(21), 12, 5, 30, sgd, fuse);
    }
  }
}

// Layers wide enough that the dW GEMMs with the SGD epilogue take several M tiles (N = 4: ACC of
// 1024 rows, 128 per strip buffer) and rotate through all three master/momentum sets, with an odd
// number of K blocks (batch 12 at N = 4), and with batch 40 at N = 4 enough K blocks (>= 8) that
// the first two strips of each M tile run side by side (forward with the bias preset, dX with
// the dZ epilogue, dW with the SGD epilogue): the schedule must not change a bit.
TEST(DeviceTrainer, WideLayersEqualTheHostContractModelBitForBit) {
  const MlpDims dims = {{20, 150, true, true}, {150, 140, false, true}, {140, 10, true, false}};
  for (const auto& [an, batch] : {std::pair{16u, int64_t{12}}, std::pair{4u, int64_t{12}}, std::pair{4u, int64_t{40}}}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
    for (const auto& [sgd, fuse] : {std::pair{SgdConfig{0.05f, 0.9f, 0.01f}, true},
                                    std::pair{SgdConfig{0.1f, 0.0f, 0.0f}, true},
                                    std::pair{SgdConfig{0.05f, 0.9f, 0.0f}, false}}) {
      expect_steps_equal_contract(dev, an, small_mlp(5, dims), batch, 7, 40, sgd, fuse);
    }
  }
}

// The step's schedule keeps the issue-11 figure (MLP 784-512-512-10, batch 256, N = 16: MXU
// utilization >= 0.70 over forward + backward + update) in the ref model's deterministic cycles,
// and the update's master/momentum traffic hidden behind the products: what the update adds to
// the step is at most its own VECTOR/ACTIVATE cycles plus a small drain per strip.
// (tpuw_bench_train prints the figures; docs/perf_model.md.)
TEST(DeviceTrainer, TrainingStepScheduleKeepsTheUtilizationFigure) {
  compiler::TrainModel m;
  m.source = "mlp";
  m.input_features = 784;
  const std::vector<int64_t> dims = {784, 512, 512, 10};
  std::mt19937 rng(3);
  for (size_t i = 1; i < dims.size(); ++i) {
    compiler::TrainLayer L;
    L.node = fmt::format("fc{} (Gemm)", i);
    L.weight = fmt::format("fc{}.weight", i);
    L.bias = fmt::format("fc{}.bias", i);
    L.weight_out_in = true;
    L.in = dims[i - 1];
    L.out = dims[i];
    L.relu = i + 1 < dims.size();
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> w(static_cast<size_t>(L.in * L.out)), b(static_cast<size_t>(L.out));
    for (auto& x : w) x = d(rng);
    for (auto& x : b) x = d(rng);
    m.params[L.weight] = w;
    m.params[L.bias] = b;
    m.layers.push_back(L);
  }
  BackendConfig cfg;
  cfg.memory.size = std::max<uint64_t>(cfg.memory.size, DeviceTrainer::memory_bytes(m, 256, 16) + (16ull << 20));
  Device dev = Device::open("ref", cfg);
  if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  DeviceTrainer t(dev, m, 256, SgdConfig{0.01f, 0.9f, 0.0f});
  std::vector<float> x(256 * 784);
  std::uniform_real_distribution<float> ux(0.0f, 1.0f);
  for (auto& v : x) v = ux(rng);
  std::vector<int64_t> y(256);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 10);
  const TrainStepReport r = t.step(x, y, 256);
  EXPECT_GE(r.utilization, 0.70) << r.cycles << " cycles";
  EXPECT_EQ(r.cycles, r.forward_cycles + r.backward_cycles + r.update_cycles);
  EXPECT_GT(r.update_busy_cycles, 0u);
  EXPECT_LE(r.update_cycles, r.update_busy_cycles + r.update_busy_cycles / 4) << "the update's DMA is exposed";
}

TEST(DeviceTrainer, ArgumentErrors) {
  Device dev = Device::open("ref", BackendConfig{});
  const SgdConfig ok{0.1f, 0.9f, 0.0f};
  EXPECT_THROW(DeviceTrainer(dev, small_mlp(1), 0, ok), Error);
  for (float lr : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    try {
      DeviceTrainer t(dev, small_mlp(1), 8, SgdConfig{lr, 0.0f, 0.0f});
      FAIL() << "lr " << lr;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    }
  }
}

// One step (momentum, weight decay, a partial batch) against the same step in host fp32: the
// update (w_after - w_before) of every parameter within 5% relative norm, the loss within 1%.
TEST(DeviceTrainer, OneStepMatchesHostFloatWithinBf16Tolerance) {
  Device dev = Device::open("ref", BackendConfig{});
  if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  const compiler::TrainModel m = small_mlp(7);
  const SgdConfig sgd{0.05f, 0.9f, 0.01f};
  DeviceTrainer t(dev, m, 16, sgd);
  const Batch b = make_batch(13, 8);
  const TrainStepReport r = t.step(b.x, b.y, 13);
  const compiler::FloatGrad<float> want = compiler::float_gradients<float>(m, m.params, b.x, b.y, 13);
  EXPECT_NEAR(r.loss, want.loss, 0.01 * want.loss);
  EXPECT_GT(r.forward_cycles, 0u);
  EXPECT_GT(r.backward_cycles, 0u);
  EXPECT_GT(r.update_cycles, 0u);
  EXPECT_EQ(r.cycles, r.forward_cycles + r.backward_cycles + r.update_cycles);
  EXPECT_EQ(r.macs, m.step_macs(13));
  const TrainState s = t.state();
  EXPECT_EQ(s.steps, 1);
  for (const auto& [name, w0] : m.params) {
    const std::vector<float>& g = want.grads.at(name);
    std::vector<float> host_upd(w0.size()), dev_upd(w0.size());
    for (size_t i = 0; i < w0.size(); ++i) {
      const float d = g[i] + sgd.weight_decay * w0[i];  // first step: v = d
      host_upd[i] = -sgd.lr * d;
      dev_upd[i] = s.params.at(name)[i] - w0[i];
      // The momentum buffer after the first step is d.
      EXPECT_NEAR(s.momentum.at(name)[i], d, 0.05 * std::fabs(d) + 2e-3) << name << "[" << i << "]";
    }
    EXPECT_LT(rel_norm(dev_upd, host_upd), 0.05) << name;
  }
}

TEST(DeviceTrainer, LogitsCloseToFloatForward) {
  Device dev = Device::open("ref", BackendConfig{});
  if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  const compiler::TrainModel m = small_mlp(3);
  DeviceTrainer t(dev, m, 8, SgdConfig{0.1f, 0.0f, 0.0f});
  const Batch b = make_batch(19, 4);  // more rows than the batch: three forward runs
  const std::vector<float> got = t.logits(b.x, 19);
  const compiler::FloatGrad<float> want = compiler::float_gradients<float>(m, m.params, b.x, b.y, 19);
  ASSERT_EQ(got.size(), want.logits.size());
  EXPECT_LT(rel_norm(got, want.logits), 0.02);
}

TEST(DeviceTrainer, ResumeIsBitIdentical) {
  Device dev = Device::open("ref", BackendConfig{});
  if (!has_features(dev)) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  const compiler::TrainModel m = small_mlp(11);
  const SgdConfig sgd{0.05f, 0.9f, 0.001f};
  DeviceTrainer a(dev, m, 16, sgd);
  const Batch b1 = make_batch(16, 1), b2 = make_batch(16, 2), b3 = make_batch(9, 3);
  (void)a.step(b1.x, b1.y, 16);
  (void)a.step(b2.x, b2.y, 16);
  const TrainState mid = a.state();
  EXPECT_EQ(mid.steps, 2);
  const double loss_a = a.step(b3.x, b3.y, 9).loss;

  Device dev2 = Device::open("ref", BackendConfig{});
  DeviceTrainer c(dev2, m, 16, sgd);
  c.load_state(mid);
  const double loss_c = c.step(b3.x, b3.y, 9).loss;
  EXPECT_EQ(std::bit_cast<uint64_t>(loss_a), std::bit_cast<uint64_t>(loss_c));
  const TrainState sa = a.state(), sc = c.state();
  EXPECT_EQ(sc.steps, 3);
  for (const auto& [name, w] : sa.params) {
    const std::vector<float>& wc = sc.params.at(name);
    ASSERT_EQ(w.size(), wc.size());
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), std::bit_cast<uint32_t>(wc[i])) << name << "[" << i << "]";
      ASSERT_EQ(std::bit_cast<uint32_t>(sa.momentum.at(name)[i]), std::bit_cast<uint32_t>(sc.momentum.at(name)[i]));
    }
  }
  // The state names are the model's initializer names.
  for (const auto& [name, w] : m.params) EXPECT_TRUE(sa.params.count(name)) << name;
}

}  // namespace
}  // namespace tpuw::runtime

namespace tpuw::runtime {
namespace {

TEST(DeviceTrainerFactory, DigitsOnRef) {
  DeviceTrainerOptions o;
  o.backend = "ref";
  o.batch = 32;
  o.sgd = SgdConfig{0.05f, 0.9f, 0.0f};
  std::unique_ptr<Trainer> t = make_device_trainer(TPUW_EXAMPLES_DIR "/digits/digits_mlp.onnx", o);
  EXPECT_EQ(t->name(), "ref");
  EXPECT_EQ(t->classes(), 10);
  EXPECT_EQ(t->batch(), 32);
  const compiler::TrainModel m =
      compiler::build_training_model(compiler::import_onnx_file(TPUW_EXAMPLES_DIR "/digits/digits_mlp.onnx"));
  std::vector<float> x(static_cast<size_t>(32 * m.input_features), 0.5f);
  std::vector<int64_t> y(32, 3);
  const TrainStepReport r1 = t->step(x, y, 32);
  const TrainStepReport r2 = t->step(x, y, 32);
  EXPECT_LT(r2.loss, r1.loss);  // the same batch twice: the loss goes down
  const TrainState s = t->state();
  EXPECT_EQ(s.params.size(), m.params.size());
  for (const auto& [name, v] : m.params) {
    ASSERT_TRUE(s.params.count(name)) << name;
    EXPECT_EQ(s.params.at(name).size(), v.size()) << name;
  }
  EXPECT_THROW((void)make_device_trainer("/nonexistent/model.onnx", o), Error);
}

}  // namespace
}  // namespace tpuw::runtime
