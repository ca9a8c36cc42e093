// MaxPool (int8) on the device (tpuw/runtime/maxpool.h), ref backend: every attribute combination
// (kernel, strides, pads incl. asymmetric and ceil_mode's extra end pads, dilations, several
// channel blocks and images per tile, ReLU) equals the host max pool nn::conv2d_int bit for bit;
// a device without the VECTOR unit keeps the host max pool in run_cnn. bf16 (run_max_pool_bf16):
// the same geometries equal the plain host max (conv2d_bf16_host) for finite normal inputs and the
// device contract (max_pool_bf16_host) always, -0, subnormals, NaN and infinities included.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/numerics.h"
#include "tpuw/runtime/conv.h"
#include "tpuw/runtime/maxpool.h"
#include "pool_cases.h"

namespace tpuw::runtime {
namespace {

using pool_cases::PoolCase;

QConv2d pool_layer(const PoolCase& c) {
  QConv2d l;
  l.name = "pool";
  l.max_pool = true;
  l.relu = c.relu;
  l.geom = pool_cases::geometry(c);
  return l;
}

std::vector<int8_t> random_map(uint64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> x(n);
  for (auto& v : x) v = static_cast<int8_t>(d(rng));
  return x;
}

TEST(MaxPoolDevice, EqualsTheHostMaxPool) {
  std::vector<PoolCase> cases = pool_cases::attribute_cases();
  cases.push_back({4, 4, 4, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0, 2, 4, false});   // the whole map (global max)
  cases.push_back({3, 5, 5, 3, 3, 2, 2, 1, 1, 2, 2, 2, 2, 1, 16, false});  // pads 2 (a window of pads: -128)

  std::mt19937 rng(5);
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i);
    const QConv2d l = pool_layer(c);
    const std::vector<int8_t> x = random_map(c.batch * c.c * c.h * c.w, rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    const ConvRunResult r = run_max_pool(dev, l, x, c.batch);
    EXPECT_EQ(r.y, nn::conv2d_int(l, x, c.batch));
    EXPECT_FALSE(r.host);
    EXPECT_GT(r.cycles, 0u);
    EXPECT_EQ(r.min_bytes, c.batch * c.c * (uint64_t{c.h} * c.w + uint64_t{l.geom.out_h()} * l.geom.out_w()));
    EXPECT_GE(r.moved_bytes, r.min_bytes);
  }
}

TEST(MaxPoolDevice, AllMinus128AndAllMaxInputs) {
  std::mt19937 rng(6);
  const QConv2d l = pool_layer({17, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2, 16, false});
  for (const int v : {-128, 127, 0}) {
    const std::vector<int8_t> x(2 * 17 * 36, static_cast<int8_t>(v));
    Device dev = Device::open("ref", BackendConfig{});
    EXPECT_EQ(run_max_pool(dev, l, x, 2).y, nn::conv2d_int(l, x, 2)) << v;
  }
}

TEST(MaxPoolDevice, WithoutTheVectorUnitTheHostPools) {
  std::mt19937 rng(7);
  nn::QCnn net;
  net.in_c = 3, net.in_h = 6, net.in_w = 6;
  net.convs.push_back(pool_layer({3, 6, 6, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 2, 16, true}));
  const std::vector<int8_t> x = random_map(2 * 3 * 36, rng);
  BackendConfig cfg;
  cfg.enable_bf16 = false;
  Device plain = Device::open("ref", cfg);
  EXPECT_FALSE(max_pool_on_device(plain.info()));
  const CnnRunResult h = run_cnn(plain, net, x, 2);
  EXPECT_TRUE(h.convs[0].host);
  EXPECT_EQ(h.cycles, 0u);
  Device dev = Device::open("ref", BackendConfig{});
  EXPECT_TRUE(max_pool_on_device(dev.info()));
  const CnnRunResult d = run_cnn(dev, net, x, 2);
  EXPECT_FALSE(d.convs[0].host);
  EXPECT_GT(d.cycles, 0u);
  EXPECT_EQ(d.output_i32, h.output_i32);
  EXPECT_EQ(d.output_i32, nn::forward_cnn_int_raw(net, x, 2));
  try {
    (void)run_max_pool(plain, net.convs[0], x, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("VECTOR"), std::string::npos) << e.what();
  }
}

Bf16ConvLayer bf16_pool_layer(const PoolCase& c) {
  Bf16ConvLayer l;
  l.name = "pool";
  l.kind = Bf16ConvLayer::Kind::kMaxPool;
  l.geom = pool_cases::geometry(c);
  return l;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Random bf16 values, normal or +0 (no -0, no subnormals, no NaN or infinity).
std::vector<float> random_bf16_map(uint64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-8.0f, 8.0f);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = num::bf16_to_float(num::bf16_from_float(d(rng)));
    if (rng() % 16 == 0) v = 0.0f;
  }
  return x;
}

TEST(MaxPoolDevice, Bf16EqualsTheHostMaxPool) {
  const std::vector<PoolCase> cases = {
      {2, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1, 3, 16, false},   // ceil_mode
      {2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2, 2, 3, 16, false},   // pads + ceil_mode
      {20, 9, 8, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 3, 16, false},  // two channel blocks, asymmetric
      {5, 9, 9, 2, 2, 1, 1, 2, 2, 0, 0, 0, 0, 2, 16, false},   // dilation 2
      {6, 11, 10, 3, 3, 3, 2, 2, 1, 2, 1, 1, 2, 2, 4, false},  // N=4, stride 3x2, dilation 2x1
      {8, 28, 28, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 20, 16, false},  // the Fashion CNN's pool1
  };
  std::mt19937 rng(8);
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& c = cases[i];
    SCOPED_TRACE(testing::Message() << "case " << i);
    const Bf16ConvLayer l = bf16_pool_layer(c);
    const std::vector<float> x = random_bf16_map(c.batch * c.c * c.h * c.w, rng);
    BackendConfig cfg;
    cfg.array_n = c.array_n;
    Device dev = Device::open("ref", cfg);
    const ConvBf16RunResult r = run_max_pool_bf16(dev, l, x, c.batch);
    EXPECT_EQ(bits(r.y), bits(conv2d_bf16_host(l, x, c.batch, c.array_n)));
    EXPECT_EQ(bits(r.y), bits(max_pool_bf16_host(l, x, c.batch, c.array_n)));
    EXPECT_FALSE(r.host);
    EXPECT_GT(r.cycles, 0u);
    EXPECT_EQ(r.min_bytes, 2 * c.batch * c.c * (uint64_t{c.h} * c.w + uint64_t{l.geom.out_h()} * l.geom.out_w()));
  }
}

TEST(MaxPoolDevice, Bf16SpecialValuesFollowTheDeviceContract) {
  const PoolCase c{20, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2, 16, false};
  const Bf16ConvLayer l = bf16_pool_layer(c);
  std::mt19937 rng(9);
  std::vector<float> x = random_bf16_map(c.batch * c.c * c.h * c.w, rng);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {-0.0f, num::to_float(0x00010000u), -num::to_float(0x00010000u), inf, -inf,
                            std::numeric_limits<float>::quiet_NaN(), -3.3895e38f};
  for (size_t i = 0; i < x.size(); i += 23) x[i] = specials[(i / 23) % std::size(specials)];
  Device dev = Device::open("ref", BackendConfig{});
  const ConvBf16RunResult r = run_max_pool_bf16(dev, l, x, c.batch);
  EXPECT_EQ(bits(r.y), bits(max_pool_bf16_host(l, x, c.batch, 16)));
}

TEST(MaxPoolDevice, Bf16CnnRunsItsPoolsOnTheDevice) {
  Bf16Cnn net;
  net.in_c = 3, net.in_h = 8, net.in_w = 8;
  net.convs.push_back(bf16_pool_layer({3, 8, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 2, 16, false}));
  net.head.input_features = 3 * 4 * 4;  // no dense layers: the pooled map is the output
  std::mt19937 rng(10);
  const std::vector<float> x = random_bf16_map(2 * 3 * 64, rng);
  Device dev = Device::open("ref", BackendConfig{});
  const CnnBf16RunResult r = run_cnn_bf16(dev, net, x, 2);
  EXPECT_FALSE(r.convs[0].host);
  EXPECT_GT(r.cycles, 0u);
  EXPECT_EQ(bits(r.output), bits(forward_cnn_bf16_host(net, x, 2, 16)));
}

}  // namespace
}  // namespace tpuw::runtime
