// Pipeline training on the ref backend (tpuw/worker/pipeline_trainer.h, docs/scaling.md "Pipeline
// training"): the stage split balances training MACs and refuses more stages than layers; K = 1, 2,
// 3, 4 stages give the bits of mirrored training with the same chunks on one device (losses,
// weights, momentum; momentum and weight decay, a partial last batch, both weight layouts, array
// sizes 16 and 4); logits through the stages are the one-device logits; the cycle schedule's busy
// fractions and bubble are consistent; a state taken from K = 2 resumes on K = 4 to the same bits.
#include "support/mlp_train_fixtures.h"
#include "support/worker_fixtures.h"
#include "tpuw/worker/pipeline_trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/spec.h"
#include "tpuw/worker/mirrored_trainer.h"

namespace tpuw::worker {
namespace {

// 20 -> 24 (ReLU, [out, in]) -> 16 (ReLU, [in, out]) -> 12 (ReLU, [out, in]) -> 10 logits ([in, out]).
compiler::TrainModel mlp4(uint32_t seed) {
  return test::small_mlp(seed, {{20, 24, true, true}, {24, 16, false, true}, {16, 12, true, true}, {12, 10, false, false}},
                         "mlp4");
}

using test::Batch;
using test::make_batch;

bool has_features() { return test::has_training_features(Device::open("ref", BackendConfig{})); }

WorkerOptions worker_options(unsigned devices, uint32_t array_n = 16) { return test::ref_worker_options(devices, array_n); }

const runtime::SgdConfig kSgd{0.05f, 0.9f, 0.01f};
constexpr int64_t kBatch = 32;

struct TrainRun {
  runtime::TrainState state;
  std::vector<double> losses;
};

// Steps first .. last-1 of the fixed sequence (step 2 is partial: 21 rows).
TrainRun train(runtime::Trainer& t, int first = 0, int last = 3) {
  TrainRun r;
  for (int s = first; s < last; ++s) {
    const int64_t rows = s == 2 ? 21 : kBatch;
    const Batch b = make_batch(rows, 40 + static_cast<uint32_t>(s));
    r.losses.push_back(t.step(b.x, b.y, rows).loss);
  }
  r.state = t.state();
  return r;
}

void expect_same_state(const runtime::TrainState& a, const runtime::TrainState& b, const std::string& what) {
  EXPECT_EQ(a.steps, b.steps) << what;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (const auto& [name, w] : a.params) {
    const std::vector<float>& v = b.params.at(name);
    ASSERT_EQ(w.size(), v.size()) << what << " " << name;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), std::bit_cast<uint32_t>(v[i])) << what << " " << name << "[" << i << "]";
      ASSERT_EQ(std::bit_cast<uint32_t>(a.momentum.at(name)[i]), std::bit_cast<uint32_t>(b.momentum.at(name)[i]))
          << what << " momentum " << name << "[" << i << "]";
    }
  }
}

void expect_same_losses(const TrainRun& a, const TrainRun& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(a.losses[i]), std::bit_cast<uint64_t>(b.losses[i])) << what << " loss " << i;
  }
}

TEST(PartitionLayers, BalancesTrainingMacs) {
  // Per row: layer 0 2*20*24 = 960, layer 1 3*24*16 = 1152, layer 2 3*16*12 = 576, layer 3 3*12*10 = 360.
  const compiler::TrainModel m = mlp4(1);
  const std::vector<PipelineStage> one = partition_layers(m, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].first_layer, 0u);
  EXPECT_EQ(one[0].layers, 4u);
  EXPECT_EQ(one[0].macs_per_row, 960u + 1152u + 576u + 360u);
  // Two stages: {0} 960 | {1,2,3} 2088, {0,1} 2112 | {2,3} 936: the first is best (largest 2088).
  const std::vector<PipelineStage> two = partition_layers(m, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].first_layer, 0u);
  EXPECT_EQ(two[0].layers, 1u);
  EXPECT_EQ(two[1].first_layer, 1u);
  EXPECT_EQ(two[1].layers, 3u);
  EXPECT_EQ(two[1].device, 1u);
  EXPECT_EQ(two[1].macs_per_row, 1152u + 576u + 360u);
  const std::vector<PipelineStage> four = partition_layers(m, 4);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(four[s].first_layer, s);
    EXPECT_EQ(four[s].layers, 1u);
  }
  try {
    (void)partition_layers(m, 5);
    FAIL() << "5 stages for 4 layers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("5 stages for a model of 4 layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)partition_layers(m, 0), Error);
}

TEST(PipelineTrainer, BitIdenticalToMirroredOnOneDevice) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  for (uint32_t an : {16u, 4u}) {
    Worker w1(worker_options(1, an));
    MirroredOptions mo;
    mo.chunks = 4;
    MirroredTrainer mirrored(w1, mlp4(9), kBatch, kSgd, mo);
    const TrainRun want = train(mirrored);
    for (unsigned k : {1u, 2u, 3u, 4u}) {
      const std::string what = fmt::format("N={} K={}", an, k);
      Worker w(worker_options(k, an));
      PipelineTrainer p(w, mlp4(9), kBatch, kSgd, PipelineOptions{.micro_batches = 4});
      EXPECT_EQ(p.micro_rows(), 8);
      EXPECT_EQ(p.stages().size(), k);
      const TrainRun got = train(p);
      expect_same_losses(want, got, what);
      expect_same_state(want.state, got.state, what);
      // Logits through the stages (two micro-batches and a short one) are one device's.
      const Batch b = make_batch(19, 7);
      const std::vector<float> za = mirrored.logits(b.x, 19), zb = p.logits(b.x, 19);
      ASSERT_EQ(za.size(), zb.size()) << what;
      for (size_t i = 0; i < za.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(za[i]), std::bit_cast<uint32_t>(zb[i])) << what << " logit " << i;
      }
    }
  }
}

TEST(PipelineTrainer, BusyFractionsAndBoundaryBytes) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  for (unsigned k : {1u, 2u, 4u}) {
    Worker w(worker_options(k));
    PipelineTrainer p(w, mlp4(3), kBatch, kSgd, PipelineOptions{.micro_batches = 4});
    const Batch b = make_batch(kBatch, 5);
    const runtime::TrainStepReport r = p.step(b.x, b.y, kBatch);
    const PipelineStats& st = p.last_step();
    ASSERT_EQ(st.busy_cycles.size(), k);
    uint64_t most = 0, sum = 0;
    for (unsigned d = 0; d < k; ++d) {
      EXPECT_GT(st.busy_cycles[d], 0u);
      EXPECT_LE(st.busy_cycles[d], st.step_cycles);
      EXPECT_GT(st.busy_fraction(d), 0.0);
      EXPECT_LE(st.busy_fraction(d), 1.0);
      most = std::max(most, st.busy_cycles[d]);
      sum += st.busy_cycles[d];
    }
    EXPECT_EQ(r.cycles, st.step_cycles);
    // The makespan is at least the busiest device's work and at most everything in sequence.
    EXPECT_GE(st.step_cycles, most);
    EXPECT_LE(st.step_cycles, sum);
    EXPECT_GE(st.bubble_fraction(), 0.0);
    EXPECT_LT(st.bubble_fraction(), 1.0);
    if (k == 1) {
      EXPECT_EQ(st.step_cycles, sum);  // one device: no overlap, no bubble
      EXPECT_EQ(st.boundary_bytes, 0u);
      EXPECT_DOUBLE_EQ(st.busy_fraction(0), 1.0);
    } else {
      EXPECT_LT(st.step_cycles, sum) << "K=" << k << ": the stages never overlapped";
      EXPECT_GT(st.boundary_bytes, 0u);
      EXPECT_GT(st.stash_bytes, 0u);
    }
    EXPECT_EQ(p.totals().steps, 1);
    EXPECT_EQ(p.last_full_step().step_cycles, st.step_cycles);
  }
}

TEST(PipelineTrainer, StateResumesOnOtherStageCounts) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  Worker w1(worker_options(1));
  PipelineTrainer whole(w1, mlp4(11), kBatch, kSgd, PipelineOptions{.micro_batches = 4});
  const TrainRun want = train(whole);

  Worker w2(worker_options(2));
  PipelineTrainer first(w2, mlp4(11), kBatch, kSgd, PipelineOptions{.micro_batches = 4});
  const TrainRun head = train(first, 0, 2);
  EXPECT_EQ(head.state.steps, 2);
  Worker w4(worker_options(4));
  PipelineTrainer second(w4, mlp4(11), kBatch, kSgd, PipelineOptions{.micro_batches = 4});
  second.load_state(head.state);
  const TrainRun tail = train(second, 2, 3);
  expect_same_state(want.state, tail.state, "K=2 then K=4");
}

TEST(PipelineTrainer, RefusesBadOptions) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  Worker w(worker_options(2));
  EXPECT_THROW(PipelineTrainer(w, mlp4(1), 0, kSgd), Error);
  EXPECT_THROW(PipelineTrainer(w, mlp4(1), kBatch, kSgd, PipelineOptions{.micro_batches = 0}), Error);
  EXPECT_THROW(PipelineTrainer(w, mlp4(1), kBatch, kSgd, PipelineOptions{.micro_batches = kBatch + 1}), Error);
  Worker w5(worker_options(5));
  try {
    PipelineTrainer p(w5, mlp4(1), kBatch, kSgd);
    FAIL() << "5 stages for 4 layers";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
  PipelineTrainer p(w, mlp4(1), kBatch, kSgd);
  const Batch b = make_batch(4, 1);
  std::vector<int64_t> bad = b.y;
  bad[2] = 10;
  EXPECT_THROW(p.step(b.x, bad, 4), Error);
  EXPECT_THROW(p.step(b.x, b.y, 5), Error);
}

}  // namespace
}  // namespace tpuw::worker
