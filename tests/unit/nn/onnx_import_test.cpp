// ONNX import: every supported operator against a CPU float reference written here (and, through
// int8 quantization, within quantization tolerance); unsupported and malformed models give their
// specific errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "onnx_builder.h"
#include "tpuw/error.h"
#include "tpuw/nn/onnx_import.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::nn {
namespace {

using testing::ModelBuilder;
using testing::random_floats;

// y[b][j] = act(alpha * sum_k x[b][k] * B'[k][j] + beta * c[j]), B' = B or B^T.
std::vector<float> ref_dense(const std::vector<float>& x, uint64_t batch, uint32_t k, uint32_t n,
                             const std::vector<float>& b_mat, bool trans_b, float alpha, const std::vector<float>& c,
                             float beta, bool relu) {
  std::vector<float> y(batch * n);
  for (uint64_t r = 0; r < batch; ++r) {
    for (uint32_t j = 0; j < n; ++j) {
      double s = 0;
      for (uint32_t kk = 0; kk < k; ++kk) {
        const float w = trans_b ? b_mat[size_t{j} * k + kk] : b_mat[size_t{kk} * n + j];
        s += double{x[r * k + kk]} * w;
      }
      double v = alpha * s + (c.empty() ? 0.0 : beta * c[c.size() == 1 ? 0 : j]);
      if (relu) v = std::max(v, 0.0);
      y[r * n + j] = static_cast<float>(v);
    }
  }
  return y;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (const float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The int8 path must stay within a few percent of the output range.
void expect_quantized_close(const FloatNetwork& net, const std::vector<float>& x, uint64_t batch,
                            const std::vector<float>& want, float rel = 0.04f) {
  const QNetwork q = quantize(net, x, batch);
  const std::vector<float> got = forward_int(q, x, batch);
  const float tol = rel * max_abs(want) + 1e-6f;
  expect_near_all(got, want, tol);
}

constexpr uint64_t kBatch = 7;

TEST(OnnxImport, GemmTransBAlphaBetaRelu) {
  const uint32_t k = 12, n = 5;
  const auto w = random_floats(n * k, -1, 1, 1);  // [n, k] (transB = 1, like PyTorch's Linear)
  const auto c = random_floats(n, -0.5, 0.5, 2);
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W", {n, k}, w).init("C", {n}, c, /*raw=*/false);
  auto& g = mb.node("Gemm", {"x", "W", "C"}, {"h"}, "fc");
  ModelBuilder::attr_i(g, "transB", 1);
  ModelBuilder::attr_f(g, "alpha", 0.5f);
  ModelBuilder::attr_f(g, "beta", 2.0f);
  mb.node("Relu", {"h"}, {"y"}, "act");
  mb.output("y");
  const FloatNetwork net = mb.import();
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_EQ(net.layers[0].k, k);
  EXPECT_EQ(net.layers[0].n, n);
  EXPECT_TRUE(net.layers[0].relu);
  EXPECT_EQ(net.layers[0].name, "fc (Gemm) + act (Relu)");
  EXPECT_EQ(net.input_name, "x");
  EXPECT_EQ(net.output_name, "y");
  EXPECT_EQ(net.input_shape, (std::vector<int64_t>{-1, k}));
  EXPECT_EQ(net.input_features, k);
  EXPECT_EQ(net.host_op, HostOp::kNone);
  // W is stored [k][n]: element (k=3, n=2) is B[2][3] * alpha.
  EXPECT_FLOAT_EQ(net.layers[0].w[3 * n + 2], 0.5f * w[2 * k + 3]);
  EXPECT_FLOAT_EQ(net.layers[0].b[4], 2.0f * c[4]);

  const auto x = random_floats(kBatch * k, -2, 2, 3);
  const auto want = ref_dense(x, kBatch, k, n, w, true, 0.5f, c, 2.0f, true);
  expect_near_all(forward_float(net, x, kBatch), want, 1e-5f);
  expect_quantized_close(net, x, kBatch, want);
}

TEST(OnnxImport, GemmNoTransposeBroadcastBiasNoRelu) {
  const uint32_t k = 9, n = 6;
  const auto w = random_floats(k * n, -1, 1, 4);  // [k, n]
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W", {k, n}, w).init("C", {1}, {0.25f});
  mb.node("Gemm", {"x", "W", "C"}, {"y"});
  mb.output("y");
  const FloatNetwork net = mb.import();
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_FALSE(net.layers[0].relu);
  const auto x = random_floats(kBatch * k, -1, 1, 5);
  const auto want = ref_dense(x, kBatch, k, n, w, false, 1.0f, {0.25f}, 1.0f, false);
  expect_near_all(forward_float(net, x, kBatch), want, 1e-5f);
  expect_quantized_close(net, x, kBatch, want);
}

TEST(OnnxImport, GemmWithoutBias) {
  const uint32_t k = 4, n = 3;
  const auto w = random_floats(k * n, -1, 1, 6);
  ModelBuilder mb;
  mb.input("x", {2, k}).init("W", {k, n}, w);
  mb.node("Gemm", {"x", "W"}, {"y"});
  mb.output("y");
  const FloatNetwork net = mb.import();
  EXPECT_EQ(net.input_shape, (std::vector<int64_t>{2, k}));
  EXPECT_EQ(net.layers[0].b, std::vector<float>(n, 0.0f));
  const auto x = random_floats(2 * k, -1, 1, 7);
  expect_near_all(forward_float(net, x, 2), ref_dense(x, 2, k, n, w, false, 1, {}, 1, false), 1e-5f);
}

TEST(OnnxImport, MatMulAddReluBothOperandOrders) {
  const uint32_t k = 16, h = 8, n = 4;
  const auto w1 = random_floats(k * h, -1, 1, 8);
  const auto b1 = random_floats(h, -0.3f, 0.3f, 9);
  const auto w2 = random_floats(h * n, -1, 1, 10);
  const auto b2 = random_floats(n, -0.3f, 0.3f, 11);
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W1", {k, h}, w1).init("B1", {h}, b1).init("W2", {h, n}, w2).init("B2", {1, n}, b2);
  mb.node("MatMul", {"x", "W1"}, {"m1"}, "mm1");
  mb.node("Add", {"m1", "B1"}, {"a1"}, "add1");
  mb.node("Relu", {"a1"}, {"r1"}, "relu1");
  mb.node("MatMul", {"r1", "W2"}, {"m2"}, "mm2");
  mb.node("Add", {"B2", "m2"}, {"y"}, "add2");  // bias first: Add is commutative
  mb.output("y");
  const FloatNetwork net = mb.import();
  ASSERT_EQ(net.layers.size(), 2u);
  EXPECT_EQ(net.layers[0].name, "mm1 (MatMul) + add1 (Add) + relu1 (Relu)");
  EXPECT_EQ(net.layers[1].name, "mm2 (MatMul) + add2 (Add)");
  EXPECT_TRUE(net.layers[0].relu);
  EXPECT_FALSE(net.layers[1].relu);
  const auto x = random_floats(kBatch * k, -1, 1, 12);
  const auto hid = ref_dense(x, kBatch, k, h, w1, false, 1, b1, 1, true);
  const auto want = ref_dense(hid, kBatch, h, n, w2, false, 1, b2, 1, false);
  expect_near_all(forward_float(net, x, kBatch), want, 1e-5f);
  expect_quantized_close(net, x, kBatch, want);
}

TEST(OnnxImport, FlattenOfImageInput) {
  const uint32_t n = 5;
  const auto w = random_floats(16 * n, -1, 1, 13);
  ModelBuilder mb;
  mb.input("img", {-1, 1, 4, 4}).init("W", {16, n}, w);
  auto& f = mb.node("Flatten", {"img"}, {"flat"});
  ModelBuilder::attr_i(f, "axis", 1);
  mb.node("MatMul", {"flat", "W"}, {"y"});
  mb.output("y");
  const FloatNetwork net = mb.import();
  EXPECT_EQ(net.input_features, 16u);
  EXPECT_EQ(net.input_shape, (std::vector<int64_t>{-1, 1, 4, 4}));
  const auto x = random_floats(kBatch * 16, 0, 1, 14);
  const auto want = ref_dense(x, kBatch, 16, n, w, false, 1, {}, 1, false);
  expect_near_all(forward_float(net, x, kBatch), want, 1e-5f);
  expect_quantized_close(net, x, kBatch, want);
}

TEST(OnnxImport, ReshapeWithInitializerConstantNodeAndZeroCopy) {
  const uint32_t n = 3;
  const auto w = random_floats(12 * n, -1, 1, 15);
  for (int variant = 0; variant < 3; ++variant) {
    ModelBuilder mb;
    mb.input("x", {-1, 3, 4}).init("W", {12, n}, w);
    if (variant == 0) {
      mb.init_i64("shape", {-1, 12});
    } else {
      auto& c = mb.node("Constant", {}, {"shape"});
      auto* a = c.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
      a->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
      a->mutable_t()->add_dims(2);
      a->mutable_t()->add_int64_data(variant == 1 ? -1 : 0);
      a->mutable_t()->add_int64_data(variant == 1 ? 12 : -1);
    }
    mb.node("Reshape", {"x", "shape"}, {"flat"});
    mb.node("Gemm", {"flat", "W"}, {"y"});
    mb.output("y");
    const FloatNetwork net = mb.import();
    ASSERT_EQ(net.layers.size(), 1u) << variant;
    EXPECT_EQ(net.layers[0].k, 12u);
    const auto x = random_floats(kBatch * 12, -1, 1, 16);
    expect_near_all(forward_float(net, x, kBatch), ref_dense(x, kBatch, 12, n, w, false, 1, {}, 1, false), 1e-5f);
  }
}

TEST(OnnxImport, SoftmaxOnHostOpset13And11) {
  const uint32_t k = 6, n = 4;
  const auto w = random_floats(k * n, -2, 2, 17);
  for (const int64_t opset : {13, 11}) {
    ModelBuilder mb(opset);
    mb.input("x", {-1, k}).init("W", {k, n}, w);
    mb.node("MatMul", {"x", "W"}, {"logits"});
    mb.node("Identity", {"logits"}, {"l2"});
    mb.node("Softmax", {"l2"}, {"p"});  // default axis: 1 before opset 13, -1 from 13: both the features
    mb.output("p");
    const FloatNetwork net = mb.import();
    EXPECT_EQ(net.host_op, HostOp::kSoftmax);
    const auto x = random_floats(kBatch * k, -1, 1, 18);
    auto want = ref_dense(x, kBatch, k, n, w, false, 1, {}, 1, false);
    for (uint64_t r = 0; r < kBatch; ++r) {
      double s = 0;
      for (uint32_t j = 0; j < n; ++j) s += std::exp(double{want[r * n + j]});
      for (uint32_t j = 0; j < n; ++j) want[r * n + j] = static_cast<float>(std::exp(double{want[r * n + j]}) / s);
    }
    const auto got = forward_float(net, x, kBatch);
    expect_near_all(got, want, 1e-5f);
    expect_quantized_close(net, x, kBatch, want, 0.05f);
  }
}

TEST(OnnxImport, IdentityAndDropoutAreAliases) {
  const uint32_t k = 5, n = 5;
  const auto w = random_floats(k * n, -1, 1, 19);
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W0", {k, n}, w);
  mb.node("Identity", {"W0"}, {"W"});  // a constant through Identity stays a constant
  mb.node("Identity", {"x"}, {"x1"});
  mb.node("Dropout", {"x1"}, {"x2"});
  mb.node("MatMul", {"x2", "W"}, {"m"});
  mb.node("Relu", {"m"}, {"r"});
  mb.node("Identity", {"r"}, {"y"});
  mb.output("y");
  const FloatNetwork net = mb.import();
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_TRUE(net.layers[0].relu);
  const auto x = random_floats(kBatch * k, -1, 1, 20);
  expect_near_all(forward_float(net, x, kBatch), ref_dense(x, kBatch, k, n, w, false, 1, {}, 1, true), 1e-5f);
}

// ---- unsupported --------------------------------------------------------------------------------
void expect_error(const ModelBuilder& mb, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    (void)mb.import("m.onnx");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " / " << p;
  }
}

ModelBuilder one_layer(uint32_t k = 4, uint32_t n = 3) {
  ModelBuilder mb;
  mb.input("x", {-1, k}).init("W", {k, n}, random_floats(k * n, -1, 1, 21)).init("B", {n}, {0.1f, 0.2f, 0.3f});
  return mb;
}

TEST(OnnxImportUnsupported, UnknownOperatorNamesNodeAndOperator) {
  ModelBuilder mb = one_layer();
  mb.node("MatMul", {"x", "W"}, {"m"}, "mm");
  mb.node("Sinh", {"m"}, {"y"}, "sinh");
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"m.onnx", "node 'sinh' (Sinh)", "not supported"});
}

TEST(OnnxImportUnsupported, GemmTransA) {
  ModelBuilder mb = one_layer();
  auto& g = mb.node("Gemm", {"x", "W"}, {"y"}, "g");
  ModelBuilder::attr_i(g, "transA", 1);
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"node 'g' (Gemm)", "transA=1"});
}

// Issue 14 class 6: a NaN or infinite alpha/beta is named as the node's attribute, not as the
// weight or bias it would have been folded into.
TEST(OnnxImportUnsupported, GemmNonFiniteAlphaBetaNamesNodeAndAttribute) {
  const struct {
    const char* attr;
    float v;
    const char* text;
  } cases[] = {{"alpha", std::numeric_limits<float>::quiet_NaN(), "nan"},
               {"alpha", std::numeric_limits<float>::infinity(), "inf"},
               {"beta", -std::numeric_limits<float>::infinity(), "-inf"},
               {"beta", std::numeric_limits<float>::quiet_NaN(), "nan"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.attr);
    ModelBuilder mb = one_layer();
    auto& g = mb.node("Gemm", {"x", "W", "B"}, {"y"}, "fc1");
    ModelBuilder::attr_f(g, c.attr, c.v);
    mb.output("y");
    expect_error(mb, ErrorKind::kBadFile,
                 {"m.onnx", "node 'fc1' (Gemm)", std::string("attribute '") + c.attr + "' is " + c.text, "finite"});
  }
}

TEST(OnnxImportUnsupported, UnknownAttribute) {
  ModelBuilder mb = one_layer();
  auto& g = mb.node("Relu", {"x"}, {"y"}, "r");
  ModelBuilder::attr_i(g, "fancy", 1);
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"node 'r' (Relu)", "attribute 'fancy'"});
}

TEST(OnnxImportUnsupported, BranchAndActivationAdd) {
  ModelBuilder mb = one_layer(3, 3);
  mb.node("MatMul", {"x", "W"}, {"m"}, "mm");
  mb.node("Add", {"m", "x"}, {"y"}, "skip");
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"node 'skip' (Add)", "earlier activation"});
  ModelBuilder mb2 = one_layer(3, 3);
  mb2.node("MatMul", {"x", "W"}, {"m"}, "mm");
  mb2.node("Relu", {"m"}, {"r"}, "relu");
  mb2.node("Add", {"r", "B"}, {"y"}, "late_bias");
  mb2.output("y");
  // A constant Add after Relu runs as its own per-feature layer (tpuw/compiler/feature_maps.h).
  EXPECT_EQ(mb2.import().layers.size(), 2u);
}

TEST(OnnxImportUnsupported, FlattenAxisZeroAndBatchMergingReshape) {
  ModelBuilder mb = one_layer();
  auto& f = mb.node("Flatten", {"x"}, {"y"}, "fl");
  ModelBuilder::attr_i(f, "axis", 0);
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"node 'fl' (Flatten)", "axis=0"});
  ModelBuilder mb2 = one_layer();
  mb2.init_i64("s", {-1});
  mb2.node("Reshape", {"x", "s"}, {"y"}, "rs");
  mb2.output("y");
  expect_error(mb2, ErrorKind::kUnsupported, {"node 'rs' (Reshape)", "batch"});
}

TEST(OnnxImportUnsupported, ReluOnInputAndOperatorAfterSoftmax) {
  ModelBuilder mb = one_layer();
  mb.node("Relu", {"x"}, {"y"}, "r0");
  mb.output("y");
  // Relu on the graph input runs as an identity layer with ReLU (tpuw/compiler/feature_maps.h).
  const FloatNetwork r0 = mb.import();
  ASSERT_EQ(r0.layers.size(), 1u);
  EXPECT_TRUE(r0.layers[0].relu);
  ModelBuilder mb2 = one_layer();
  mb2.node("MatMul", {"x", "W"}, {"m"}, "mm");
  mb2.node("Softmax", {"m"}, {"p"}, "sm");
  mb2.node("Relu", {"p"}, {"y"}, "after");
  mb2.output("y");
  expect_error(mb2, ErrorKind::kUnsupported, {"node 'after' (Relu)", "Softmax"});
}

TEST(OnnxImportUnsupported, IntegerInputExternalDataAndForeignDomain) {
  ModelBuilder mb;
  mb.input("x", {-1, 4}, onnx::TensorProto_DataType_INT8).init("W", {4, 2}, std::vector<float>(8, 1.0f));
  mb.node("MatMul", {"x", "W"}, {"y"});
  mb.output("y");
  expect_error(mb, ErrorKind::kUnsupported, {"graph input 'x'", "INT8"});

  ModelBuilder mb2 = one_layer();
  auto* t = mb2.graph().mutable_initializer(0);
  t->clear_raw_data();
  t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  mb2.node("MatMul", {"x", "W"}, {"y"});
  mb2.output("y");
  expect_error(mb2, ErrorKind::kUnsupported, {"initializer 'W'", "external"});

  ModelBuilder mb3 = one_layer();
  mb3.node("MatMul", {"x", "W"}, {"y"}, "mm").set_domain("com.microsoft");
  mb3.output("y");
  expect_error(mb3, ErrorKind::kUnsupported, {"node 'mm' (MatMul)", "com.microsoft"});
}

// ---- malformed ----------------------------------------------------------------------------------
void expect_bad_bytes(const std::string& bytes, const std::string& why) {
  try {
    (void)import_onnx_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "bad.onnx");
    FAIL() << why << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile) << why << ": " << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("bad.onnx: ", 0), 0u) << e.what();
  }
}

ModelBuilder good_mlp() {
  ModelBuilder mb;
  mb.input("x", {-1, 8})
      .init("W1", {8, 6}, random_floats(48, -1, 1, 30))
      .init("B1", {6}, random_floats(6, -1, 1, 31))
      .init("W2", {6, 3}, random_floats(18, -1, 1, 32), false);
  mb.node("MatMul", {"x", "W1"}, {"m1"});
  mb.node("Add", {"m1", "B1"}, {"a1"});
  mb.node("Relu", {"a1"}, {"r1"});
  mb.node("MatMul", {"r1", "W2"}, {"m2"});
  mb.node("Softmax", {"m2"}, {"y"});
  mb.output("y");
  return mb;
}

TEST(OnnxImportMalformed, EmptyGarbageAndEmptyModel) {
  expect_bad_bytes("", "empty");
  expect_bad_bytes(std::string("\xff\xff\xff\xff\xff\xff\xff\xff garbage that is not protobuf", 38), "garbage");
  expect_bad_bytes("PK\x03\x04 this is a zip file, not a model", "zip");
  expect_bad_bytes(ModelBuilder().model().SerializeAsString(), "model without graph");
}

TEST(OnnxImportMalformed, EveryTruncationIsABadFile) {
  const std::string full = good_mlp().bytes();
  ASSERT_NO_THROW((void)good_mlp().import());
  for (size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    expect_bad_bytes(full.substr(0, len), "truncated");
  }
}

TEST(OnnxImportMalformed, InconsistentTensorsAndDanglingReferences) {
  ModelBuilder mb = good_mlp();
  mb.graph().mutable_initializer(0)->mutable_raw_data()->resize(40);  // 10 floats for [8, 6]
  expect_bad_bytes(mb.bytes(), "short raw data");
  ModelBuilder mb2 = good_mlp();
  mb2.graph().mutable_initializer(2)->add_float_data(1.0f);  // 19 values for [6, 3]
  expect_bad_bytes(mb2.bytes(), "extra float_data");
  ModelBuilder mb3 = good_mlp();
  mb3.graph().mutable_node(0)->set_input(1, "nope");
  expect_bad_bytes(mb3.bytes(), "undefined tensor");
  ModelBuilder mb4 = good_mlp();
  mb4.graph().mutable_output(0)->set_name("nobody");
  expect_bad_bytes(mb4.bytes(), "undefined output");
  ModelBuilder mb5 = good_mlp();
  mb5.graph().mutable_initializer(0)->set_dims(0, 5);  // [5, 6] against 8 input features
  expect_bad_bytes(mb5.bytes(), "shape mismatch");
}

TEST(OnnxImportMalformed, FileErrorsNameTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / "tpuw_nn_import_test";
  std::filesystem::create_directories(dir);
  try {
    (void)import_onnx(dir / "missing.onnx");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_NE(std::string(e.what()).find("missing.onnx"), std::string::npos);
  }
  const auto path = dir / "half.onnx";
  const std::string full = good_mlp().bytes();
  std::ofstream(path, std::ios::binary) << full.substr(0, full.size() / 2);
  try {
    (void)import_onnx(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpuw::nn

namespace tpuw::nn {
namespace {

// Random byte mutations of a valid model: every result either imports or throws tpuw::Error with
// kBadFile or kUnsupported (never another exception, never a crash).
TEST(OnnxImportMalformed, RandomMutationsNeverCrash) {
  const std::string s = good_mlp().bytes();
  const std::vector<uint8_t> full(s.begin(), s.end());
  std::mt19937 rng(11);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = full;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && b.size() > 1; ++e) {
      const size_t pos = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b[pos] = static_cast<uint8_t>(b[pos] ^ (1u << (rng() % 8))); break;
        default: {
          const size_t len = std::min<size_t>(1 + rng() % 8, b.size() - pos);
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(pos + len));
          break;
        }
      }
    }
    try {
      const FloatNetwork net = import_onnx_bytes(b, "fuzz");
      ASSERT_EQ(net.layers.empty() ? net.input_features : net.layers[0].k, net.input_features);
    } catch (const Error& e) {
      ++errors;
      ASSERT_TRUE(e.kind() == ErrorKind::kBadFile || e.kind() == ErrorKind::kUnsupported) << e.what();
    }
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace tpuw::nn
