// CNNs with several graph inputs (compile_quantized_cnn / compile_bf16_cnn with cnn_inputs;
// docs/network_compiler.md "Several graph inputs"): an image and a side vector that joins the dense
// head, two images in two branches joined by an Add and a Concat, a Concat of two images feeding a
// Conv. int8: each input its own scale, the head's first layer reconciling the vector's and the map's;
// the device == the CPU integer model, within a stated tolerance of the float model; bf16: the
// device == the contract bit for bit and within 2 % of float; rtl == ref; the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "compiler_testlib.h"
#include "tpuw/backend.h"
#include "tpuw/compiler/cnn_training.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/compiler/quantize.h"
#include "tpuw/device.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/conv_bf16.h"

namespace tpuw::compiler::testing {
namespace {

// (As conv_test.cpp's: each test file of this binary keeps its builders local.)
void conv3x3(ModelBuilder& mb, const std::string& name, const std::string& in, const std::string& out, int64_t c,
             int64_t o, float range, uint32_t seed) {
  mb.init(name + ".w", {o, c, 3, 3}, random_floats(static_cast<size_t>(o * c * 9), -range, range, seed));
  mb.init(name + ".b", {o}, random_floats(static_cast<size_t>(o), -0.1f, 0.1f, seed + 1));
  auto& n = mb.node("Conv", {in, name + ".w", name + ".b"}, {out}, name);
  ModelBuilder::attr_ints(n, "pads", {1, 1, 1, 1});
}

void flatten(ModelBuilder& mb, const std::string& in, const std::string& out) {
  ModelBuilder::attr_i(mb.node("Flatten", {in}, {out}, "flat"), "axis", 1);
}

void gemm(ModelBuilder& mb, const std::string& name, const std::string& in, const std::string& out, int64_t k,
          int64_t n, uint32_t seed) {
  mb.init(name + ".w", {n, k}, random_floats(static_cast<size_t>(n * k), -0.3f, 0.3f, seed));
  mb.init(name + ".b", {n}, random_floats(static_cast<size_t>(n), -0.1f, 0.1f, seed + 1));
  ModelBuilder::attr_i(mb.node("Gemm", {in, name + ".w", name + ".b"}, {out}, name), "transB", 1);
}

// x [batch, 2, 6, 6] -> conv (2 -> 3) -> relu -> maxpool 2 -> flatten (27); Concat(v, flat) with
// v [batch, 4] (the vector first: the head's row is [v | map]) -> Gemm (31 -> 8) -> relu -> Gemm (8 -> 3).
ModelBuilder image_vector() {
  ModelBuilder mb;
  mb.input("x", {-1, 2, 6, 6}).input("v", {-1, 4});
  conv3x3(mb, "conv", "x", "c", 2, 3, 0.4f, 501);
  mb.node("Relu", {"c"}, {"r"}, "relu");
  auto& p = mb.node("MaxPool", {"r"}, {"p"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  flatten(mb, "p", "f");
  ModelBuilder::attr_i(mb.node("Concat", {"v", "f"}, {"cat"}, "cat"), "axis", 1);
  gemm(mb, "fc1", "cat", "h0", 31, 8, 503);
  mb.node("Relu", {"h0"}, {"h"}, "relu2");
  gemm(mb, "fc2", "h", "y", 8, 3, 505);
  mb.output("y");
  return mb;
}

// a, b [batch, 2, 6, 6]: y = relu(conv_a(a)), z = relu(conv_b(b)); Concat(y + z, z) (channels) ->
// avgpool 2 -> flatten (54) -> Gemm (54 -> 4).
ModelBuilder two_images() {
  ModelBuilder mb;
  mb.input("a", {-1, 2, 6, 6}).input("b", {-1, 2, 6, 6});
  conv3x3(mb, "ca", "a", "ya", 2, 3, 0.4f, 511);
  mb.node("Relu", {"ya"}, {"y"}, "relua");
  conv3x3(mb, "cb", "b", "zb", 2, 3, 0.04f, 513);
  mb.node("Relu", {"zb"}, {"z"}, "relub");
  mb.node("Add", {"y", "z"}, {"s"}, "add");
  ModelBuilder::attr_i(mb.node("Concat", {"s", "z"}, {"c"}, "cat"), "axis", 1);
  auto& p = mb.node("AveragePool", {"c"}, {"p"}, "pool");
  ModelBuilder::attr_ints(p, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(p, "strides", {2, 2});
  flatten(mb, "p", "f");
  gemm(mb, "fc", "f", "out", 54, 4, 515);
  mb.output("out");
  return mb;
}

// Concat(a, b) along the channels -> conv (4 -> 5) -> relu -> GlobalAveragePool -> flatten -> Gemm (5 -> 3).
ModelBuilder concat_images() {
  ModelBuilder mb;
  mb.input("a", {-1, 2, 6, 6}).input("b", {-1, 2, 6, 6});
  ModelBuilder::attr_i(mb.node("Concat", {"a", "b"}, {"ab"}, "cat"), "axis", 1);
  conv3x3(mb, "conv", "ab", "c", 4, 5, 0.3f, 521);
  mb.node("Relu", {"c"}, {"r"}, "relu");
  mb.node("GlobalAveragePool", {"r"}, {"g"}, "gap");
  flatten(mb, "g", "f");
  gemm(mb, "fc", "f", "out", 5, 3, 523);
  mb.output("out");
  return mb;
}

// Input rows [batch][every input side by side]: input k uniform in +-range[k].
std::vector<float> input_rows(uint64_t batch, const std::vector<uint64_t>& features, const std::vector<float>& range,
                              uint32_t seed) {
  std::vector<std::vector<float>> parts;
  for (size_t k = 0; k < features.size(); ++k) {
    parts.push_back(random_floats(batch * features[k], -range[k], range[k], seed + static_cast<uint32_t>(k)));
  }
  return nn::rows_side_by_side(parts, batch);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (const float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// int8 on ref == the CPU integer model, rtl == ref, within tol of float; bf16 on ref == the contract
// bit for bit and within 2 % of float (rtl == ref too). Returns the int8 network.
nn::QCnn expect_runs(const ModelBuilder& mb, const std::vector<float>& x, uint64_t batch, double tol) {
  const Graph og = optimize(graph_of(mb));
  const std::vector<float> yf = interpret_float(og, x, batch)[static_cast<size_t>(og.outputs[0].value)];
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, batch);
  const std::vector<int8_t> xq = nn::quantize_cnn_input(q, x);
  Device ref = Device::open("ref", BackendConfig{});
  const runtime::CnnRunResult r = runtime::run_cnn(ref, q, xq, batch);
  EXPECT_EQ(r.output_i32, nn::forward_cnn_int_raw(q, xq, batch));
  const std::vector<float> y = nn::dequantize_output(q.head, r.output_i32, batch);
  EXPECT_EQ(y.size(), yf.size());
  EXPECT_GT(max_abs(yf), 0.0);
  EXPECT_LE(max_diff(y, yf), tol * max_abs(yf)) << "int8: largest error " << max_diff(y, yf) << " of " << max_abs(yf);

  const Bf16Cnn net = compile_bf16_cnn(graph_of(mb));
  const runtime::CnnBf16RunResult rb = runtime::run_cnn_bf16(ref, net, x, batch);
  const std::vector<float> want = runtime::forward_cnn_bf16_host(net, x, batch, 16);
  EXPECT_EQ(rb.output.size(), want.size());
  for (size_t i = 0; i < want.size() && i < rb.output.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(rb.output[i]), std::bit_cast<uint32_t>(want[i])) << "bf16 output " << i;
  }
  EXPECT_LE(max_diff(rb.output, yf), 0.02 * max_abs(yf)) << "bf16: largest error " << max_diff(rb.output, yf);

  if (!backend_array_sizes("rtl").empty()) {
    Device rtl = Device::open("rtl", BackendConfig{});
    const runtime::CnnRunResult rr = runtime::run_cnn(rtl, q, xq, batch);
    EXPECT_EQ(rr.output_i32, r.output_i32);
    EXPECT_EQ(rr.moved_bytes, r.moved_bytes);
    const runtime::CnnBf16RunResult rrb = runtime::run_cnn_bf16(rtl, net, x, batch);
    EXPECT_EQ(rrb.output, rb.output);
  }
  return q;
}

TEST(CnnInputs, ImageAndVectorJoinTheHeadWithTheirOwnScales) {
  const uint64_t batch = 6;
  // v is 50x the image: without its own scale it would crush the map's int8 range.
  const std::vector<float> x = input_rows(batch, {72, 4}, {1.0f, 50.0f}, 531);
  const nn::QCnn q = expect_runs(image_vector(), x, batch, 0.04);
  ASSERT_EQ(q.inputs.size(), 2u);
  EXPECT_EQ(q.inputs[0].name, "x");
  EXPECT_TRUE(q.inputs[0].image);
  EXPECT_EQ(q.inputs[1].name, "v");
  EXPECT_FALSE(q.inputs[1].image);
  EXPECT_EQ(q.inputs[1].features(), 4u);
  EXPECT_EQ(q.input_row(), 76u);
  EXPECT_EQ(q.input_offset(1), 72u);
  EXPECT_EQ(q.input_scale, q.inputs[0].scale);
  EXPECT_GT(q.inputs[1].scale / q.inputs[0].scale, 20.0f);
  // The head's row is [v | map], as the Concat orders it; each part with its own scale.
  EXPECT_EQ(q.head_sources, (std::vector<int32_t>{-2, 1}));
  EXPECT_EQ(q.head.input_features, 31u);
  EXPECT_EQ(q.head.input_part_features, (std::vector<uint32_t>{4, 27}));
  ASSERT_EQ(q.head.input_part_scales.size(), 2u);
  EXPECT_EQ(q.head.input_part_scales[0], q.inputs[1].scale);
  EXPECT_EQ(q.head.input_part_scales[1], q.convs.back().out_scale);
  EXPECT_EQ(q.convs[0].sources, (std::vector<int32_t>{}));  // the first layer reads input 0 (x)
  // The head's input on the host: v's int8 values then the map's, image by image.
  const std::vector<int8_t> xq = nn::quantize_cnn_input(q, x);
  const std::vector<int8_t> last(batch * 27, 7);
  const std::vector<int8_t> h = nn::cnn_head_input(q, xq, last, batch);
  ASSERT_EQ(h.size(), batch * 31);
  EXPECT_EQ(h[31 + 2], xq[76 + 72 + 2]);
  EXPECT_EQ(h[31 + 4], 7);
  // bf16: the same head row, no scales.
  const Bf16Cnn net = compile_bf16_cnn(graph_of(image_vector()));
  EXPECT_EQ(net.head_sources, (std::vector<int32_t>{-2, 1}));
  EXPECT_EQ(net.head.input_features, 31u);
  EXPECT_EQ(net.convs[0].sources, (std::vector<int32_t>{-1}));
  EXPECT_EQ(net.input_row(), 76u);
}

TEST(CnnInputs, TwoImageBranchesJoinedByAnAddAndAChannelConcat) {
  const uint64_t batch = 5;
  const std::vector<float> x = input_rows(batch, {72, 72}, {1.0f, 10.0f}, 541);
  const nn::QCnn q = expect_runs(two_images(), x, batch, 0.04);
  ASSERT_EQ(q.inputs.size(), 2u);
  EXPECT_TRUE(q.inputs[1].image);
  EXPECT_GT(q.inputs[1].scale / q.inputs[0].scale, 5.0f);  // b is 10x a: its own scale
  ASSERT_EQ(q.convs.size(), 5u);
  EXPECT_EQ(q.convs[0].sources, (std::vector<int32_t>{}));    // conv_a reads a (-1, the default)
  EXPECT_EQ(q.convs[1].sources, (std::vector<int32_t>{-2}));  // conv_b reads b
  EXPECT_EQ(q.convs[2].sources, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(q.convs[3].sources, (std::vector<int32_t>{2, 1}));
  EXPECT_TRUE(q.head_sources.empty());
  // Layer 1's input is b's part of the rows.
  const std::vector<int8_t> xq = nn::quantize_cnn_input(q, x);
  const std::vector<int8_t> in1 = nn::cnn_layer_input(
      q, 1, xq, [](size_t) -> const std::vector<int8_t>& { throw std::logic_error("no layer"); }, batch);
  ASSERT_EQ(in1.size(), batch * 72);
  EXPECT_EQ(in1[72 + 5], xq[144 + 72 + 5]);
  EXPECT_EQ(in1[0], nn::quantize_value(x[72], q.inputs[1].scale));
}

TEST(CnnInputs, ConcatOfTwoImagesFeedsAConv) {
  const uint64_t batch = 4;
  const std::vector<float> x = input_rows(batch, {72, 72}, {1.0f, 10.0f}, 551);
  const nn::QCnn q = expect_runs(concat_images(), x, batch, 0.04);
  ASSERT_GE(q.convs.size(), 3u);
  EXPECT_EQ(q.convs[0].sources, (std::vector<int32_t>{-1, -2}));  // the Concat: a 1x1 layer over [a; b]
  EXPECT_EQ(q.convs[0].geom.in_c, 4u);
}

TEST(CnnInputs, Refusals) {
  const std::vector<float> x76(2 * 76, 0.5f);
  {  // a vector read inside the head (a Concat with a hidden activation)
    ModelBuilder mb;
    mb.input("x", {-1, 2, 6, 6}).input("v", {-1, 4});
    conv3x3(mb, "conv", "x", "c", 2, 3, 0.4f, 501);
    flatten(mb, "c", "f");
    gemm(mb, "fc1", "f", "h", 108, 8, 503);
    ModelBuilder::attr_i(mb.node("Concat", {"h", "v"}, {"cat"}, "cat"), "axis", 1);
    gemm(mb, "fc2", "cat", "y", 12, 3, 505);
    mb.output("y");
    for (const bool bf16 : {false, true}) {
      expect_error(
          [&] {
            if (bf16) {
              (void)compile_bf16_cnn(graph_of(mb));
            } else {
              (void)compile_quantized_cnn(graph_of(mb), x76, 2);
            }
          },
          ErrorKind::kUnsupported, {"node 'cat' (Concat)", "reads the vector input 'v' inside the dense head"});
    }
  }
  {  // input rows of the wrong width (the image without the vector) on the device: refused, int8 and bf16
    const std::vector<float> x = input_rows(2, {72, 4}, {1.0f, 1.0f}, 561);
    const nn::QCnn q = compile_quantized_cnn(graph_of(image_vector()), x, 2);
    const Bf16Cnn net = compile_bf16_cnn(graph_of(image_vector()));
    Device dev = Device::open("ref", BackendConfig{});
    const std::vector<int8_t> short_q(2 * 72, 1);
    const std::vector<float> short_f(2 * 72, 0.5f);
    expect_error([&] { (void)runtime::run_cnn(dev, q, short_q, 2); }, ErrorKind::kInvalidArgument,
                 {"input has 144 values, expected batch 2 x 76"});
    expect_error([&] { (void)runtime::run_cnn_bf16(dev, net, short_f, 2); }, ErrorKind::kInvalidArgument,
                 {"input has 144 values, expected batch 2 x 76"});
  }
  // Training (tpuw train) runs one input for now: named.
  expect_error([&] { (void)build_cnn_training_model(graph_of(image_vector())); }, ErrorKind::kUnsupported,
               {"a CNN with several inputs ('x', 'v') cannot be trained yet"});
  {  // a vector input that never joins the head
    ModelBuilder mb;
    mb.input("x", {-1, 2, 6, 6}).input("v", {-1, 4});
    conv3x3(mb, "conv", "x", "c", 2, 3, 0.4f, 501);
    flatten(mb, "c", "f");
    gemm(mb, "fc1", "f", "y", 108, 3, 503);
    mb.output("y");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), x76, 2); }, ErrorKind::kUnsupported,
                 {"graph input 'v' does not join the dense head"});
    expect_error([&] { (void)compile_bf16_cnn(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"graph input 'v' does not join the dense head"});
  }
  {  // a vector input of a model that ends in a feature map (no head to join)
    ModelBuilder mb;
    mb.input("x", {-1, 2, 6, 6}).input("v", {-1, 4});
    conv3x3(mb, "conv", "x", "c", 2, 3, 0.4f, 501);
    mb.output("c");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), x76, 2); }, ErrorKind::kUnsupported,
                 {"graph input 'v' does not join the dense head"});
  }
  {  // an input of rank 3
    ModelBuilder mb;
    mb.input("x", {-1, 2, 6, 6}).input("z", {-1, 4, 2});
    conv3x3(mb, "conv", "x", "c", 2, 3, 0.4f, 501);
    mb.output("c");
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), x76, 2); }, ErrorKind::kUnsupported,
                 {"graph input 'z' has shape [batch, 4, 2]", "a CNN's inputs ('x', 'z')"});
    expect_error([&] { (void)compile_bf16_cnn(graph_of(mb)); }, ErrorKind::kUnsupported,
                 {"graph input 'z' has shape [batch, 4, 2]"});
  }
  {  // the map and the vector joined along the batch axis (refused by the Concat's legalization)
    ModelBuilder mb;
    mb.input("x", {-1, 1, 2, 2}).input("v", {-1, 12});
    conv3x3(mb, "conv", "x", "c", 1, 3, 0.4f, 501);
    flatten(mb, "c", "f");
    ModelBuilder::attr_i(mb.node("Concat", {"f", "v"}, {"cat"}, "cat"), "axis", 0);
    gemm(mb, "fc", "cat", "y", 12, 3, 503);
    mb.output("y");
    const std::vector<float> x16(2 * 16, 0.5f);
    expect_error([&] { (void)compile_quantized_cnn(graph_of(mb), x16, 2); }, ErrorKind::kUnsupported,
                 {"node 'cat' (Concat)"});
  }
}

}  // namespace
}  // namespace tpuw::compiler::testing
