// Activation functions on the int8 MLP path (tpuw/compiler/activations.h, tpuw/nn/activation.h):
// each function after a Gemm is fused into its layer, its float reference is the function, the
// int8 network (a lookup table per layer) stays within int8 tolerance of it, and the device (ref,
// and rtl when built) computes exactly what the CPU integer model computes. Also PyTorch's Erf
// form of GELU, a function on the graph input, the refusals (a non-constant Clip bound) and bf16 (VECTOR ops).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler_testlib.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/device.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/quantize.h"
#include "tpuw/runtime/network.h"
#include "tpuw/runtime/network_bf16.h"

namespace tpuw::compiler {
namespace {

using testing::expect_error;
using testing::graph_of;
using testing::ModelBuilder;

constexpr uint32_t kIn = 8, kOut = 6;
constexpr uint64_t kRows = 64;

struct Fn {
  const char* op;
  nn::Activation want;
  void (*attrs)(onnx::NodeProto&);
};

void set_string(onnx::NodeProto& n, const std::string& key, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto_AttributeType_STRING);
  a->set_s(v);
}

std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// x [batch, 8] -> Gemm (W [8, 6], b [6]) -> the function (op, attributes, extra constant inputs).
ModelBuilder gemm_then(const std::string& op, std::mt19937& rng, void (*attrs)(onnx::NodeProto&),
                       const std::vector<std::pair<std::string, float>>& const_inputs = {}) {
  ModelBuilder mb;
  mb.input("x", {-1, kIn});
  mb.init("W", {kIn, kOut}, random_floats(size_t{kIn} * kOut, -1, 1, rng));
  mb.init("b", {kOut}, random_floats(kOut, -0.5f, 0.5f, rng));
  mb.node("Gemm", {"x", "W", "b"}, {"h"}, "fc");
  std::vector<std::string> ins = {"h"};
  for (const auto& [name, v] : const_inputs) {
    mb.init(name, {}, {v});
    ins.push_back(name);
  }
  auto& n = mb.node(op, ins, {"y"}, "act");
  if (attrs != nullptr) attrs(n);
  mb.output("y");
  return mb;
}

// The float network, its int8 quantization, and the device runs: ref always, rtl when built,
// both bit-identical to the CPU integer model. Returns the largest error of the int8 result
// relative to the float reference's largest magnitude.
double check_int8(const nn::FloatNetwork& net, const std::vector<float>& x, uint64_t rows) {
  const std::vector<float> yf = nn::forward_float(net, x, rows);
  const nn::QNetwork q = nn::quantize(net, x, rows);
  // A function on the last layer is its table: an identity layer with the int32 output follows.
  EXPECT_EQ(q.layers.size(), net.layers.size() + (net.layers.back().act.none() ? 0 : 1));
  EXPECT_EQ(q.layers[net.layers.size() - 1].lut.size(), net.layers.back().act.none() ? 0u : 256u);
  const std::vector<float> yq = nn::forward_int(q, x, rows);
  const std::vector<int8_t> xq = nn::quantize_input(q, x);
  const std::vector<int32_t> raw = nn::forward_int_raw(q, xq, rows);
  std::vector<std::string> backends = {"ref"};
  if (!backend_array_sizes("rtl").empty()) backends.emplace_back("rtl");
  for (const std::string& be : backends) {
    for (const unsigned an : {16u, 4u}) {
      BackendConfig cfg;
      cfg.array_n = an;
      Device dev = Device::open(be, cfg);
      const runtime::NetworkRunResult r = runtime::run_network(dev, q, xq, rows, {});
      EXPECT_EQ(r.output_i32, raw) << be << " N=" << an;
    }
  }
  double m = 0, err = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(yf[i])));
    err = std::max(err, std::fabs(static_cast<double>(yf[i]) - yq[i]));
  }
  return m > 0 ? err / m : err;
}

TEST(CompilerActivations, EachFunctionAfterGemmIsItsLayersTable) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Fn> fns = {
      {"Sigmoid", {nn::ActFn::kSigmoid, 0, 0, {}}, nullptr},
      {"Tanh", {nn::ActFn::kTanh, 0, 0, {}}, nullptr},
      {"LeakyRelu", {nn::ActFn::kLeakyRelu, 0.1, 0, {}}, [](onnx::NodeProto& n) { ModelBuilder::attr_f(n, "alpha", 0.1f); }},
      {"LeakyRelu", {nn::ActFn::kLeakyRelu, 0.01, 0, {}}, nullptr},
      {"HardSigmoid", {nn::ActFn::kHardSigmoid, 0.2, 0.5, {}}, nullptr},
      {"HardSwish", {nn::ActFn::kHardSwish, 0, 0, {}}, nullptr},
      {"Gelu", {nn::ActFn::kGelu, 0, 0, {}}, nullptr},
      {"Gelu", {nn::ActFn::kGeluTanh, 0, 0, {}}, [](onnx::NodeProto& n) { set_string(n, "approximate", "tanh"); }},
      {"Erf", {nn::ActFn::kErf, 0, 0, {}}, nullptr},
      {"Clip", {nn::ActFn::kClip, -0.5, 0.75, {}}, [](onnx::NodeProto& n) {  // opset 6: attributes
         ModelBuilder::attr_f(n, "min", -0.5f);
         ModelBuilder::attr_f(n, "max", 0.75f);
       }},
      {"Clip", {nn::ActFn::kClip, -inf, inf, {}}, nullptr},
  };
  std::mt19937 rng(5);
  for (const Fn& f : fns) {
    SCOPED_TRACE(nn::act_name(f.want));
    const ModelBuilder mb = gemm_then(f.op, rng, f.attrs);
    const nn::FloatNetwork net = compile_float(graph_of(mb));
    ASSERT_EQ(net.layers.size(), 1u);  // the Gemm with the function (int8 adds the int32 output layer)
    EXPECT_EQ(net.layers[0].act.fn, f.want.fn);
    if (std::isinf(f.want.alpha)) {
      EXPECT_EQ(net.layers[0].act.alpha, f.want.alpha);  // Clip without bounds: -inf, +inf
      EXPECT_EQ(net.layers[0].act.beta, f.want.beta);
    } else {
      EXPECT_NEAR(net.layers[0].act.alpha, f.want.alpha, 1e-6);
    }
    const std::vector<float> x = random_floats(kRows * kIn, -2, 2, rng);
    // The float reference is f(x W + b).
    const std::vector<float> yf = nn::forward_float(net, x, kRows);
    for (uint64_t r = 0; r < 3; ++r) {
      for (uint32_t j = 0; j < kOut; ++j) {
        double h = net.layers[0].b[j];
        for (uint32_t k = 0; k < kIn; ++k) h += double{x[r * kIn + k]} * net.layers[0].w[size_t{k} * kOut + j];
        EXPECT_NEAR(yf[r * kOut + j], nn::act_apply(f.want, h), 1e-5);
      }
    }
    // int8 tolerance (the conformance suite's 6% of max |y|): the table's input step alone costs up
    // to s_in * max|f'| / 2 (docs/numerics.md), about 3.5% of max |y| for Tanh and Erf here (|h| up
    // to ~8 over outputs up to 1), and Clip(-0.5, 0.75) sees the pre-activation's own int8 error
    // against a narrow output range.
    const double rel = check_int8(net, x, kRows);
    EXPECT_LT(rel, 0.06) << "int8 vs float";
  }
}

TEST(CompilerActivations, ClipBoundsAsConstantInputsAndRelu6) {
  std::mt19937 rng(6);
  const ModelBuilder mb = gemm_then("Clip", rng, nullptr, {{"lo", 0.0f}, {"hi", 6.0f}});
  const nn::FloatNetwork net = compile_float(graph_of(mb));
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_EQ(net.layers[0].act.fn, nn::ActFn::kClip);
  EXPECT_EQ(net.layers[0].act.alpha, 0.0);
  EXPECT_EQ(net.layers[0].act.beta, 6.0);
  const std::vector<float> x = random_floats(kRows * kIn, -4, 4, rng);
  EXPECT_LT(check_int8(net, x, kRows), 0.03);
}

// x * 0.5 * (1 + erf(x / sqrt 2)) as torch.onnx exports nn.GELU (opset < 20), and with the 0.5
// taken first: one Gelu, fused into the Gemm.
TEST(CompilerActivations, PytorchErfFormOfGeluIsOneFunction) {
  for (const bool half_first : {false, true}) {
    std::mt19937 rng(7);
    ModelBuilder mb;
    mb.input("x", {-1, kIn});
    mb.init("W", {kIn, kOut}, random_floats(size_t{kIn} * kOut, -1, 1, rng));
    mb.init("sqrt2", {}, {1.4142135f}).init("one", {}, {1.0f}).init("half", {}, {0.5f});
    mb.node("MatMul", {"x", "W"}, {"h"}, "mm");
    mb.node("Div", {"h", "sqrt2"}, {"d"}, "div");
    mb.node("Erf", {"d"}, {"e"}, "erf");
    mb.node("Add", {"e", "one"}, {"a"}, "add");
    if (half_first) {
      mb.node("Mul", {"h", "half"}, {"hh"}, "mul_half");
      mb.node("Mul", {"hh", "a"}, {"y"}, "mul");
    } else {
      mb.node("Mul", {"h", "a"}, {"m"}, "mul");
      mb.node("Mul", {"m", "half"}, {"y"}, "mul_half");
    }
    mb.output("y");
    const nn::FloatNetwork net = compile_float(graph_of(mb));
    ASSERT_EQ(net.layers.size(), 1u) << half_first;
    EXPECT_EQ(net.layers[0].act.fn, nn::ActFn::kGelu);
    EXPECT_NE(net.layers[0].name.find("(Gelu)"), std::string::npos) << net.layers[0].name;
    const std::vector<float> x = random_floats(kRows * kIn, -2, 2, rng);
    EXPECT_LT(check_int8(net, x, kRows), 0.03);
  }
}

// A function with no Gemm before it (the ONNX node tests): an identity layer with the function
// (in int8 then the int32 output layer).
TEST(CompilerActivations, FunctionOnTheGraphInput) {
  ModelBuilder mb;
  mb.input("x", {-1, 3, 4});
  mb.node("Tanh", {"x"}, {"y"}, "t");
  mb.output("y");
  const nn::FloatNetwork net = compile_float(graph_of(mb));
  ASSERT_EQ(net.layers.size(), 1u);
  EXPECT_EQ(net.layers[0].act.fn, nn::ActFn::kTanh);
  std::mt19937 rng(8);
  const std::vector<float> x = random_floats(kRows * 12, -3, 3, rng);
  const std::vector<float> yf = nn::forward_float(net, x, kRows);
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(yf[i], std::tanh(x[i]), 1e-6);
  EXPECT_LT(check_int8(net, x, kRows), 0.03);
}

TEST(CompilerActivations, TableContract) {
  // table[q + 128] = sat8(round(f(q * s_in) / s_out)), round half away from zero.
  const nn::Activation sig{nn::ActFn::kSigmoid, 0, 0, {}};
  const std::vector<int8_t> t = nn::act_table(sig, 8.0 / 127, 1.0 / 127);
  ASSERT_EQ(t.size(), 256u);
  EXPECT_EQ(t[128], 64);   // sigmoid(0) * 127 = 63.5 -> 64
  EXPECT_EQ(t[255], 127);  // sigmoid(8) = 0.99966 -> 127
  EXPECT_EQ(t[0], 0);
  const nn::Activation clip{nn::ActFn::kClip, -1, 1, {}};
  const std::vector<int8_t> c = nn::act_table(clip, 4.0 / 127, 1.0 / 127);
  EXPECT_EQ(c[0], -127);
  EXPECT_EQ(c[128 + 16], 64);  // 16 * 4/127 = 0.504 -> 64
  const nn::Activation lr{nn::ActFn::kLeakyRelu, 0.5, 0, {}};
  const std::vector<int8_t> l = nn::act_table(lr, 1.0, 1.0);
  EXPECT_EQ(l[0], -64);  // -128 * 0.5
  EXPECT_EQ(l[255], 127);
}

TEST(CompilerActivations, RefusalsNameTheNode) {
  // Clip with a bound computed from the input.
  ModelBuilder m1;
  m1.input("x", {-1, 4});
  m1.node("Clip", {"x", "x"}, {"y"}, "clip");
  m1.output("y");
  expect_error([&] { compile_float(graph_of(m1)); }, ErrorKind::kUnsupported,
               {"node 'clip' (Clip)", "input 1 (min) 'x' must be a one-element constant"});
  // Gelu with an approximation ONNX does not define.
  std::mt19937 rng(9);
  const ModelBuilder m2 = gemm_then("Gelu", rng, [](onnx::NodeProto& n) { set_string(n, "approximate", "erf?"); });
  expect_error([&] { compile_float(graph_of(m2)); }, ErrorKind::kUnsupported, {"node 'act' (Gelu)", "approximate='erf?'"});
}

TEST(CompilerActivations, Bf16RunsTheFunctionOnTheVectorUnit) {
  // bf16 has no tables: the function runs as VECTOR ops (tpuw/runtime/vector_functions.h), the
  // device bit for bit its contract.
  std::mt19937 rng(9);
  const ModelBuilder m3 = gemm_then("Sigmoid", rng, nullptr);
  const nn::FloatNetwork net = compile_float(graph_of(m3));
  ASSERT_EQ(net.layers.size(), 1u);  // no int32 output layer: the VECTOR unit runs on the fp32 result
  Device dev = Device::open("ref", BackendConfig{});
  std::vector<float> x(3 * kIn);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  const runtime::Bf16NetworkRunResult r = runtime::run_network_bf16(dev, net, x, 3);
  const std::vector<float> golden = runtime::forward_bf16_host(net, x, 3, dev.info().params.array_n);
  ASSERT_EQ(r.output.size(), golden.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_EQ(r.output[i], golden[i]) << i;
    EXPECT_GT(r.output[i], 0.0f);
    EXPECT_LT(r.output[i], 1.0f);
  }
}

}  // namespace
}  // namespace tpuw::compiler
