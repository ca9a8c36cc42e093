// The float interpreter of the IR and the quantization pass: the interpreter against
// nn::forward_float, the pass (and its lowering) against the quantizer it replaced
// (legacy_quantize.h) field by field, on the digits model and on random MLPs.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include "compiler_testlib.h"
#include "legacy_quantize.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::compiler {
namespace {

using nn::testing::legacy_quantize;

template <typename F>
void err(ErrorKind kind, F&& f, const std::vector<std::string>& parts) {
  testing::expect_error(std::forward<F>(f), kind, parts);
}

const std::string kDigits = std::string(TPUW_EXAMPLES_DIR) + "/digits/";

std::vector<float> as_float(const npy::Array& a) {
  if (a.dtype == npy::DType::kFloat32) {
    const auto v = a.view<float>();
    return {v.begin(), v.end()};
  }
  const auto v = a.view<uint8_t>();
  return {v.begin(), v.end()};
}

void expect_same(const nn::QNetwork& a, const nn::QNetwork& b) {
  EXPECT_EQ(a.input_features, b.input_features);
  EXPECT_EQ(a.input_scale, b.input_scale);
  EXPECT_EQ(a.host_op, b.host_op);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    SCOPED_TRACE(i);
    const nn::QLayer& x = a.layers[i];
    const nn::QLayer& y = b.layers[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.k, y.k);
    EXPECT_EQ(x.n, y.n);
    EXPECT_EQ(x.w_q, y.w_q);
    EXPECT_EQ(x.bias_q, y.bias_q);
    EXPECT_EQ(x.relu, y.relu);
    EXPECT_EQ(x.int32_output, y.int32_output);
    EXPECT_EQ(x.mult, y.mult);
    EXPECT_EQ(x.shift, y.shift);
    EXPECT_EQ(x.out_scale, y.out_scale);  // exact float equality, element by element
  }
}

/// A random MLP: 1..4 layers of 1..40 features, random ReLUs and softmax, some all-zero columns,
/// biases spanning several magnitudes.
nn::FloatNetwork random_mlp(std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> size(1, 40), count(1, 4), coin(0, 1), pick(0, 9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  nn::FloatNetwork f;
  f.source = "random";
  f.input_name = "x";
  f.output_name = "y";
  f.input_features = size(rng);
  f.input_shape = {-1, f.input_features};
  uint32_t k = f.input_features;
  const uint32_t layers = count(rng);
  for (uint32_t li = 0; li < layers; ++li) {
    nn::DenseLayer l;
    l.name = fmt::format("fc{} (Gemm)", li);
    l.k = k;
    l.n = size(rng);
    l.relu = coin(rng) != 0;
    l.w.resize(size_t{l.k} * l.n);
    for (float& w : l.w) w = nd(rng) * 0.3f;
    if (pick(rng) == 0) {
      for (uint32_t r = 0; r < l.k; ++r) l.w[size_t{r} * l.n] = 0;  // an all-zero column
    }
    l.b.resize(l.n);
    for (float& b : l.b) b = nd(rng) * (pick(rng) == 0 ? 10.0f : 0.1f);
    k = l.n;
    f.layers.push_back(std::move(l));
  }
  f.host_op = coin(rng) != 0 ? nn::HostOp::kSoftmax : nn::HostOp::kNone;
  return f;
}

std::vector<float> random_input(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

TEST(InterpretFloat, MatchesForwardFloatOnRandomMlps) {
  std::mt19937 rng(7);
  for (int t = 0; t < 300; ++t) {
    SCOPED_TRACE(t);
    const nn::FloatNetwork f = random_mlp(rng);
    const uint64_t batch = 1 + t % 9;
    const std::vector<float> x = random_input(rng, batch * f.input_features);
    const Graph g = graph_of_float_network(f);
    const std::vector<std::vector<float>> t_all = interpret_float(g, x, batch);
    EXPECT_EQ(t_all[static_cast<size_t>(g.outputs[0].value)], nn::forward_float(f, x, batch));
  }
}

TEST(InterpretFloat, MatchesForwardFloatOnDigitsImportedGraph) {
  const nn::FloatNetwork f = nn::import_onnx(kDigits + "digits_mlp.onnx");
  const std::vector<float> x = as_float(npy::load(kDigits + "test_x.npy"));
  const uint64_t rows = x.size() / f.input_features;
  const std::string bytes = [] {
    std::ifstream in(kDigits + "digits_mlp.onnx", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const Graph g = optimize(import_onnx_graph({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                             kDigits + "digits_mlp.onnx"));
  const std::vector<std::vector<float>> t_all = interpret_float(g, x, rows);
  EXPECT_EQ(t_all[static_cast<size_t>(g.outputs[0].value)], nn::forward_float(f, x, rows));
}

TEST(InterpretFloat, RejectsWhatItCannotRun) {
  nn::FloatNetwork f;
  f.source = "m";
  f.input_features = 3;
  f.layers.push_back(nn::DenseLayer{"fc", 3, 2, std::vector<float>(6, 1.0f), std::vector<float>(2), false, {}});
  Graph g = graph_of_float_network(f);
  err(ErrorKind::kInvalidArgument, [&] { (void)interpret_float(g, std::vector<float>(5), 2); },
                        {"input has 5 values, expected batch 2 x 3 features"});
  g.nodes[0].op = Op::kAdd;
  g.nodes[0].op_type = "Add";
  err(ErrorKind::kUnsupported, [&] { (void)interpret_float(g, std::vector<float>(6), 2); },
                        {"node 'fc' (Add): is not supported by the float interpreter"});
}

TEST(QuantizePass, DigitsIdenticalToTheOldQuantizerBothWays) {
  const std::string path = kDigits + "digits_mlp.onnx";
  const nn::FloatNetwork f = nn::import_onnx(path);
  const npy::Array ca = npy::load(kDigits + "calib_x.npy");
  const std::vector<float> calib = as_float(ca);
  const uint64_t rows = ca.shape[0];
  const nn::QNetwork old = legacy_quantize(f, calib, rows);
  ASSERT_EQ(old.layers.size(), 2u);
  // nn::quantize (the wrapper cmd_run uses) and the pass straight on the imported graph.
  expect_same(nn::quantize(f, calib, rows), old);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  expect_same(compile_quantized(import_onnx_graph({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, path),
                                calib, rows),
              old);
}

TEST(QuantizePass, RandomMlpsIdenticalToTheOldQuantizer) {
  std::mt19937 rng(11);
  int quantized = 0;
  for (int t = 0; t < 500; ++t) {
    SCOPED_TRACE(t);
    const nn::FloatNetwork f = random_mlp(rng);
    const uint64_t rows = 1 + t % 17;
    std::vector<float> calib = random_input(rng, rows * f.input_features);
    if (t % 50 == 0) std::fill(calib.begin(), calib.end(), 0.0f);  // all-zero calibration: scale 1
    nn::QNetwork expected;
    try {
      expected = legacy_quantize(f, calib, rows);
    } catch (const Error& e) {
      // Same error, same message.
      err(e.kind(), [&] { (void)nn::quantize(f, calib, rows); }, {e.what()});
      continue;
    }
    expect_same(nn::quantize(f, calib, rows), expected);
    ++quantized;
  }
  EXPECT_GT(quantized, 450);  // the error path is the exception
}

TEST(QuantizePass, SameErrorsAsTheOldQuantizer) {
  std::mt19937 rng(3);
  for (int t = 0; t < 6; ++t) {
    SCOPED_TRACE(t);
    nn::FloatNetwork f = random_mlp(rng);
    uint64_t rows = 2;
    std::vector<float> calib = random_input(rng, rows * f.input_features);
    switch (t) {
      case 0: f.layers.clear(); break;                                                    // no layer
      case 1: rows = 0; break;                                                            // no rows
      case 2: calib.pop_back(); break;                                                    // size
      case 3: f.layers[0].w.back() = std::numeric_limits<float>::infinity(); break;      // weight
      case 4: f.layers[0].b.back() = std::numeric_limits<float>::quiet_NaN(); break;     // bias
      default:  // a factor >= 2^31: a huge input scale into an all-zero layer (output scale 1)
        f.layers.insert(f.layers.begin(), nn::DenseLayer{"big", f.input_features, 1,
                                                         std::vector<float>(f.input_features, 0.0f), {0}, false, {}});
        f.layers[1].k = 1;
        f.layers[1].w.resize(f.layers[1].n);
        for (float& v : calib) v = 1e30f;
    }
    try {
      (void)legacy_quantize(f, calib, rows);
      ADD_FAILURE() << "the old quantizer accepted case " << t;
    } catch (const Error& e) {
      if (t == 3 || t == 4) {
        // Issue 14, class 6: a non-finite weight or bias is now a bad-file error naming the tensor
        // and the element (the old quantizer named only the column).
        err(ErrorKind::kBadFile, [&] { (void)nn::quantize(f, calib, rows); },
            {t == 3 ? "weight" : "bias", "element [", t == 3 ? "is +inf" : "is NaN"});
      } else {
        err(e.kind(), [&] { (void)nn::quantize(f, calib, rows); }, {e.what()});
      }
    }
  }
}

TEST(QuantizePass, GraphIsInt8WithScales) {
  nn::FloatNetwork f;
  f.source = "m";
  f.input_name = "x";
  f.output_name = "y";
  f.input_features = 2;
  f.layers.push_back(nn::DenseLayer{"fc1", 2, 3, {1, -2, 3, 0.5f, 0, -1}, {0.1f, 0, -0.1f}, true, {}});
  f.layers.push_back(nn::DenseLayer{"fc2", 3, 2, {1, 2, 3, 4, 5, 6}, {0, 0}, false, {}});
  f.host_op = nn::HostOp::kSoftmax;
  Graph g = graph_of_float_network(f);
  quantize(g, std::vector<float>{1, -2, 0.5f, 3}, 2);
  EXPECT_EQ(testing::op_types(g), (std::vector<std::string>{"Quantize", "QDense", "QDense", "Dequantize", "Softmax"}));
  const std::string d = dump(g);
  EXPECT_NE(d.find("%x.q:int8[batch, 2]@"), std::string::npos) << d;
  EXPECT_NE(d.find(":int32[batch, 2]@[2 scales]"), std::string::npos) << d;
  EXPECT_EQ(d.find("layer0.w:fp32"), std::string::npos) << d;  // float weights are dead and gone
  expect_same(lower_to_qnetwork(g), legacy_quantize(f, std::vector<float>{1, -2, 0.5f, 3}, 2));
  // Lowering insists on a quantized graph; the pass on what it cannot quantize.
  err(ErrorKind::kUnsupported, [&] { (void)lower_to_qnetwork(graph_of_float_network(f)); },
      {"node 'fc1' (Dense): is not an operator of a quantized network"});
  Graph h = graph_of_float_network(f);
  h.nodes[1].op = Op::kRelu;
  h.nodes[1].op_type = "Relu";
  err(ErrorKind::kUnsupported, [&] { quantize(h, std::vector<float>(2), 1); }, {"cannot be quantized"});
}

}  // namespace
}  // namespace tpuw::compiler
