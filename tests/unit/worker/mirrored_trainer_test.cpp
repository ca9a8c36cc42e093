// Mirrored training on the ref backend (tpuw/worker/mirrored_trainer.h, docs/scaling.md): one
// chunk on one device is the unfused DeviceTrainer step bit for bit; K = 1, 2, 4 devices give the
// same bits for the same chunks (momentum and weight decay, a partial last batch); a device that
// faults during the compute or the update phase is reset, reloaded from another replica, its part
// redone, and the weights stay bit-identical; with no other replica the step fails clearly. Several
// ranks (an in-process Collective standing in for MPI): P x K replicas give the same bits, and an
// error on one rank stops every rank with that rank's message.
#include "support/mlp_train_fixtures.h"
#include "support/worker_fixtures.h"
#include "tpuw/worker/mirrored_trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "tpuw/backend.h"
#include "tpuw/device.h"
#include "tpuw/error.h"
#include "tpuw/runtime/device_trainer.h"
#include "tpuw/sim_control.h"
#include "tpuw/spec.h"

namespace tpuw::worker {
namespace {

using test::Batch;
using test::make_batch;
using test::small_mlp;

bool has_features() { return test::has_training_features(Device::open("ref", BackendConfig{})); }

WorkerOptions worker_options(unsigned devices, uint32_t array_n = 16) { return test::ref_worker_options(devices, array_n); }

MirroredOptions chunks(int64_t n) {
  MirroredOptions o;
  o.chunks = n;
  return o;
}

const runtime::SgdConfig kSgd{0.05f, 0.9f, 0.01f};
constexpr int64_t kBatch = 32;

// Three steps (the last one partial: 21 rows) of `t`; returns the final state and the losses.
struct TrainRun {
  runtime::TrainState state;
  std::vector<double> losses;
};

TrainRun train(runtime::Trainer& t) {
  TrainRun r;
  for (int s = 0; s < 3; ++s) {
    const int64_t rows = s == 2 ? 21 : kBatch;
    const Batch b = make_batch(rows, 40 + static_cast<uint32_t>(s));
    r.losses.push_back(t.step(b.x, b.y, rows).loss);
  }
  r.state = t.state();
  return r;
}

void expect_same_bits(const TrainRun& a, const TrainRun& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(a.losses[i]), std::bit_cast<uint64_t>(b.losses[i])) << what << " loss " << i;
  }
  EXPECT_EQ(a.state.steps, b.state.steps) << what;
  for (const auto& [name, w] : a.state.params) {
    const std::vector<float>& v = b.state.params.at(name);
    ASSERT_EQ(w.size(), v.size()) << what << " " << name;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), std::bit_cast<uint32_t>(v[i])) << what << " " << name << "[" << i << "]";
      ASSERT_EQ(std::bit_cast<uint32_t>(a.state.momentum.at(name)[i]),
                std::bit_cast<uint32_t>(b.state.momentum.at(name)[i]))
          << what << " momentum " << name << "[" << i << "]";
    }
  }
}

TEST(TreeSum, FixedPairwiseOrder) {
  // ((a + b) + (c + d)) + e, elementwise; one part is itself.
  const std::vector<float> a{1e8f}, b{1.0f}, c{-1e8f}, d{1.0f}, e{0.5f};
  const std::vector<float> got = tree_sum({a, b, c, d, e});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], ((1e8f + 1.0f) + (-1e8f + 1.0f)) + 0.5f);
  EXPECT_EQ(tree_sum({{3.0f, 4.0f}}), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_THROW(tree_sum({{1.0f}, {1.0f, 2.0f}}), Error);
}

TEST(MirroredTrainer, OneChunkOnOneDeviceIsTheUnfusedStep) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  for (uint32_t an : {16u, 4u}) {
    BackendConfig cfg;
    cfg.array_n = an;
    Device dev = Device::open("ref", cfg);
    runtime::DeviceTrainerSchedule unfused;
    unfused.fuse_update = false;
    runtime::DeviceTrainer single(dev, small_mlp(5), kBatch, kSgd, unfused);
    const TrainRun want = train(single);

    Worker w(worker_options(1, an));
    MirroredTrainer m(w, small_mlp(5), kBatch, kSgd, chunks(1));
    const TrainRun got = train(m);
    expect_same_bits(want, got, fmt::format("N={}", an));
  }
}

TEST(MirroredTrainer, BitIdenticalForOneTwoFourDevices) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  TrainRun ref;
  for (unsigned k : {1u, 2u, 4u}) {
    Worker w(worker_options(k));
    MirroredTrainer m(w, small_mlp(9), kBatch, kSgd, chunks(4));
    EXPECT_EQ(m.chunk_rows(), 8);
    EXPECT_EQ(m.devices(), k);
    const TrainRun got = train(m);
    const MirroredStats& t = m.totals();
    EXPECT_EQ(t.steps, 3);
    EXPECT_EQ(t.recoveries, 0u);
    EXPECT_GT(t.gather_bytes, 0u);
    // Every replica receives every layer's reduced gradient each step.
    EXPECT_EQ(t.broadcast_bytes % k, 0u);
    if (k == 1) {
      ref = got;
      // Chunked is not the one-program step, but close to it (bf16 products, other sum order).
      Device dev = Device::open("ref", BackendConfig{});
      runtime::DeviceTrainer single(dev, small_mlp(9), kBatch, kSgd);
      const TrainRun one = train(single);
      for (size_t i = 0; i < one.losses.size(); ++i) EXPECT_NEAR(one.losses[i], got.losses[i], 1e-3);
    } else {
      expect_same_bits(ref, got, fmt::format("K={}", k));
    }
  }
}

// Injects a persistent memory fault on `device` just before the program named `phase` of step
// `step` (once): the next DMA faults, the worker re-creates the device, the trainer reloads it.
struct Injector {
  Injector(unsigned d, int64_t s, std::string p) : device(d), step(s), phase(std::move(p)) {}
  unsigned device;
  int64_t step;
  std::string phase;
  std::atomic<int> fired{0};
  void operator()(DeviceSlot& s, int64_t st, const std::string& ph) {
    if (s.index != device || st != step || ph != phase || fired.exchange(1) != 0) return;
    s.device.backend().sim_control()->inject_memory_fault(true);
  }
};

TEST(MirroredTrainer, FaultedDeviceIsReloadedAndTheStepRedone) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  TrainRun clean;
  {
    Worker w(worker_options(2));
    MirroredTrainer m(w, small_mlp(13), kBatch, kSgd, chunks(4));
    clean = train(m);
  }
  for (const auto& [dev, phase] : {std::pair<unsigned, std::string>{1, "backward chunk 3 layer 1"},
                                   std::pair<unsigned, std::string>{0, "forward chunk 1"},
                                   std::pair<unsigned, std::string>{1, "update layer 2"}}) {
    Worker w(worker_options(2));
    auto inj = std::make_shared<Injector>(dev, 2, phase);
    MirroredOptions o;
    o.chunks = 4;
    o.fault_hook = [inj](DeviceSlot& s, int64_t st, const std::string& ph) { (*inj)(s, st, ph); };
    MirroredTrainer m(w, small_mlp(13), kBatch, kSgd, o);
    const TrainRun got = train(m);
    EXPECT_EQ(inj->fired.load(), 1) << phase;
    expect_same_bits(clean, got, phase);
    EXPECT_EQ(m.totals().recoveries, 1u) << phase;
    ASSERT_FALSE(m.events().empty()) << phase;
    EXPECT_NE(m.events()[0].find(fmt::format("step 2: device {} failed", dev)), std::string::npos) << m.events()[0];
    EXPECT_NE(m.events()[0].find(fmt::format("reloaded from device {}", 1 - dev)), std::string::npos)
        << m.events()[0];
    w.wait_idle();
    EXPECT_EQ(w.stats()[dev].failures, 1u);
    EXPECT_TRUE(w.stats()[dev].healthy);
  }
}

TEST(MirroredTrainer, ShardedUpdateIsTheWholeUpdate) {
  // The update sharded over K devices (the default) gives the bits of every device running the
  // whole update, for shards that do not divide the rows evenly (K = 3; N = 16 and 4, so some
  // bias shards are empty), and costs each device about 1/K of the update's cycles.
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  for (uint32_t an : {16u, 4u}) {
    for (unsigned k : {2u, 3u}) {
      const std::string what = fmt::format("N={} K={}", an, k);
      MirroredOptions whole = chunks(6);
      whole.shard_update = false;
      Worker w1(worker_options(k, an));
      MirroredTrainer a(w1, small_mlp(21), kBatch, kSgd, whole);
      const TrainRun want = train(a);
      Worker w2(worker_options(k, an));
      MirroredTrainer b(w2, small_mlp(21), kBatch, kSgd, chunks(6));
      const TrainRun got = train(b);
      expect_same_bits(want, got, what);
      EXPECT_EQ(a.totals().shard_bytes, 0u) << what;
      EXPECT_GT(b.totals().shard_bytes, 0u) << what;
      EXPECT_LT(b.totals().broadcast_bytes, a.totals().broadcast_bytes) << what;
      // A replica holding a stale shard would change the next steps' losses or gradients: the
      // three steps compared above cover that every replica holds the whole updated state.
      // Per step, the slowest device's update cycles shrink with K.
      const Batch x = make_batch(kBatch, 77);
      const uint64_t ua = a.step(x.x, x.y, kBatch).update_cycles, ub = b.step(x.x, x.y, kBatch).update_cycles;
      EXPECT_LT(ub * (k - 1), ua) << what << ": " << ub << " vs " << ua;
      const runtime::TrainState sa = a.state(), sb = b.state();
      EXPECT_EQ(sa.params, sb.params) << what;
    }
  }
}

TEST(MirroredTrainer, FaultedDeviceInAShardedUpdateIsReloaded) {
  // K = 3: a fault in device 2's (or device 0's) update shard; the others have finished theirs.
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  TrainRun clean;
  {
    Worker w(worker_options(1));
    MirroredTrainer m(w, small_mlp(23), kBatch, kSgd, chunks(3));
    clean = train(m);
  }
  for (const unsigned dev : {2u, 0u}) {
    Worker w(worker_options(3));
    auto inj = std::make_shared<Injector>(dev, 3, "update layer 1");
    MirroredOptions o;
    o.chunks = 3;
    o.fault_hook = [inj](DeviceSlot& s, int64_t st, const std::string& ph) { (*inj)(s, st, ph); };
    MirroredTrainer m(w, small_mlp(23), kBatch, kSgd, o);
    const TrainRun got = train(m);
    EXPECT_EQ(inj->fired.load(), 1);
    expect_same_bits(clean, got, fmt::format("device {}", dev));
    EXPECT_EQ(m.totals().recoveries, 1u);
    ASSERT_EQ(m.events().size(), 2u);
    EXPECT_NE(m.events()[0].find(fmt::format("step 3: device {} failed", dev)), std::string::npos) << m.events()[0];
    EXPECT_NE(m.events()[1].find(fmt::format("device {} redoes its update shard", dev)), std::string::npos)
        << m.events()[1];
  }
}

TEST(MirroredTrainer, FaultWithoutAnotherReplicaFailsClearly) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  Worker w(worker_options(1));
  auto inj = std::make_shared<Injector>(0, 1, "backward chunk 0 layer 0");
  MirroredOptions o;
  o.chunks = 2;
  o.fault_hook = [inj](DeviceSlot& s, int64_t st, const std::string& ph) { (*inj)(s, st, ph); };
  MirroredTrainer m(w, small_mlp(13), kBatch, kSgd, o);
  const Batch b = make_batch(kBatch, 1);
  try {
    (void)m.step(b.x, b.y, kBatch);
    FAIL() << "expected a device fault";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFault);
    EXPECT_NE(std::string(e.what()).find("no other device holds a replica"), std::string::npos) << e.what();
  }
}

TEST(MirroredTrainer, ArgumentErrors) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  Worker w(worker_options(1));
  EXPECT_THROW(MirroredTrainer(w, small_mlp(1), 0, kSgd), Error);
  EXPECT_THROW(MirroredTrainer(w, small_mlp(1), 8, kSgd, chunks(9)), Error);
  MirroredTrainer m(w, small_mlp(1), 8, kSgd, chunks(2));
  const Batch b = make_batch(8, 1);
  EXPECT_THROW((void)m.step(b.x, b.y, 9), Error);
  std::vector<int64_t> bad = b.y;
  bad[3] = 10;
  EXPECT_THROW((void)m.step(b.x, bad, 8), Error);
}


TEST(MirroredTrainer, TraceSpansPerTrackInOrder) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  using TP = std::chrono::steady_clock::time_point;
  struct Span {
    std::string name;
    TP a, b;
  };
  std::mutex mu;
  std::map<std::string, std::vector<Span>> tracks;
  MirroredOptions o = chunks(4);
  o.trace = [&](const std::string& track, const std::string& name, TP a, TP b) {
    std::lock_guard lk(mu);
    tracks[track].push_back({name, a, b});
  };
  Worker w(worker_options(2));
  MirroredTrainer m(w, small_mlp(3), kBatch, kSgd, o);
  const Batch b = make_batch(kBatch, 5);
  (void)m.step(b.x, b.y, kBatch);
  ASSERT_EQ(tracks.count("device 0") + tracks.count("device 1") + tracks.count("reducer"), 3u);
  for (const auto& [track, spans] : tracks) {
    for (size_t i = 0; i < spans.size(); ++i) {
      EXPECT_LE(spans[i].a, spans[i].b) << track << " " << spans[i].name;
      if (i > 0) {
        EXPECT_LE(spans[i - 1].b, spans[i].a) << track << ": " << spans[i - 1].name << " / " << spans[i].name;
      }
    }
  }
  // Device 0 computes chunks 0 and 1: per chunk a forward, 3 backward and 3 gather spans; then
  // 3 broadcast and 3 update spans. The reducer sums 3 nodes per layer (4 chunks).
  const auto count = [&](const std::string& track, const std::string& prefix) {
    size_t n = 0;
    for (const Span& sp : tracks[track]) n += sp.name.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  };
  EXPECT_EQ(tracks["device 0"].front().name, "forward chunk 0");
  EXPECT_EQ(count("device 0", "forward chunk"), 2u);
  EXPECT_EQ(count("device 1", "backward chunk 3"), 3u);
  EXPECT_EQ(count("device 1", "gather chunk"), 6u);
  EXPECT_EQ(count("device 1", "update layer"), 3u);
  EXPECT_EQ(count("reducer", "sum layer"), 9u);
}

// P ranks in one process: allgather meets all P threads, or times out.
class LocalHub {
 public:
  explicit LocalHub(int p) : p_(p), slots_(static_cast<size_t>(p)) {}
  std::vector<std::vector<uint8_t>> allgather(int rank, std::span<const uint8_t> mine) {
    std::unique_lock lk(mu_);
    const uint64_t round = round_;
    slots_[static_cast<size_t>(rank)].assign(mine.begin(), mine.end());
    if (++arrived_ == p_) {
      result_ = slots_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return round_ != round; })) {
      throw Error(ErrorKind::kTimeout, "LocalHub: a rank did not answer");
    }
    return result_;
  }

 private:
  int p_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<uint8_t>> slots_, result_;
  int arrived_ = 0;
  uint64_t round_ = 0;
};

class LocalCollective final : public Collective {
 public:
  LocalCollective(LocalHub& hub, int rank, int size) : hub_(hub), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::vector<uint8_t>> allgather(std::span<const uint8_t> mine) override {
    return hub_.allgather(rank_, mine);
  }

 private:
  LocalHub& hub_;
  int rank_, size_;
};

// P ranks of K devices each train three steps; every rank's run (or its error message).
struct RankResult {
  TrainRun run;
  std::string error;
};

std::vector<RankResult> train_ranks(int p, unsigned k, const std::function<void(MirroredOptions&, int)>& tweak = {}) {
  LocalHub hub(p);
  std::vector<RankResult> out(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        LocalCollective c(hub, r, p);
        Worker w(worker_options(k));
        MirroredOptions o = chunks(4);
        o.collective = &c;
        if (tweak) tweak(o, r);
        MirroredTrainer m(w, small_mlp(17), kBatch, kSgd, o);
        out[static_cast<size_t>(r)].run = train(m);
      } catch (const Error& e) {
        out[static_cast<size_t>(r)].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(MirroredTrainer, RanksTimesDevicesBitIdentical) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  const std::vector<RankResult> one = train_ranks(1, 1);
  ASSERT_EQ(one[0].error, "");
  for (const auto& [p, k] : {std::pair{2, 1u}, std::pair{2, 2u}, std::pair{4, 1u}}) {
    const std::vector<RankResult> got = train_ranks(p, k);
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(got[static_cast<size_t>(r)].error, "") << "P=" << p << " K=" << k << " rank " << r;
      expect_same_bits(one[0].run, got[static_cast<size_t>(r)].run, fmt::format("P={} K={} rank {}", p, k, r));
    }
  }
}

TEST(MirroredTrainer, AnErrorOnOneRankStopsEveryRank) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  // Rank 1 has one device: a fault there cannot be reloaded locally, so its step fails.
  const std::vector<RankResult> got = train_ranks(2, 1, [](MirroredOptions& o, int rank) {
    if (rank != 1) return;
    auto inj = std::make_shared<Injector>(0, 2, "backward chunk 3 layer 0");
    o.fault_hook = [inj](DeviceSlot& s, int64_t st, const std::string& ph) { (*inj)(s, st, ph); };
  });
  for (const RankResult& r : got) {
    EXPECT_NE(r.error.find("rank 1: "), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("no other device holds a replica"), std::string::npos) << r.error;
  }
}

TEST(MirroredTrainer, AnUpdateErrorOnOneRankStopsEveryRank) {
  if (!has_features()) GTEST_SKIP() << "ref backend without FEATURES.BF16/TRANSPOSE";
  // The update is sharded over the ranks' replicas: a fault in rank 1's update shard (one device,
  // nothing to reload from) travels in the shards' allgather.
  const std::vector<RankResult> got = train_ranks(2, 1, [](MirroredOptions& o, int rank) {
    if (rank != 1) return;
    auto inj = std::make_shared<Injector>(0, 2, "update layer 1");
    o.fault_hook = [inj](DeviceSlot& s, int64_t st, const std::string& ph) { (*inj)(s, st, ph); };
  });
  for (const RankResult& r : got) {
    EXPECT_NE(r.error.find("rank 1: "), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("no other device holds a replica"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace tpuw::worker
