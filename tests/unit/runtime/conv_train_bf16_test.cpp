// The backward pass of bf16 convolutions and pools (runtime/conv_train_bf16.h) on the ref backend:
// dX (a transposed convolution on the device) and dW/db (one GEMM with the im2col transposed on the
// device) equal their CPU contracts bit for bit, for strides, dilations, asymmetric pads, several
// channel blocks and N = 4 and 16; they agree with PyTorch's gradients (stored by
// scripts/gen_conv_grads.py) within bf16 tolerance, as do the average- and max-pool backward; the
// double-precision reference of the test agrees with finite differences.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv_train_bf16.h"
#include "tpuw/runtime/npy.h"
#include "conv_train_fixtures.h"

namespace tpuw::runtime {
namespace {

using Kind = Bf16ConvLayer::Kind;
using conv_fixtures::conv_layer;
using conv_fixtures::expect_bits;
using conv_fixtures::geom;
using conv_fixtures::normal;
using conv_fixtures::pool_layer;

// The forward max pool (the trainer's activations: exact maxima of the bf16 inputs).
std::vector<float> max_pool_forward(const Bf16ConvLayer& l, std::span<const float> x, uint64_t batch) {
  std::vector<float> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16::round(x[i]);
  return conv2d_bf16_host(l, xb, batch, 16);
}

// The float convolution's gradients in double: dx, dw, db of sum(y * dy).
struct Grads {
  std::vector<double> dx, dw, db;
};

Grads conv_grads_double(const Bf16ConvLayer& l, std::span<const float> x, std::span<const float> dy, uint64_t B) {
  const ConvGeometry& g = l.geom;
  const uint64_t C = g.in_c, H = g.in_h, W = g.in_w, O = g.out_c, ho = g.out_h(), wo = g.out_w();
  const uint64_t KH = g.kernel_h, KW = g.kernel_w;
  Grads r;
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(l.w.size(), 0.0);
  r.db.assign(O, 0.0);
  for (uint64_t b = 0; b < B; ++b) {
    for (uint64_t o = 0; o < O; ++o) {
      for (uint64_t oy = 0; oy < ho; ++oy) {
        for (uint64_t ox = 0; ox < wo; ++ox) {
          const double d = dy[((b * O + o) * ho + oy) * wo + ox];
          r.db[o] += d;
          for (uint64_t c = 0; c < C; ++c) {
            for (uint64_t ky = 0; ky < KH; ++ky) {
              const int64_t iy = static_cast<int64_t>(oy * g.stride_h + ky * g.dilation_h) - g.pad_top;
              if (iy < 0 || iy >= static_cast<int64_t>(H)) continue;
              for (uint64_t kx = 0; kx < KW; ++kx) {
                const int64_t ix = static_cast<int64_t>(ox * g.stride_w + kx * g.dilation_w) - g.pad_left;
                if (ix < 0 || ix >= static_cast<int64_t>(W)) continue;
                const uint64_t xi = ((b * C + c) * H + static_cast<uint64_t>(iy)) * W + static_cast<uint64_t>(ix);
                const uint64_t wi = ((o * C + c) * KH + ky) * KW + kx;
                r.dx[xi] += d * l.w[wi];
                r.dw[wi] += d * x[xi];
              }
            }
          }
        }
      }
    }
  }
  return r;
}

// Within `tol` of the largest |expected| (bf16 keeps 8 bits).
template <typename T>
void expect_close(std::span<const float> got, std::span<const T> want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(want[i]) - got[i]));
  }
  EXPECT_GT(max_abs, 0.0) << what;
  EXPECT_LE(max_err, tol * max_abs) << what << ": largest error " << max_err << " of " << max_abs;
}

using Case = conv_fixtures::GeomCase;

TEST(ConvTrainBf16, ConvGradientsMatchTheContractAndDouble) {
  std::vector<Case> cases = {
      {"3x3 s1 p1, two channel blocks", 16, geom(20, 7, 6, 18, 3, 1, 1, 1), 3},
      {"3x3 s2, asymmetric pads", 16, geom(8, 10, 11, 16, 3, 2, 1, 1), 2},
      {"3x3 d2 p2", 4, geom(5, 9, 8, 6, 3, 1, 2, 2), 2},
      {"5x5 s2 p2, N=4 weights streamed", 4, geom(12, 12, 12, 10, 5, 2, 1, 2), 2},
      {"1x1 s1 p0", 16, geom(17, 5, 5, 9, 1, 1, 1, 0), 4},
      {"2x2 s3 (pixels no tap reaches)", 4, geom(3, 10, 10, 5, 2, 3, 1, 0), 2},
      // dX by stride phases with a dilated kernel: 3x3 d2 s2 (one tap row per phase or none),
      // 4x4 d3 s2 (every other tap); and 3x3 s2 p2, where a phase would start inside dy (zeros
      // inserted instead).
      {"3x3 s2 d2 p2 (phases)", 4, geom(6, 11, 9, 5, 3, 2, 2, 2), 2},
      {"4x4 s2 d3 p1 (phases)", 16, geom(7, 15, 14, 9, 4, 2, 3, 1), 2},
      {"3x3 s2 p2 (zeros inserted)", 4, geom(4, 9, 9, 6, 3, 2, 1, 2), 2},
  };
  cases[1].g.pad_bottom = 0;
  cases[1].g.pad_right = 2;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(seed++);
    const Bf16ConvLayer l = conv_layer(c.g, rng);
    const std::vector<float> x = normal(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng, 1.0f);
    const std::vector<float> dy = normal(c.batch * c.g.out_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    const ConvInputGradResult dx = conv_input_grad_bf16(dev, l, dy, c.batch);
    expect_bits(dx.dx, conv_input_grad_bf16_host(l, dy, c.batch, c.array_n), "dx");
    EXPECT_GT(dx.run.cycles, 0u);
    const ConvParamGradResult pg = conv_param_grads_bf16(dev, l, x, dy, c.batch);
    const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, c.batch, c.array_n);
    expect_bits(pg.dw, want.dw, "dw");
    expect_bits(pg.db, want.db, "db");
    const Grads f = conv_grads_double(l, x, dy, c.batch);
    expect_close<double>(dx.dx, f.dx, 0.02, "dx vs double");
    expect_close<double>(pg.dw, f.dw, 0.02, "dw vs double");
    expect_close<double>(pg.db, f.db, 0.02, "db vs double");
  }
}

// The double reference above is the gradient of sum(y * dy): central differences of that loss.
TEST(ConvTrainBf16, DoubleReferenceAgreesWithFiniteDifferences) {
  std::mt19937 rng(9);
  ConvGeometry g = geom(2, 5, 6, 3, 3, 2, 1, 1);
  g.pad_bottom = 0;
  const Bf16ConvLayer l = conv_layer(g, rng);
  const uint64_t B = 2;
  const std::vector<float> x = normal(B * g.in_c * g.in_h * g.in_w, rng, 1.0f);
  const std::vector<float> dy = normal(B * g.out_c * g.out_h() * g.out_w(), rng, 1.0f);
  const Grads an = conv_grads_double(l, x, dy, B);
  // The loss is linear in x (and in w): L(x + h e_i) - L(x - h e_i) = 2h dL/dx_i, and L itself is
  // sum(dy * y) with y computed in double; dL/dx_i through the double reference with x perturbed.
  auto loss = [&](std::span<const float> xs, std::span<const float> ws) {
    Bf16ConvLayer p = l;
    p.w.assign(ws.begin(), ws.end());
    const Grads gw = conv_grads_double(p, xs, dy, B);  // dw = sum dy * x: L = sum_w w * dw + b * db
    double s = 0;
    for (size_t i = 0; i < ws.size(); ++i) s += ws[i] * gw.dw[i];
    for (size_t o = 0; o < p.bias.size(); ++o) s += p.bias[o] * gw.db[o];
    return s;
  };
  const float h = 0.25f;
  for (size_t i = 0; i < x.size(); i += 7) {
    std::vector<float> xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const double fd = (loss(xp, l.w) - loss(xm, l.w)) / (2.0 * h);
    EXPECT_NEAR(fd, an.dx[i], 1e-4 * (1.0 + std::fabs(fd))) << "x[" << i << "]";
  }
  for (size_t i = 0; i < l.w.size(); i += 5) {
    std::vector<float> wp = l.w, wm = l.w;
    wp[i] += h;
    wm[i] -= h;
    const double fd = (loss(x, wp) - loss(x, wm)) / (2.0 * h);
    EXPECT_NEAR(fd, an.dw[i], 1e-4 * (1.0 + std::fabs(fd))) << "w[" << i << "]";
  }
}

std::vector<float> load(const std::string& c, const char* name) {
  const npy::Array a = npy::load(std::string(TPUW_CONV_GRADS_DIR) + "/" + c + "_" + name + ".npy");
  const std::span<const float> v = a.view<float>();
  return {v.begin(), v.end()};
}

TEST(ConvTrainBf16, ConvGradientsMatchPyTorch) {
  struct TorchCase {
    const char* name;
    uint64_t batch;
    ConvGeometry g;
  };
  const TorchCase cases[] = {
      {"conv_s1", 2, geom(5, 7, 6, 6, 3, 1, 1, 1)},
      {"conv_s2", 3, geom(20, 9, 8, 18, 3, 2, 1, 1)},
      {"conv_d2", 2, geom(4, 9, 9, 5, 3, 1, 2, 2)},
      {"conv_k5", 2, geom(3, 12, 12, 8, 5, 2, 1, 2)},
  };
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    Bf16ConvLayer l;
    l.name = c.name;
    l.geom = c.g;
    l.w = load(c.name, "w");
    l.bias = load(c.name, "b");
    const std::vector<float> x = load(c.name, "x"), dy = load(c.name, "dy");
    Device dev = Device::open("ref", BackendConfig{});
    const ConvInputGradResult dx = conv_input_grad_bf16(dev, l, dy, c.batch);
    const ConvParamGradResult pg = conv_param_grads_bf16(dev, l, x, dy, c.batch);
    const std::vector<float> tdx = load(c.name, "dx"), tdw = load(c.name, "dw"), tdb = load(c.name, "db");
    expect_close<float>(dx.dx, tdx, 0.02, "dx vs PyTorch");
    expect_close<float>(pg.dw, tdw, 0.02, "dw vs PyTorch");
    expect_close<float>(pg.db, tdb, 0.02, "db vs PyTorch");
  }
}

TEST(ConvTrainBf16, PoolGradientsMatchPyTorch) {
  struct TorchCase {
    const char* name;
    Kind kind;
    uint64_t batch;
    ConvGeometry g;
  };
  const TorchCase cases[] = {
      {"avg_3s2", Kind::kAvgPool, 2, geom(6, 9, 9, 6, 3, 2, 1, 1)},
      {"max_2s2", Kind::kMaxPool, 2, geom(6, 8, 8, 6, 2, 2, 1, 0)},
      {"max_3s2", Kind::kMaxPool, 2, geom(5, 9, 9, 5, 3, 2, 1, 1)},
  };
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Bf16ConvLayer l = pool_layer(c.g, c.kind);
    const std::vector<float> x = load(c.name, "x"), dy = load(c.name, "dy"), tdx = load(c.name, "dx");
    if (c.kind == Kind::kAvgPool) {
      Device dev = Device::open("ref", BackendConfig{});
      const ConvInputGradResult dx = conv_input_grad_bf16(dev, l, dy, c.batch);
      expect_bits(dx.dx, conv_input_grad_bf16_host(l, dy, c.batch, 16), "dx");
      // bf16(1/9) = 0.111328125 is 0.2% off 1/9: the gradient of the forward the device runs.
      expect_close<float>(dx.dx, tdx, 0.02, "dx vs PyTorch");
    } else {
      // Ties on the coarse grid go to the first position in the window, as in PyTorch: the routing
      // agrees element by element, up to the bf16 rounding of dy (and of sums of overlapping windows).
      Device dev = Device::open("ref", BackendConfig{});
      const std::vector<float> y = max_pool_forward(l, x, c.batch);
      const MaxPoolBackwardResult r = max_pool_backward_bf16(dev, l, x, y, dy, c.batch);
      const std::vector<float> dx = max_pool_backward_host(l, x, dy, c.batch);
      expect_bits(r.dx, dx, "dx");
      EXPECT_GT(r.cycles, 0u);
      EXPECT_EQ(r.macs > 0, c.g.stride_h < c.g.kernel_h) << "overlapping windows scatter by a convolution";
      ASSERT_EQ(dx.size(), tdx.size());
      for (size_t i = 0; i < dx.size(); ++i) {
        EXPECT_NEAR(dx[i], tdx[i], 0.01 * (1.0 + std::fabs(tdx[i]))) << "element " << i;
      }
    }
  }
}

TEST(ConvTrainBf16, MaxPoolRoutingRule) {
  // One 2x2 window of four equal values: the first position gets the gradient. One with a NaN: the
  // max is NaN, m - x is NaN for every tap, nothing is routed (docs/numerics.md).
  const Bf16ConvLayer l = pool_layer(geom(1, 2, 4, 1, 2, 2, 1, 0), Kind::kMaxPool);
  const float nan = std::nanf("");
  const std::vector<float> x = {1, 1, 3, nan, 1, 1, nan, 2};
  const std::vector<float> dy = {0.5f, -2.0f};
  const std::vector<float> dx = max_pool_backward_host(l, x, dy, 1);
  const std::vector<float> want = {0.5f, 0, 0, 0, 0, 0, 0, 0};
  expect_bits(dx, want, "dx");
}

TEST(ConvTrainBf16, MaxPoolRoutingEdgeCases) {
  // Lane by lane (m, dy, then the taps): ties at +0/-0, a difference that flushes to zero, an
  // infinite max, an infinite gradient, the -inf of a padding tap.
  const float inf = std::numeric_limits<float>::infinity();
  const float tiny = std::ldexp(1.0f, -126), tiny2 = std::ldexp(1.0078125f, -126);  // differ by 2^-133
  const std::vector<float> m = {0.0f, tiny2, inf, 2.0f, 1.0f};
  const std::vector<float> dy = {3.0f, 4.0f, 5.0f, inf, 6.0f};
  // taps [2][5]
  const std::vector<float> taps = {-0.0f, tiny, inf, 2.0f, -inf,  //
                                   0.0f, tiny2, 1.0f, 1.0f, 1.0f};
  const std::vector<float> g = max_pool_route_host(m, dy, taps);
  const float q = std::nanf("");
  const std::vector<float> want = {3.0f, 4.0f, 0.0f, inf, 0.0f,  //
                                   0.0f, 0.0f, 0.0f, q, 6.0f};
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(want[i])) << i << ": " << g[i];
    }
  }
  for (const unsigned an : {4u, 16u}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    expect_bits(max_pool_route_bf16(dev, m, dy, taps).g, g, "route");
  }
}

TEST(ConvTrainBf16, MaxPoolBackwardOnTheDeviceIsTheContract) {
  // Disjoint windows (a layout scatter) and overlapping ones (a one-hot transposed convolution),
  // padding, dilation, ties (values on a coarse grid), several ACC chunks; N = 4 and 16.
  const Case cases[] = {
      {"2x2 s2", 4, geom(3, 8, 8, 3, 2, 2, 1, 0), 3},
      {"2x2 s2 odd", 16, geom(5, 9, 7, 5, 2, 2, 1, 0), 2},
      {"3x3 s2 p1", 4, geom(3, 9, 9, 3, 3, 2, 1, 1), 2},
      {"3x3 s3 p1", 16, geom(2, 10, 10, 2, 3, 3, 1, 1), 2},
      {"2x2 s1 d2", 16, geom(2, 7, 7, 2, 2, 1, 2, 0), 2},
      {"2x2 s2 big", 16, geom(8, 28, 28, 8, 2, 2, 1, 0), 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::mt19937 rng(c.array_n + c.g.in_h);
    const Bf16ConvLayer l = pool_layer(c.g, Kind::kMaxPool);
    std::vector<float> x = normal(c.batch * c.g.in_c * c.g.in_h * c.g.in_w, rng, 1.0f);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;  // many ties
    const std::vector<float> dy = normal(c.batch * c.g.in_c * c.g.out_h() * c.g.out_w(), rng, 1.0f);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    const std::vector<float> y = max_pool_forward(l, x, c.batch);
    const MaxPoolBackwardResult r = max_pool_backward_bf16(dev, l, x, y, dy, c.batch);
    expect_bits(r.dx, max_pool_backward_bf16_host(l, x, y, dy, c.batch, c.array_n), "dx");
    EXPECT_EQ(max_pool_windows_disjoint(l), r.macs == 0);
    // Every gradient lands once (disjoint) or at least once: the sum is kept up to bf16 rounding.
    double sdy = 0, sdx = 0;
    for (const float v : dy) sdy += bf16::round(v);
    for (const float v : r.dx) sdx += v;
    EXPECT_NEAR(sdx, sdy, 0.01 * (1.0 + std::fabs(sdy)));
  }
}

TEST(ConvTrainBf16, ReluBackwardIsSelect) {
  const float nan = std::nanf("");
  const std::vector<float> y = {1.0f, 0.0f, -0.0f, -3.0f, nan, 1e-30f};
  const std::vector<float> dy = {2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f};
  const std::vector<float> want = {2.0f, 0.0f, 0.0f, 0.0f, 6.0f, 7.0f};
  expect_bits(relu_backward_host(y, dy), want, "relu");
  EXPECT_THROW((void)relu_backward_host(y, std::vector<float>(2)), Error);
}

TEST(ConvTrainBf16, ReluBackwardOnTheDeviceIsTheContract) {
  for (const unsigned an : {4u, 16u}) {
    SCOPED_TRACE(an);
    std::mt19937 rng(an);
    std::vector<float> y = normal(20011, rng, 1.0f), dy = normal(20011, rng, 1.0f);  // several ACC chunks
    y[0] = -0.0f, y[1] = std::nanf(""), y[2] = 1e-40f, y[3] = 0.0f;  // -0, NaN, a subnormal, +0
    dy[4] = 1e-40f, dy[5] = std::nanf(""), y[4] = y[5] = 1.0f;        // dy flushed / canonicalized
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    const ReluBackwardResult r = relu_backward_bf16(dev, y, dy);
    expect_bits(r.d, relu_backward_host(y, dy), "relu");
    EXPECT_GT(r.cycles, 0u);
    EXPECT_GE(r.perf.rd_bytes, 2 * 4 * ((y.size() + an - 1) / an) * an);  // y and dy, plus the program
  }
}

TEST(ConvTrainBf16, Errors) {
  std::mt19937 rng(3);
  ConvGeometry g = geom(2, 6, 6, 2, 3, 1, 1, 1);
  g.pad_top = 3;  // larger than the kernel extent 2
  const Bf16ConvLayer l = conv_layer(g, rng);
  try {
    (void)conv_input_grad_layer(l);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("'conv': padding top 3 is larger"), std::string::npos) << e.what();
  }
  const Bf16ConvLayer ok = conv_layer(geom(2, 6, 6, 2, 3, 1, 1, 1), rng);
  try {
    (void)conv_im2col(ok, std::vector<float>(5), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("the input has 5 values, expected 72"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)conv_input_grad_layer(pool_layer(geom(2, 4, 4, 2, 2, 2, 1, 0), Kind::kMaxPool)), Error);
}

}  // namespace
}  // namespace tpuw::runtime
