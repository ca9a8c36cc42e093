// The backward pass of a bf16 convolution on the verilated device (runtime/conv_train_bf16.h):
// dX (transposed convolution), dW/db (the im2col GEMM with TRANSPOSE) and the ReLU mask (VECTOR
// SELECT) and the max-pool backward (VECTOR routing, layout or one-hot convolution scatter)
// rtl == ref == the CPU contract bit for bit, with the same bytes moved and MXU rows; and a whole
// CnnTrainer step (the max-pool forward program, the dW im2col as one-hot convolutions read in
// place by the GEMM) rtl == ref == the contract.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include <filesystem>
#include <string>

#include "tpuw/compiler/cnn_training.h"
#include "tpuw/compiler/onnx_importer.h"
#include "tpuw/device.h"
#include "tpuw/runtime/cnn_trainer.h"
#include "tpuw/runtime/conv_train_bf16.h"
#include "tpuw/runtime/npy.h"
#include "train_programs.h"

namespace tpuw::runtime {
namespace {

std::vector<uint32_t> bits(std::span<const float> v) {
  std::vector<uint32_t> b;
  for (const float f : v) b.push_back(std::bit_cast<uint32_t>(f));
  return b;
}

std::vector<float> normal(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(ConvTrainBf16Rtl, GradientsMatchRefAndTheContract) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  ConvGeometry g;  // 3x3, stride 2, asymmetric pads, two channel blocks in and out
  g.in_c = 20, g.in_h = 7, g.in_w = 8, g.out_c = 18, g.kernel_h = g.kernel_w = 3;
  g.stride_h = g.stride_w = 2;
  g.pad_top = g.pad_left = 1, g.pad_bottom = 0, g.pad_right = 1;
  const uint64_t batch = 2;
  std::mt19937 rng(5);
  Bf16ConvLayer l;
  l.name = "conv";
  l.geom = g;
  l.w = normal(uint64_t{g.out_c} * g.in_c * 9, rng);
  l.bias.assign(g.out_c, 0.0f);
  const std::vector<float> x = normal(batch * g.in_c * g.in_h * g.in_w, rng);
  const std::vector<float> dy = normal(batch * g.out_c * g.out_h() * g.out_w(), rng);
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const ConvInputGradResult a = conv_input_grad_bf16(rtl, l, dy, batch);
  const ConvInputGradResult b = conv_input_grad_bf16(ref, l, dy, batch);
  EXPECT_EQ(bits(a.dx), bits(conv_input_grad_bf16_host(l, dy, batch, 16)));
  EXPECT_EQ(bits(a.dx), bits(b.dx));
  EXPECT_EQ(a.run.perf.rd_bytes, b.run.perf.rd_bytes);
  EXPECT_EQ(a.run.perf.mxu_active, b.run.perf.mxu_active);
  const ConvParamGradResult pa = conv_param_grads_bf16(rtl, l, x, dy, batch);
  const ConvParamGradResult pb = conv_param_grads_bf16(ref, l, x, dy, batch);
  const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, batch, 16);
  EXPECT_EQ(bits(pa.dw), bits(want.dw));
  EXPECT_EQ(bits(pa.db), bits(want.db));
  EXPECT_EQ(bits(pa.dw), bits(pb.dw));
  EXPECT_EQ(pa.gemm.perf.rd_bytes, pb.gemm.perf.rd_bytes);
}

TEST(ConvTrainBf16Rtl, ReluBackwardMatchesRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  std::mt19937 rng(7);
  std::vector<float> y = normal(1500, rng), dy = normal(1500, rng);
  y[0] = -0.0f, y[1] = std::nanf(""), dy[2] = 1e-40f, y[2] = 1.0f;
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const ReluBackwardResult a = relu_backward_bf16(rtl, y, dy);
  const ReluBackwardResult b = relu_backward_bf16(ref, y, dy);
  EXPECT_EQ(bits(a.d), bits(relu_backward_host(y, dy)));
  EXPECT_EQ(bits(a.d), bits(b.d));
  EXPECT_EQ(a.perf.rd_bytes, b.perf.rd_bytes);
  EXPECT_EQ(a.perf.wr_bytes, b.perf.wr_bytes);
}

TEST(ConvTrainBf16Rtl, MaxPoolBackwardMatchesRef) {
  // The routing chain (SUB, SELECT, SUB, SUB per tap) on disjoint 2x2 windows and on overlapping
  // 3x3 stride 2 pad 1 windows (scattered by the one-hot transposed convolution); ties included.
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  for (const uint32_t k : {2u, 3u}) {
    SCOPED_TRACE(k);
    ConvGeometry g;
    g.in_c = g.out_c = 3, g.in_h = 9, g.in_w = 8, g.kernel_h = g.kernel_w = k;
    g.stride_h = g.stride_w = 2;
    g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = k == 3 ? 1 : 0;
    Bf16ConvLayer l;
    l.name = "pool";
    l.kind = Bf16ConvLayer::Kind::kMaxPool;
    l.geom = g;
    const uint64_t batch = 2;
    std::mt19937 rng(k);
    std::vector<float> x = normal(batch * g.in_c * g.in_h * g.in_w, rng);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
    const std::vector<float> dy = normal(batch * g.out_c * g.out_h() * g.out_w(), rng);
    const std::vector<float> y = conv2d_bf16_host(l, x, batch, 16);
    Device rtl = Device::open("rtl", BackendConfig{});
    Device ref = Device::open("ref", BackendConfig{});
    const MaxPoolBackwardResult a = max_pool_backward_bf16(rtl, l, x, y, dy, batch);
    const MaxPoolBackwardResult b = max_pool_backward_bf16(ref, l, x, y, dy, batch);
    EXPECT_EQ(bits(a.dx), bits(max_pool_backward_bf16_host(l, x, y, dy, batch, 16)));
    EXPECT_EQ(bits(a.dx), bits(b.dx));
    EXPECT_EQ(a.macs, b.macs);
  }
}

TEST(ConvTrainBf16Rtl, ResidualAddMatchesRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  std::mt19937 rng(11);
  const std::vector<float> a = normal(700, rng), b = normal(700, rng);
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  for (const bool relu : {true, false}) {
    const ReluBackwardResult x = add_bf16(rtl, a, b, relu), y = add_bf16(ref, a, b, relu);
    EXPECT_EQ(bits(x.d), bits(add_bf16_host(a, b, relu)));
    EXPECT_EQ(bits(x.d), bits(y.d));
  }
}

TEST(ConvTrainBf16Rtl, TrainerProgramsMatchRefAndTheContract) {
  // The CNN trainer's own programs (train_programs.h): the direct dW program (weight tiles gathered
  // from the forward's packed input) and dX reading the forward's weight tiles transposed (LOADW
  // transpose, flipped tap order), on rtl == ref == the contract. 4x4 C=8 O=16 (the Fashion CNN's
  // conv2) and 3x3 stride 2 with two channel blocks each way and asymmetric pads (zeros inserted).
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  ConvGeometry a;
  a.in_c = 8, a.in_h = a.in_w = 9, a.out_c = 16, a.kernel_h = a.kernel_w = 4;
  a.pad_top = a.pad_left = a.pad_bottom = a.pad_right = 1;
  ConvGeometry b;
  b.in_c = 20, b.in_h = 7, b.in_w = 8, b.out_c = 18, b.kernel_h = b.kernel_w = 3;
  b.stride_h = b.stride_w = 2;
  b.pad_top = b.pad_left = 1, b.pad_bottom = 0, b.pad_right = 1;
  const uint64_t batch = 2;
  std::mt19937 rng(9);
  for (const ConvGeometry& g : {a, b}) {
    Bf16ConvLayer l;
    l.name = "conv";
    l.geom = g;
    l.w = normal(uint64_t{g.out_c} * g.in_c * g.kernel_h * g.kernel_w, rng);
    l.bias.assign(g.out_c, 0.5f);
    const std::vector<float> x = normal(batch * g.in_c * g.in_h * g.in_w, rng);
    const std::vector<float> dy = normal(batch * g.out_c * g.out_h() * g.out_w(), rng);
    const std::vector<float> d = conv_grad_rows(l, dy, batch);
    struct Out {
      ConvParamGradResult pg;
      ConvInputGradResult dx;
    };
    auto run = [&](const char* backend) {
      Device dev = Device::open(backend, BackendConfig{});
      detail::TrainProgramCache cache(dev);
      cache.set_dw_mode(detail::TrainProgramCache::DwMode::kDirect);
      cache.conv(0, l, x, batch);
      Out o;
      uint64_t macs = 0;
      EXPECT_TRUE(cache.conv_param_grads(2, 0, l, x, d, batch, o.pg, macs));
      EXPECT_TRUE(cache.last_dw_direct());
      o.dx = detail::conv_input_grad_cached(cache, 1, l, dy, batch, nullptr, 0);
      return o;
    };
    const Out r = run("rtl");
    const Out f = run("ref");
    const ConvParamGradResult want = conv_param_grads_bf16_host(l, x, dy, batch, 16);
    EXPECT_EQ(bits(r.pg.dw), bits(want.dw));
    EXPECT_EQ(bits(r.pg.db), bits(want.db));
    EXPECT_EQ(bits(r.pg.dw), bits(f.pg.dw));
    EXPECT_EQ(r.pg.gemm.perf.rd_bytes, f.pg.gemm.perf.rd_bytes);
    EXPECT_EQ(bits(r.dx.dx), bits(conv_input_grad_bf16_host(l, dy, batch, 16)));
    EXPECT_EQ(bits(r.dx.dx), bits(f.dx.dx));
    EXPECT_EQ(r.dx.run.perf.rd_bytes, f.dx.run.perf.rd_bytes);
  }
}

TEST(ConvTrainBf16Rtl, CnnTrainerStepMatchesRef) {
  if (backend_array_sizes("rtl").empty()) GTEST_SKIP() << "rtl backend not built";
  // poolnet of tests/unit/training (scripts/gen_cnn_step.py): Conv-Relu-MaxPool-Conv-Relu-AvgPool-
  // Linear-Relu-Linear, one step of 8 rows.
  const std::filesystem::path dir = TPUW_CNN_STEP_DIR;
  const npy::Array xa = npy::load((dir / "poolnet_x.npy").string());
  const npy::Array ya = npy::load((dir / "poolnet_y.npy").string());
  const std::span<const float> xv = xa.view<float>();
  const std::span<const int64_t> y = ya.view<int64_t>();
  const size_t per = xv.size() / 16;
  auto step = [&](Device* dev) {
    CnnTrainer t(dev, compiler::build_cnn_training_model(compiler::import_onnx_file((dir / "poolnet.onnx").string())), 8,
                 SgdConfig{0.05f, 0.9f, 0.01f});
    const TrainStepReport r = t.step(xv.subspan(0, 8 * per), y.subspan(0, 8), 8);
    return std::make_pair(r, t.state());
  };
  Device rtl = Device::open("rtl", BackendConfig{});
  Device ref = Device::open("ref", BackendConfig{});
  const auto [ra, sa] = step(&rtl);
  const auto [rb, sb] = step(&ref);
  const auto [rc, sc] = step(nullptr);
  EXPECT_EQ(std::bit_cast<uint64_t>(ra.loss), std::bit_cast<uint64_t>(rb.loss));
  EXPECT_EQ(std::bit_cast<uint64_t>(ra.loss), std::bit_cast<uint64_t>(rc.loss));
  EXPECT_EQ(ra.macs, rb.macs);
  EXPECT_GT(ra.cycles, 0u);
  ASSERT_EQ(sa.params.size(), sc.params.size());
  for (const auto& [name, v] : sa.params) {
    EXPECT_EQ(bits(v), bits(sb.params.at(name))) << name;
    EXPECT_EQ(bits(v), bits(sc.params.at(name))) << name;
  }
}

}  // namespace
}  // namespace tpuw::runtime
