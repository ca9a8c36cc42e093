// bf16 activation functions as VECTOR op sequences (tpuw/runtime/vector_functions.h): each
// function against the exact one within its stated error (the contract on the CPU), and on the ref
// device inside a bf16 network, bit for bit the contract (forward_bf16_host) and within bf16's
// tolerance of a double-precision forward pass with the exact function.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/network_bf16.h"
#include "tpuw/runtime/vector_functions.h"

namespace tpuw::runtime {
namespace {

using nn::ActFn;

nn::Activation act(ActFn fn, double alpha = 0, double beta = 0) {
  nn::Activation a;
  a.fn = fn;
  a.alpha = alpha;
  a.beta = beta;
  a.node = "act";
  return a;
}

// Every function the bf16 path runs (ONNX defaults where the operator has attributes).
std::vector<nn::Activation> all_functions() {
  const double inf = std::numeric_limits<double>::infinity();
  return {act(ActFn::kClip, 0, 6),          act(ActFn::kClip, -1.5, inf), act(ActFn::kClip, -inf, 0.25),
          act(ActFn::kLeakyRelu, 0.01),     act(ActFn::kLeakyRelu, 1.5),  act(ActFn::kLeakyRelu, -0.5),
          act(ActFn::kHardSigmoid, 0.2, 0.5), act(ActFn::kHardSigmoid, -0.3, 0.1), act(ActFn::kHardSwish),
          act(ActFn::kSigmoid),             act(ActFn::kTanh),            act(ActFn::kErf),
          act(ActFn::kGelu),                act(ActFn::kGeluTanh)};
}

bool relative_bound(ActFn fn) { return fn == ActFn::kGelu || fn == ActFn::kGeluTanh; }

TEST(VectorFunctions, WithinTheStatedErrorOfTheExactFunction) {
  for (const nn::Activation& a : all_functions()) {
    SCOPED_TRACE(nn::act_name(a));
    const VecFunction f = vec_function(a, false);
    EXPECT_FALSE(f.empty());
    const double bound = vec_function_error_bound(a);
    double worst = 0;
    for (int i = -200000; i <= 200000; ++i) {
      const float x = static_cast<float>(i) * 1e-4f * 1.2f;  // [-24, 24]
      const double exact = nn::act_apply(a, double{x});
      const double got = vec_function_apply(f, x);
      double err = std::fabs(got - exact);
      if (relative_bound(a.fn)) err /= std::max(1.0, std::fabs(double{x}));
      else if (bound < 1e-6) err /= std::max(1.0, std::fabs(exact));  // piecewise-linear: one rounding
      worst = std::max(worst, err);
    }
    EXPECT_LE(worst, bound);
    // Non-finite inputs: NaN stays NaN (canonical); the saturating functions saturate.
    EXPECT_EQ(vec_function_lane(f, num::kF32Nan), num::kF32Nan);
    const float pinf = std::numeric_limits<float>::infinity();
    const double exact_inf = nn::act_apply(a, double{pinf});
    const float got_inf = vec_function_apply(f, pinf);
    if (std::isinf(exact_inf)) {
      EXPECT_EQ(got_inf, static_cast<float>(exact_inf));
    } else {
      EXPECT_NEAR(got_inf, exact_inf, bound * (relative_bound(a.fn) ? 1.0 : std::max(1.0, std::fabs(exact_inf))));
    }
  }
}

TEST(VectorFunctions, PiecewiseLinearOnesAreExact) {
  // Clip, LeakyRelu with 0 <= alpha <= 1 and HardSigmoid compute exactly what their float
  // definitions compute in fp32 (the same roundings): bit for bit on a grid of fp32 values.
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 4.0f);
  for (const nn::Activation& a : {act(ActFn::kClip, 0, 6), act(ActFn::kLeakyRelu, 0.01), act(ActFn::kLeakyRelu, -0.5),
                                  act(ActFn::kHardSigmoid, 0.2, 0.5)}) {
    SCOPED_TRACE(nn::act_name(a));
    const VecFunction f = vec_function(a, false);
    const float al = static_cast<float>(a.alpha), be = static_cast<float>(a.beta);
    for (int i = 0; i < 20000; ++i) {
      const float x = g(rng);
      float want = 0;
      switch (a.fn) {
        case ActFn::kClip: want = std::min(std::max(x, al), be); break;
        case ActFn::kLeakyRelu: want = x > 0 ? x : al * x; break;
        default: want = std::max(0.0f, std::min(1.0f, al * x + be)); break;
      }
      ASSERT_EQ(vec_function_apply(f, x), want) << "x = " << x;
    }
  }
}

TEST(VectorFunctions, ReluFirstThenTheFunction) {
  const VecFunction f = vec_function(act(ActFn::kTanh), true);
  EXPECT_EQ(f.name, "Relu + Tanh");
  EXPECT_EQ(vec_function_apply(f, -3.0f), 0.0f);
  EXPECT_NEAR(vec_function_apply(f, 0.5f), std::tanh(0.5), 2e-5);
  EXPECT_TRUE(vec_function(nn::Activation{}, false).empty());
}

// A bf16 network whose layers carry the functions; the device against the contract (bits) and
// against a double forward pass with the exact functions.
nn::FloatNetwork net_with(const std::vector<std::pair<nn::Activation, bool>>& acts, uint32_t width, std::mt19937& rng) {
  nn::FloatNetwork net;
  net.source = "random";
  net.input_features = width;
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < acts.size(); ++i) {
    nn::DenseLayer l;
    l.name = "fc" + std::to_string(i);
    l.k = width;
    l.n = width;
    const float scale = 1.5f / std::sqrt(static_cast<float>(l.k));  // pre-activations of a few units
    for (uint64_t j = 0; j < uint64_t{l.k} * l.n; ++j) l.w.push_back(g(rng) * scale);
    for (uint32_t j = 0; j < l.n; ++j) l.b.push_back(0.5f * g(rng));
    l.act = acts[i].first;
    l.relu = acts[i].second;
    net.layers.push_back(std::move(l));
  }
  return net;
}

std::vector<double> forward_double(const nn::FloatNetwork& net, const std::vector<float>& x, uint64_t batch) {
  std::vector<double> a(x.begin(), x.end());
  for (const nn::DenseLayer& l : net.layers) {
    std::vector<double> y(batch * l.n);
    for (uint64_t r = 0; r < batch; ++r) {
      for (uint32_t j = 0; j < l.n; ++j) {
        double s = l.b[j];
        for (uint32_t k = 0; k < l.k; ++k) s += a[r * l.k + k] * double{l.w[uint64_t{k} * l.n + j]};
        if (l.relu) s = std::max(s, 0.0);
        y[r * l.n + j] = l.act.none() ? s : nn::act_apply(l.act, s);
      }
    }
    a = std::move(y);
  }
  return a;
}

TEST(VectorFunctions, NetworkOnRefEqualsContractAndFloat) {
  std::mt19937 rng(21);
  for (unsigned an : {16u, 4u}) {
    for (const nn::Activation& a : all_functions()) {
      SCOPED_TRACE(testing::Message() << nn::act_name(a) << " N=" << an);
      // The function after a hidden layer (bf16 output), after a ReLU, and on the last layer (fp32).
      const nn::FloatNetwork net = net_with({{a, false}, {a, true}, {nn::Activation{}, true}, {a, false}}, 24, rng);
      const uint64_t batch = 37;
      std::vector<float> x(batch * 24);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& v : x) v = g(rng);
      BackendConfig bc;
      bc.array_n = an;
      Device dev = Device::open("ref", bc);
      const Bf16NetworkRunResult r = run_network_bf16(dev, net, x, batch);
      const std::vector<float> golden = forward_bf16_host(net, x, batch, an);
      ASSERT_EQ(golden.size(), r.output.size());
      for (size_t j = 0; j < golden.size(); ++j) {
        ASSERT_EQ(std::memcmp(&golden[j], &r.output[j], 4), 0) << j << ": " << r.output[j] << " vs " << golden[j];
      }
      const std::vector<double> ref = forward_double(net, x, batch);
      // The bf16 network tolerance of NetworkBf16 (four layers of bf16 roundings; the functions'
      // own errors are far below it): every element within 2^-4 of the largest magnitude, the
      // relative L2 error at most 2^-5.
      double maxabs = 0, maxerr = 0, num = 0, den = 0;
      for (size_t j = 0; j < ref.size(); ++j) {
        const double d = double{r.output[j]} - ref[j];
        maxabs = std::max(maxabs, std::fabs(ref[j]));
        maxerr = std::max(maxerr, std::fabs(d));
        num += d * d;
        den += ref[j] * ref[j];
      }
      EXPECT_LE(maxerr, maxabs / 16) << "max error " << maxerr << " of " << maxabs;
      EXPECT_LE(std::sqrt(num / den), 1.0 / 32);
      // The VECTOR work is counted per layer: layers 0, 1 and 3 have a function, layer 2 none.
      ASSERT_EQ(r.layers.size(), 4u);
      EXPECT_GT(r.layers[0].program.vectors, 0u);
      const uint64_t mp = (batch + an - 1) / an * an, n_blocks = (24 + an - 1) / an;
      EXPECT_EQ(r.layers[0].program.vector_rows, vec_function(a, false).steps.size() * n_blocks * mp);
      EXPECT_EQ(r.layers[1].program.vector_rows, vec_function(a, true).steps.size() * n_blocks * mp);
      EXPECT_EQ(r.layers[2].program.vectors, 0u);
      EXPECT_GT(r.layers[3].program.vectors, 0u);
    }
  }
}

TEST(VectorFunctions, ElementwiseProgramEqualsContract) {
  // run_vec_function_bf16 (the pass after a convolution): bf16(f(x)) bit for bit, NaN and the
  // infinities included, over more values than one chunk of ACC rows holds.
  std::mt19937 rng(8);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> x(20000);
  for (float& v : x) v = num::bf16_to_float(num::bf16_from_float(g(rng)));
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = -std::numeric_limits<float>::infinity();
  x[3] = -0.0f;
  for (unsigned an : {16u, 4u}) {
    BackendConfig bc;
    bc.array_n = an;
    Device dev = Device::open("ref", bc);
    for (const nn::Activation& a : {act(ActFn::kSigmoid), act(ActFn::kGelu), act(ActFn::kLeakyRelu, 0.1)}) {
      SCOPED_TRACE(testing::Message() << nn::act_name(a) << " N=" << an);
      const VecFunction f = vec_function(a, false);
      const VecPassResult r = run_vec_function_bf16(dev, f, x);
      const std::vector<float> want = vec_function_host(f, x);
      ASSERT_EQ(r.y.size(), x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(num::to_bits(r.y[i]), num::to_bits(want[i])) << i << ": x = " << x[i];
      }
      const uint64_t rows = (x.size() + an - 1) / an;
      EXPECT_EQ(r.vector_cycles - 4 * r.vectors, f.steps.size() * rows);
      EXPECT_EQ(r.perf.wr_bytes, 2 * rows * an + 4);  // the bf16 values and the fence
    }
  }
}

}  // namespace
}  // namespace tpuw::runtime
