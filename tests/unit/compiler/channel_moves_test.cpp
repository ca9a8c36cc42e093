// lower_channel_moves (tpuw/compiler/channel_moves.h): ReduceMean over H and W, a Slice of the
// channels and the channel shuffle become GlobalAveragePool (+ Flatten) and 1x1 selection Convs;
// the float interpreter gives exactly the moved values, and int8 / bf16 CNNs compile them.
#include <gtest/gtest.h>

#include "compiler_testlib.h"
#include "tpuw/compiler/channel_moves.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/quantize.h"

namespace tpuw::compiler {
namespace {

using testing::add_constant_i64;
using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;
using testing::random_floats;

constexpr int64_t kC = 6, kH = 2, kW = 3, kRows = 2;

// The last value of the optimized graph for input x (rows kRows).
std::vector<float> run(const ModelBuilder& mb, const std::vector<float>& x) {
  const Graph g = optimize(graph_of(mb));
  const auto acts = interpret_float(g, x, kRows);
  return acts.at(static_cast<size_t>(g.outputs[0].value));
}

float at(const std::vector<float>& x, int64_t b, int64_t c, int64_t hw) {
  return x[static_cast<size_t>((b * kC + c) * kH * kW + hw)];
}

TEST(ChannelMoves, ShuffleIsOnePermutationConv) {
  ModelBuilder mb;
  mb.input("x", {-1, kC, kH, kW}).output("y");
  add_constant_i64(mb, "s5", {0, 2, kC / 2, kH, kW});
  mb.node("Reshape", {"x", "s5"}, {"r5"}, "view");
  ModelBuilder::attr_ints(mb.node("Transpose", {"r5"}, {"t5"}, "transpose"), "perm", {0, 2, 1, 3, 4});
  add_constant_i64(mb, "s4", {0, -1, kH, kW});
  mb.node("Reshape", {"t5", "s4"}, {"y"}, "view2");
  const Graph g = optimize(graph_of(mb));
  ASSERT_EQ(g.nodes.size(), 1U);
  EXPECT_EQ(g.nodes[0].op, Op::kConv);
  EXPECT_EQ(g.nodes[0].origin, (std::vector<std::string>{"view (Reshape)", "transpose (Transpose)", "view2 (Reshape)"}));
  const std::vector<float> x = random_floats(static_cast<size_t>(kRows * kC * kH * kW), -1, 1, 7);
  const std::vector<float> y = run(mb, x);
  // groups 2 of 3: output channel j * 2 + k is input channel k * 3 + j.
  const int64_t src[kC] = {0, 3, 1, 4, 2, 5};
  for (int64_t b = 0; b < kRows; ++b) {
    for (int64_t c = 0; c < kC; ++c) {
      for (int64_t p = 0; p < kH * kW; ++p) EXPECT_EQ(at(y, b, c, p), at(x, b, src[c], p)) << b << " " << c << " " << p;
    }
  }
}

TEST(ChannelMoves, ChannelSliceIsASelectionConv) {
  for (const bool second : {false, true}) {
    ModelBuilder mb;
    mb.input("x", {-1, kC, kH, kW}).output("y");
    add_constant_i64(mb, "st", {second ? kC / 2 : 0});
    add_constant_i64(mb, "en", {second ? kC : kC / 2});
    add_constant_i64(mb, "ax", {1});
    mb.node("Slice", {"x", "st", "en", "ax"}, {"y"}, "chunk");
    const std::vector<float> x = random_floats(static_cast<size_t>(kRows * kC * kH * kW), -1, 1, 8);
    const std::vector<float> y = run(mb, x);
    ASSERT_EQ(y.size(), x.size() / 2);
    for (int64_t b = 0; b < kRows; ++b) {
      for (int64_t c = 0; c < kC / 2; ++c) {
        for (int64_t p = 0; p < kH * kW; ++p) {
          EXPECT_EQ(y[static_cast<size_t>((b * kC / 2 + c) * kH * kW + p)], at(x, b, c + (second ? kC / 2 : 0), p));
        }
      }
    }
  }
}

TEST(ChannelMoves, ReduceMeanOverHeightAndWidthIsAGlobalPool) {
  for (const int64_t keep : {0, 1}) {
    ModelBuilder mb;
    mb.input("x", {-1, kC, kH, kW}).output("y");
    auto& n = mb.node("ReduceMean", {"x"}, {"y"}, "mean");
    ModelBuilder::attr_ints(n, "axes", {2, 3});
    ModelBuilder::attr_i(n, "keepdims", keep);
    const Graph g = optimize(graph_of(mb));
    const std::vector<std::string> want = keep ? std::vector<std::string>{"ReduceMean"}
                                               : std::vector<std::string>{"ReduceMean", "Flatten"};
    EXPECT_EQ(testing::op_types(g), want);
    EXPECT_EQ(g.nodes[0].op, Op::kGlobalAveragePool);
    EXPECT_EQ(*g.value(g.outputs[0].value).shape, keep ? (Dims{kBatch, kC, 1, 1}) : (Dims{kBatch, kC}));
    const std::vector<float> x = random_floats(static_cast<size_t>(kRows * kC * kH * kW), -1, 1, 9);
    const std::vector<float> y = run(mb, x);
    ASSERT_EQ(y.size(), static_cast<size_t>(kRows * kC));
    for (int64_t b = 0; b < kRows; ++b) {
      for (int64_t c = 0; c < kC; ++c) {
        double s = 0;
        for (int64_t p = 0; p < kH * kW; ++p) s += at(x, b, c, p);
        EXPECT_NEAR(y[static_cast<size_t>(b * kC + c)], s / (kH * kW), 1e-6);
      }
    }
  }
}

// A shufflenet unit: conv -> relu -> [chunk x1 | chunk x2 -> conv -> relu] -> concat -> shuffle
// -> global mean -> Gemm. int8 and bf16 both compile it into CNN layers (selection convs included).
TEST(ChannelMoves, ShuffleUnitCompilesInBothPrecisions) {
  ModelBuilder mb;
  mb.input("x", {-1, 3, 4, 4}).output("y");
  mb.init("w0", {kC, 3, 3, 3}, random_floats(static_cast<size_t>(kC * 27), -0.3f, 0.3f, 10));
  auto& c0 = mb.node("Conv", {"x", "w0"}, {"c0"}, "conv0");
  ModelBuilder::attr_ints(c0, "pads", {1, 1, 1, 1});
  mb.node("Relu", {"c0"}, {"a0"}, "relu0");
  add_constant_i64(mb, "z", {0});
  add_constant_i64(mb, "h", {kC / 2});
  add_constant_i64(mb, "e", {kC});
  add_constant_i64(mb, "ax", {1});
  mb.node("Slice", {"a0", "z", "h", "ax"}, {"x1"}, "chunk1");
  mb.node("Slice", {"a0", "h", "e", "ax"}, {"x2"}, "chunk2");
  mb.init("w1", {kC / 2, kC / 2, 1, 1}, random_floats(static_cast<size_t>(kC * kC / 4), -0.5f, 0.5f, 11));
  mb.node("Conv", {"x2", "w1"}, {"c1"}, "conv1");
  mb.node("Relu", {"c1"}, {"a1"}, "relu1");
  ModelBuilder::attr_i(mb.node("Concat", {"x1", "a1"}, {"cat"}, "cat"), "axis", 1);
  add_constant_i64(mb, "s5", {0, 2, kC / 2, 4, 4});
  mb.node("Reshape", {"cat", "s5"}, {"r5"}, "view");
  ModelBuilder::attr_ints(mb.node("Transpose", {"r5"}, {"t5"}, "transpose"), "perm", {0, 2, 1, 3, 4});
  add_constant_i64(mb, "s4", {0, -1, 4, 4});
  mb.node("Reshape", {"t5", "s4"}, {"sh"}, "view2");
  auto& m = mb.node("ReduceMean", {"sh"}, {"gap"}, "mean");
  ModelBuilder::attr_ints(m, "axes", {2, 3});
  ModelBuilder::attr_i(m, "keepdims", 0);
  mb.init("fw", {5, kC}, random_floats(static_cast<size_t>(5 * kC), -0.5f, 0.5f, 12));
  ModelBuilder::attr_i(mb.node("Gemm", {"gap", "fw"}, {"y"}, "fc"), "transB", 1);
  const std::vector<float> x = random_floats(static_cast<size_t>(kRows * 48), -1, 1, 13);
  const nn::QCnn q = compile_quantized_cnn(graph_of(mb), x, kRows);
  // conv0, chunk1, chunk2, conv1, cat, shuffle, the global pool; then the head.
  EXPECT_EQ(q.convs.size(), 7U);
  const Bf16Cnn b = compile_bf16_cnn(graph_of(mb));
  EXPECT_EQ(b.convs.size(), 7U);
}

}  // namespace
}  // namespace tpuw::compiler
