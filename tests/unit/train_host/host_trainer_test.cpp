// HostFloatTrainer: one and three SGD steps against PyTorch's stored weights, five epochs on digits
// against PyTorch's loss and accuracy, gradients of the layouts PyTorch does not export (MatMul,
// Gemm alpha/beta, scalar bias) against finite differences, untrainable models, state and
// checkpoint round trips, the trained ONNX file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "onnx_builder.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/compiler/onnx_writer.h"
#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/host_float_trainer.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/runtime/train_checkpoint.h"

namespace tpuw::runtime {
namespace {

namespace fs = std::filesystem;
using nn::testing::ModelBuilder;
using nn::testing::random_floats;

const fs::path kRef = fs::path(TPUW_EXAMPLES_DIR) / "fashion_mnist" / "reference";
const fs::path kModel = kRef / "digits_mlp_untrained.onnx";
constexpr int64_t kTrainRows = 1440;  // torch_reference.py: digits rows 0..1439 train, the rest test

struct Digits {
  std::vector<float> x;  // [rows, 64], intensity / 16
  std::vector<int64_t> y;
  int64_t rows = 0;
};

Digits digits(int64_t from, int64_t to) {
  const npy::Array xa = npy::load(fs::path(TPUW_EXAMPLES_DIR) / "digits" / "digits_x.npy");
  const npy::Array ya = npy::load(fs::path(TPUW_EXAMPLES_DIR) / "digits" / "digits_y.npy");
  const auto xv = xa.view<uint8_t>();
  const auto yv = ya.view<uint8_t>();
  Digits d;
  d.rows = to - from;
  for (int64_t i = from * 64; i < to * 64; ++i) d.x.push_back(static_cast<float>(xv[static_cast<size_t>(i)]) / 16.0f);
  for (int64_t i = from; i < to; ++i) d.y.push_back(yv[static_cast<size_t>(i)]);
  return d;
}

double rel_norm(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

void expect_params_like(const TrainState& s, const fs::path& dir, double tol) {
  ASSERT_EQ(s.params.size(), 4u);
  for (const auto& [name, v] : s.params) {
    const npy::Array a = npy::load(dir / (name + ".npy"));
    const auto ref = a.view<float>();
    ASSERT_EQ(ref.size(), v.size()) << name;
    EXPECT_LT(rel_norm(v, {ref.begin(), ref.end()}), tol) << name << " in " << dir;
  }
}

TEST(TrainHost, DescribesPyTorchLinearExport) {
  const TrainableModel m = describe_trainable(kModel);
  EXPECT_EQ(m.input_name, "x");
  EXPECT_EQ(m.input_features, 64);
  EXPECT_EQ(m.classes, 10);
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].weight, "fc1.weight");
  EXPECT_TRUE(m.layers[0].transposed);
  EXPECT_TRUE(m.layers[0].relu);
  EXPECT_FALSE(m.layers[1].relu);
  ASSERT_EQ(m.layers[0].biases.size(), 1u);
  EXPECT_EQ(m.layers[0].biases[0].name, "fc1.bias");
  EXPECT_EQ(m.param_dims.at("fc1.weight"), (compiler::Dims{32, 64}));
  EXPECT_EQ(m.param_dims.at("fc2.bias"), (compiler::Dims{10}));
}

TEST(TrainHost, StepsMatchPyTorch) {
  const Digits d = digits(0, 96);
  HostFloatTrainer t(kModel, 32, SgdConfig{0.1f, 0.9f, 1e-3f});
  for (int s = 0; s < 3; ++s) {
    const std::span<const float> x(d.x.data() + s * 32 * 64, 32 * 64);
    const std::span<const int64_t> y(d.y.data() + s * 32, 32);
    const TrainStepReport r = t.step(x, y, 32);
    EXPECT_EQ(r.rows, 32);
    EXPECT_GT(r.loss, 0.0);
    EXPECT_EQ(r.cycles, 0u);
    if (s == 0) expect_params_like(t.state(), kRef / "step1", 1e-4);
  }
  expect_params_like(t.state(), kRef / "step3", 1e-4);
  EXPECT_EQ(t.state().steps, 3);
}

TEST(TrainHost, EpochsMatchPyTorchLossAndAccuracy) {
  std::ifstream f(kRef / "digits_reference.json");
  const nlohmann::json ref = nlohmann::json::parse(f);
  const Digits tr = digits(0, kTrainRows), te = digits(kTrainRows, 1797);
  const int64_t batch = ref["batch"].get<int64_t>();
  HostFloatTrainer t(kModel, batch, SgdConfig{ref["lr"].get<float>(), ref["momentum"].get<float>(),
                                              ref["weight_decay"].get<float>()});
  ASSERT_EQ(ref["per_epoch"].size(), 5u);
  for (const auto& e : ref["per_epoch"]) {
    double lsum = 0;
    for (int64_t r0 = 0; r0 < tr.rows; r0 += batch) {
      const int64_t rows = std::min(batch, tr.rows - r0);
      const TrainStepReport r = t.step({tr.x.data() + r0 * 64, static_cast<size_t>(rows * 64)},
                                       {tr.y.data() + r0, static_cast<size_t>(rows)}, rows);
      lsum += r.loss * static_cast<double>(rows);
    }
    const double loss = lsum / static_cast<double>(tr.rows);
    const std::vector<float> z = t.logits(te.x, te.rows);
    int64_t ok = 0;
    for (int64_t r = 0; r < te.rows; ++r) {
      const float* zr = z.data() + r * 10;
      ok += std::max_element(zr, zr + 10) - zr == te.y[static_cast<size_t>(r)];
    }
    const double acc = static_cast<double>(ok) / static_cast<double>(te.rows);
    EXPECT_NEAR(loss, e["loss"].get<double>(), 0.05 * e["loss"].get<double>()) << "epoch " << e["epoch"];
    EXPECT_NEAR(acc, e["accuracy"].get<double>(), 0.02) << "epoch " << e["epoch"];
  }
}

// MatMul + Add (W stored [k, n]), then Gemm with alpha, beta, transB=0 and a scalar C: the
// gradient one SGD step applies (lr 1, no momentum: w_before - w_after) against central
// differences of the mean cross-entropy computed from logits() in double.
TEST(TrainHost, GradientsOfOtherLayoutsMatchFiniteDifferences) {
  ModelBuilder mb;
  mb.input("x", {-1, 5}).output("y");
  mb.init("w1", {5, 4}, random_floats(20, -0.5f, 0.5f, 1)).init("b1", {4}, random_floats(4, -0.1f, 0.1f, 2));
  mb.init("w2", {4, 3}, random_floats(12, -0.5f, 0.5f, 3)).init("c2", {1}, {0.25f});
  mb.node("MatMul", {"x", "w1"}, {"h"});
  mb.node("Add", {"h", "b1"}, {"hb"});
  auto& g = mb.node("Gemm", {"hb", "w2", "c2"}, {"y"});
  ModelBuilder::attr_f(g, "alpha", 0.5f);
  ModelBuilder::attr_f(g, "beta", 2.0f);
  const std::string bytes = mb.bytes();
  const TrainableModel m = describe_trainable(compiler::import_onnx_graph(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "fd.onnx"));
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_FALSE(m.layers[0].transposed);
  EXPECT_TRUE(m.layers[1].biases.at(0).scalar);
  const std::vector<float> x = random_floats(6 * 5, -1.0f, 1.0f, 4);
  const std::vector<int64_t> y = {0, 2, 1, 1, 0, 2};
  auto loss = [&](HostFloatTrainer& t) {
    const std::vector<float> z = t.logits(x, 6);
    double l = 0;
    for (size_t r = 0; r < 6; ++r) {
      double mx = z[r * 3], s = 0;
      for (size_t j = 1; j < 3; ++j) mx = std::max<double>(mx, z[r * 3 + j]);
      for (size_t j = 0; j < 3; ++j) s += std::exp(z[r * 3 + j] - mx);
      l += mx + std::log(s) - z[r * 3 + static_cast<size_t>(y[r])];
    }
    return l / 6;
  };
  HostFloatTrainer t(m, 6, SgdConfig{1.0f, 0.0f, 0.0f});
  const TrainState before = t.state();
  t.step(x, y, 6);
  const TrainState after = t.state();
  for (const auto& [name, w0] : before.params) {
    for (size_t i = 0; i < w0.size(); ++i) {
      const double grad = static_cast<double>(w0[i]) - after.params.at(name)[i];
      const float eps = 1e-2f;
      TrainState p = before;
      p.params[name][i] = w0[i] + eps;
      HostFloatTrainer tp(m, 6, SgdConfig{});
      tp.load_state(p);
      const double lp = loss(tp);
      p.params[name][i] = w0[i] - eps;
      tp.load_state(p);
      const double lm = loss(tp);
      EXPECT_NEAR(grad, (lp - lm) / (2 * eps), 2e-3) << name << "[" << i << "]";
    }
  }
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " / " << p;
  }
}

TrainableModel describe_bytes(const ModelBuilder& mb) {
  const std::string b = mb.bytes();
  return describe_trainable(compiler::import_onnx_graph({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, "u.onnx"));
}

TEST(TrainHost, UntrainableModelsNameTheNode) {
  {  // an operator the compiler does not know
    ModelBuilder mb;
    mb.input("x", {-1, 4}).output("y").init("w", {4, 3}, random_floats(12, -1, 1, 1));
    mb.node("MatMul", {"x", "w"}, {"h"}, "mm");
    mb.node("Sigmoid", {"h"}, {"y"}, "sig");
    expect_error([&] { describe_bytes(mb); }, ErrorKind::kUnsupported, {"u.onnx", "sig", "Sigmoid"});
  }
  {  // a host operator on the graph input (it runs before the device in inference)
    ModelBuilder mb(17);
    mb.input("x", {-1, 4}).output("y").init("w", {4, 3}, random_floats(12, -1, 1, 1)).init("s", {4}, {1, 1, 1, 1});
    mb.node("LayerNormalization", {"x", "s"}, {"n"}, "ln");
    mb.node("MatMul", {"n", "w"}, {"y"}, "mm");
    expect_error([&] { describe_bytes(mb); }, ErrorKind::kUnsupported, {"u.onnx", "ln (LayerNormalization)", "graph input"});
  }
  {  // a Softmax in the middle
    ModelBuilder mb;
    mb.input("x", {-1, 4}).output("y").init("w", {4, 3}, random_floats(12, -1, 1, 1));
    mb.init("w2", {3, 2}, random_floats(6, -1, 1, 2));
    mb.node("MatMul", {"x", "w"}, {"h"}, "mm");
    ModelBuilder::attr_i(mb.node("Softmax", {"h"}, {"s"}, "sm"), "axis", 1);
    mb.node("MatMul", {"s", "w2"}, {"y"}, "mm2");
    EXPECT_THROW(describe_bytes(mb), Error);
  }
  {  // one weight in two layers
    ModelBuilder mb;
    mb.input("x", {-1, 4}).output("y").init("w", {4, 4}, random_floats(16, -1, 1, 1));
    mb.node("MatMul", {"x", "w"}, {"h"}, "mm1");
    mb.node("MatMul", {"h", "w"}, {"y"}, "mm2");
    expect_error([&] { describe_bytes(mb); }, ErrorKind::kUnsupported, {"mm2", "'w'", "shared"});
  }
  {  // the logits and their Softmax as two outputs (tpuw run takes them; training needs one)
    ModelBuilder mb;
    mb.input("x", {-1, 4}).output("y").output("p").init("w", {4, 3}, random_floats(12, -1, 1, 1));
    mb.node("MatMul", {"x", "w"}, {"y"}, "mm");
    ModelBuilder::attr_i(mb.node("Softmax", {"y"}, {"p"}, "sm"), "axis", 1);
    expect_error([&] { describe_bytes(mb); }, ErrorKind::kUnsupported, {"u.onnx", "2 outputs", "training needs one"});
  }
}

TEST(TrainHost, BadHyperParameters) {
  const TrainableModel m = describe_trainable(kModel);
  EXPECT_THROW(HostFloatTrainer(m, 0, SgdConfig{}), Error);
  EXPECT_THROW(HostFloatTrainer(m, 8, SgdConfig{0.0f, 0, 0}), Error);
  EXPECT_THROW(HostFloatTrainer(m, 8, SgdConfig{NAN, 0, 0}), Error);
  EXPECT_THROW(HostFloatTrainer(m, 8, SgdConfig{INFINITY, 0, 0}), Error);
  EXPECT_THROW(HostFloatTrainer(m, 8, SgdConfig{0.1f, -0.5f, 0}), Error);
  EXPECT_THROW(HostFloatTrainer(m, 8, SgdConfig{0.1f, 0, -1e-4f}), Error);
  HostFloatTrainer t(m, 8, SgdConfig{});
  const Digits d = digits(0, 9);
  EXPECT_THROW(t.step({d.x.data(), 9 * 64}, {d.y.data(), 9}, 9), Error);  // more rows than the batch
  std::vector<int64_t> bad(d.y.begin(), d.y.begin() + 8);
  bad[3] = 10;
  EXPECT_THROW(t.step({d.x.data(), 8 * 64}, bad, 8), Error);
}

// state() -> load_state() into a fresh trainer, through a checkpoint directory: the same further
// steps give the same bits as the trainer that never stopped. The last step is partial.
TEST(TrainHost, CheckpointResumeIsBitIdentical) {
  const Digits d = digits(0, 100);
  const SgdConfig sgd{0.05f, 0.9f, 1e-4f};
  auto run = [&](HostFloatTrainer& t, int from, int to) {
    for (int s = from; s < to; ++s) {
      const int64_t rows = std::min<int64_t>(32, 100 - s * 32);
      t.step({d.x.data() + s * 32 * 64, static_cast<size_t>(rows * 64)}, {d.y.data() + s * 32, static_cast<size_t>(rows)},
             rows);
    }
  };
  HostFloatTrainer a(kModel, 32, sgd);
  run(a, 0, 4);
  HostFloatTrainer b(kModel, 32, sgd);
  run(b, 0, 2);
  const fs::path dir = fs::temp_directory_path() / "tpuw_train_host_ck";
  fs::remove_all(dir);
  Checkpoint c;
  c.state = b.state();
  c.epoch = 0;
  c.position = 2;
  c.rng = "0123456789abcdef";
  c.trainer = b.name();
  c.options = {{"batch", 32}};
  save_checkpoint(dir, c, describe_trainable(kModel).param_dims);
  c.state.steps = 99;  // later generations: the oldest one's files are removed
  save_checkpoint(dir, c, {});
  c.state.steps = 2;
  save_checkpoint(dir, c, describe_trainable(kModel).param_dims);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 18u);  // manifest + previous manifest + 2 generations x (4 params + 4 momentum buffers)
  EXPECT_EQ(npy::load(dir / "g3-p3.npy").shape, (std::vector<uint64_t>{10, 32}));  // fc2.weight (by name order), its own shape
  EXPECT_EQ(npy::load(dir / "g2-p3.npy").shape, (std::vector<uint64_t>{320}));      // written without shapes: 1-D
  EXPECT_FALSE(fs::exists(dir / "g1-p3.npy"));
  const Checkpoint l = load_checkpoint(dir);
  EXPECT_EQ(l.generation, 3);
  EXPECT_EQ(l.state.steps, 2);
  EXPECT_TRUE(l.fallback.empty());
  EXPECT_EQ(l.position, 2);
  EXPECT_EQ(l.rng, "0123456789abcdef");
  EXPECT_EQ(l.options["batch"], 32);
  HostFloatTrainer r(kModel, 32, sgd);
  r.load_state(l.state);
  run(r, 2, 4);
  EXPECT_EQ(r.state().params, a.state().params);
  EXPECT_EQ(r.state().momentum, a.state().momentum);
  EXPECT_EQ(r.state().steps, 4);
  fs::remove_all(dir);
  EXPECT_THROW(load_checkpoint(dir), Error);
}

TEST(TrainHost, TrainedModelKeepsNamesAndShapes) {
  const std::vector<uint8_t> bytes = read_file_bounded(kModel, 1 << 20, "model");
  HostFloatTrainer t(kModel, 32, SgdConfig{0.1f, 0, 0});
  const Digits d = digits(0, 32);
  t.step(d.x, d.y, 32);
  const std::vector<uint8_t> out = compiler::replace_float_initializers(bytes, "m.onnx", t.state().params);
  EXPECT_EQ(compiler::float_initializers(out, "out"), compiler::float_initializers(bytes, "in"));
  const TrainableModel back = describe_trainable(compiler::import_onnx_graph(out, "out.onnx"));
  EXPECT_EQ(back.initial_params, t.state().params);
  EXPECT_THROW(compiler::replace_float_initializers(bytes, "m.onnx", {{"nope", {1.0f}}}), Error);
  EXPECT_THROW(compiler::replace_float_initializers(bytes, "m.onnx", {{"fc2.bias", {1.0f}}}), Error);
}

}  // namespace
}  // namespace tpuw::runtime
