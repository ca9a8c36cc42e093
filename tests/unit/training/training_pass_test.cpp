// The training pass: the layer chain of an imported model (initializer names, stored layouts), the
// forward pass against the compiler's float reference, and the backward formulas against central
// finite differences in fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/training.h"
#include "tpuw/error.h"
#include "tpuw/nn/float_network.h"

namespace tpuw::compiler {
namespace {

const char* kDigits = TPUW_EXAMPLES_DIR "/digits/digits_mlp.onnx";

std::vector<float> random_input(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(TrainingPass, DigitsChainKeepsInitializerNames) {
  const TrainModel m = build_training_model(import_onnx_file(kDigits));
  ASSERT_GE(m.layers.size(), 2u);
  EXPECT_EQ(m.classes(), 10);
  EXPECT_EQ(m.layers.front().in, m.input_features);
  int64_t feat = m.input_features;
  for (const TrainLayer& L : m.layers) {
    EXPECT_EQ(L.in, feat) << L.node;
    feat = L.out;
    ASSERT_TRUE(m.params.count(L.weight)) << L.weight;
    EXPECT_EQ(m.params.at(L.weight).size(), static_cast<size_t>(L.in * L.out));
    if (!L.bias.empty()) {
      EXPECT_EQ(m.params.at(L.bias).size(), static_cast<size_t>(L.out));
    }
  }
  EXPECT_FALSE(m.layers.back().relu);
  EXPECT_TRUE(m.layers.front().relu);
}

TEST(TrainingPass, ForwardMatchesTheCompilersFloatReference) {
  const TrainModel m = build_training_model(import_onnx_file(kDigits));
  const nn::FloatNetwork net = compile_float(import_onnx_file(kDigits));
  const int64_t rows = 5;
  const auto x = random_input(static_cast<size_t>(rows * m.input_features), 1);
  const std::vector<int64_t> labels = {0, 3, 9, 4, 7};
  const FloatGrad<float> g = float_gradients<float>(m, m.params, x, labels, rows);
  const std::vector<float> want = nn::forward_float(net, x, rows);
  // The model ends in Softmax: the compiler's network applies it on the host, the training pass
  // drops it (the loss applies it).
  ASSERT_EQ(net.host_op, nn::HostOp::kSoftmax);
  std::vector<float> got = g.logits;
  nn::softmax_rows(got, 10);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f);
  EXPECT_GT(g.loss, 0.0);
}

TEST(TrainingPass, GradientsMatchFiniteDifferences) {
  const TrainModel m = build_training_model(import_onnx_file(kDigits));
  std::map<std::string, std::vector<double>> p;
  for (const auto& [name, v] : m.params) p[name].assign(v.begin(), v.end());
  const int64_t rows = 6;
  const auto xf = random_input(static_cast<size_t>(rows * m.input_features), 2);
  const std::vector<double> x(xf.begin(), xf.end());
  const std::vector<int64_t> labels = {1, 2, 3, 5, 8, 0};
  const FloatGrad<double> g = float_gradients<double>(m, p, x, labels, rows);
  std::mt19937 rng(3);
  const double eps = 1e-6;
  int checked = 0;
  for (auto& [name, v] : p) {
    const std::vector<double>& grad = g.grads.at(name);
    ASSERT_EQ(grad.size(), v.size()) << name;
    std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
    for (int t = 0; t < 25; ++t) {
      const size_t i = pick(rng);
      const double keep = v[i];
      v[i] = keep + eps;
      const double lp = float_gradients<double>(m, p, x, labels, rows).loss;
      v[i] = keep - eps;
      const double lm = float_gradients<double>(m, p, x, labels, rows).loss;
      v[i] = keep;
      const double fd = (lp - lm) / (2 * eps);
      EXPECT_NEAR(grad[i], fd, 1e-7 + 1e-4 * std::fabs(fd)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 25 * static_cast<int>(p.size()));
}

TEST(TrainingPass, LossAndLabelErrors) {
  const std::vector<float> logits = {0.0f, 0.0f, 1.0f, 1.0f};
  std::vector<float> grad;
  const std::vector<int64_t> labels = {0, 1};
  EXPECT_NEAR(softmax_cross_entropy(logits, labels, 2, 2, &grad), std::log(2.0), 1e-12);
  EXPECT_FLOAT_EQ(grad[0], -0.25f);
  EXPECT_FLOAT_EQ(grad[1], 0.25f);
  const std::vector<int64_t> bad = {0, 2};
  EXPECT_THROW((void)softmax_cross_entropy(logits, bad, 2, 2, nullptr), Error);
}

}  // namespace
}  // namespace tpuw::compiler
