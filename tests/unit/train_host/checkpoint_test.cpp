// Training checkpoints (tpuw/runtime/train_checkpoint.h): the manifest's checksum as documented,
// two generations kept, a torn, truncated, edited or incomplete newest generation detected and the
// previous one used, leftovers of an interrupted save removed, and check_resume's refusals
// (issue 29: a position of 10^12 resumed as "0 steps" and wrote a model).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tpuw/error.h"
#include "tpuw/runtime/train_checkpoint.h"
#include "tpuw/sha256.h"

namespace tpuw::runtime {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

// A checkpoint of a 3x2 weight and a 2-element bias after `step` steps of 4 per epoch (batch 8,
// 30 rows: 3 full steps and one of 6 rows).
Checkpoint make(int64_t step, float v) {
  Checkpoint c;
  c.state.params["fc.weight"] = {v, v + 1, v + 2, v + 3, v + 4, v + 5};
  c.state.params["fc.bias"] = {-v, v};
  c.state.momentum["fc.weight"] = {0.5f, 0, 0, 0, 0, 0.25f};
  c.state.steps = step;
  c.epoch = step / 4;
  c.position = step % 4;
  c.epoch_rows = c.position * 8;
  c.epoch_loss_sum = c.position > 0 ? 1.5 : 0.0;
  c.rng = "00000000000000ff";
  c.trainer = "ref";
  c.options = {{"batch", 8}};
  return c;
}

const std::map<std::string, std::vector<int64_t>> kShapes = {{"fc.weight", {3, 2}}, {"fc.bias", {2}}};
const std::map<std::string, uint64_t> kSizes = {{"fc.weight", 6}, {"fc.bias", 2}};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tpuw_ck_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Generations 1 (step 5) and 2 (step 6).
  void two() {
    save_checkpoint(dir_, make(5, 1.0f), kShapes);
    save_checkpoint(dir_, make(6, 2.0f), kShapes);
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, ManifestChecksumIsTheHashOfTheBytesBeforeItsLine) {
  save_checkpoint(dir_, make(5, 1.0f), kShapes);
  const std::string text = slurp(dir_ / "manifest.json");
  const size_t at = text.rfind("\n  \"sha256\": \"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(text.substr(at + 14), sha256_hex(std::string_view(text).substr(0, at + 1)) + "\"\n}\n");
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["generation"], 1);
  EXPECT_EQ(j["params"][0]["file"], "g1-p0.npy");
  EXPECT_EQ(j["params"][0]["sha256"], sha256_hex(slurp(dir_ / "g1-p0.npy")));
  EXPECT_EQ(j["params"][0]["bytes"], fs::file_size(dir_ / "g1-p0.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "manifest.prev.json"));
}

TEST_F(CheckpointTest, KeepsTwoGenerations) {
  two();
  save_checkpoint(dir_, make(7, 3.0f), kShapes);
  const Checkpoint c = load_checkpoint(dir_);
  EXPECT_EQ(c.generation, 3);
  EXPECT_EQ(c.state.steps, 7);
  EXPECT_EQ(c.state.params.at("fc.bias"), (std::vector<float>{-3.0f, 3.0f}));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "manifest.prev.json"))["generation"], 2);
  EXPECT_TRUE(fs::exists(dir_ / "g2-p0.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "g1-p0.npy"));  // the third generation back is removed
}

// The class: a newest generation that does not check out falls back to the previous one.
TEST_F(CheckpointTest, TornManifestFallsBackToThePreviousGeneration) {
  two();
  const std::string text = slurp(dir_ / "manifest.json");
  spit(dir_ / "manifest.json", text.substr(0, text.size() / 2));  // torn: half of it on the disk
  const Checkpoint c = load_checkpoint(dir_);
  EXPECT_EQ(c.state.steps, 5);
  EXPECT_EQ(c.generation, 1);
  EXPECT_EQ(c.manifest, dir_ / "manifest.prev.json");
  EXPECT_NE(c.fallback.find("manifest.json: not valid JSON"), std::string::npos) << c.fallback;
}

TEST_F(CheckpointTest, EditedManifestIsAChecksumMismatch) {
  two();
  std::string text = slurp(dir_ / "manifest.json");
  const size_t p = text.find("\"position\": 2");
  ASSERT_NE(p, std::string::npos);
  text.replace(p, 13, "\"position\": 1000000000000");
  spit(dir_ / "manifest.json", text);
  const Checkpoint c = load_checkpoint(dir_);
  EXPECT_EQ(c.state.steps, 5);
  EXPECT_NE(c.fallback.find("checksum mismatch"), std::string::npos) << c.fallback;
}

TEST_F(CheckpointTest, DamagedOrMissingTensorFallsBack) {
  two();
  std::string t = slurp(dir_ / "g2-p1.npy");
  t.back() = static_cast<char>(t.back() ^ 1);  // one bit of a weight
  spit(dir_ / "g2-p1.npy", t);
  Checkpoint c = load_checkpoint(dir_);
  EXPECT_EQ(c.state.steps, 5);
  EXPECT_NE(c.fallback.find("g2-p1.npy: checksum mismatch"), std::string::npos) << c.fallback;
  spit(dir_ / "g2-p1.npy", t.substr(0, 100));  // truncated
  c = load_checkpoint(dir_);
  EXPECT_NE(c.fallback.find("the manifest records"), std::string::npos) << c.fallback;
  fs::remove(dir_ / "g2-m0.npy");
  fs::remove(dir_ / "g2-p1.npy");
  c = load_checkpoint(dir_);
  EXPECT_EQ(c.state.steps, 5);
  EXPECT_NE(c.fallback.find("g2-"), std::string::npos) << c.fallback;
}

TEST_F(CheckpointTest, BothGenerationsDamagedIsAnErrorNamingBoth) {
  two();
  spit(dir_ / "manifest.json", "{\"format\"");
  fs::remove(dir_ / "g1-p0.npy");
  try {
    load_checkpoint(dir_);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
    const std::string m = e.what();
    EXPECT_NE(m.find("manifest.json: not valid JSON"), std::string::npos) << m;
    EXPECT_NE(m.find("the previous checkpoint is not usable either"), std::string::npos) << m;
    EXPECT_NE(m.find("g1-p0.npy"), std::string::npos) << m;
  }
  fs::remove(dir_ / "manifest.prev.json");
  try {
    load_checkpoint(dir_);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no previous checkpoint"), std::string::npos) << e.what();
  }
}

// A save after a damaged newest generation keeps the good previous one, and removes the leftovers
// of a save that was killed (temporaries, files of a generation no manifest names).
TEST_F(CheckpointTest, SaveAfterDamageKeepsTheGoodGenerationAndCleansUp) {
  two();
  spit(dir_ / "manifest.json", "garbage");
  spit(dir_ / ".g2-p0.npy.tmp-0123456789abcdef", "partial");
  spit(dir_ / ".manifest.json.tmp-0123456789abcdef", "partial");
  spit(dir_ / "g9-p0.npy", "an interrupted save's tensor");
  spit(dir_ / "notes.txt", "the user's");
  save_checkpoint(dir_, make(6, 4.0f), kShapes);  // the resumed run gets to step 6 again
  Checkpoint c = load_checkpoint(dir_);
  EXPECT_EQ(c.generation, 10);
  EXPECT_EQ(c.state.params.at("fc.bias"), (std::vector<float>{-4.0f, 4.0f}));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "manifest.prev.json"))["generation"], 1);
  EXPECT_TRUE(fs::exists(dir_ / "g1-p0.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "g2-p0.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "g9-p0.npy"));
  EXPECT_FALSE(fs::exists(dir_ / ".g2-p0.npy.tmp-0123456789abcdef"));
  EXPECT_FALSE(fs::exists(dir_ / ".manifest.json.tmp-0123456789abcdef"));
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));  // not ours: untouched
}

TEST_F(CheckpointTest, CheckResumeAcceptsWhatARunWrites) {
  for (const int64_t step : {0, 3, 4, 7, 8}) {
    const Checkpoint c = make(step, 1.0f);
    EXPECT_NO_THROW(check_resume(c, 30, 8, 2, kSizes)) << "step " << step;
  }
  // --checkpoint-every on an epoch's last step: position 4 of 4, the epoch's 30 rows.
  Checkpoint c = make(4, 1.0f);
  c.epoch = 0;
  c.position = 4;
  c.epoch_rows = 30;
  c.epoch_loss_sum = 2.0;
  EXPECT_NO_THROW(check_resume(c, 30, 8, 2, kSizes));
}

// The example (position 10^12) and variants: every field that positions the run.
TEST_F(CheckpointTest, CheckResumeRefusesImpossiblePositions) {
  auto refused = [](const Checkpoint& c, int64_t epochs, const std::map<std::string, uint64_t>& sizes,
                    const std::string& want) {
    try {
      check_resume(c, 30, 8, epochs, sizes);
      ADD_FAILURE() << "accepted; expected '" << want << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadFile);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  Checkpoint c = make(5, 1.0f);
  c.position = 1000000000000;
  refused(c, 2, kSizes, "position 1000000000000 is past the end of an epoch (30 rows at --batch 8 are 4 steps");
  c = make(5, 1.0f);
  c.epoch = 0;
  c.position = 5;
  refused(c, 2, kSizes, "position 5 is past the end of an epoch (30 rows at --batch 8 are 4 steps, positions 0..4)");
  c = make(5, 1.0f);
  c.state.steps = 6;
  refused(c, 2, kSizes, "step 6 does not match epoch 1 position 1 (4 steps per epoch give step 5)");
  c = make(5, 1.0f);
  c.epoch = int64_t{1} << 53;
  refused(c, 2, kSizes, "give step beyond 2^53");
  refused(make(8, 1.0f), 1, kSizes, "beyond --epochs 1");
  c = make(5, 1.0f);
  c.epoch_rows = 9;
  refused(c, 2, kSizes, "epoch_rows 9 does not match position 1 x --batch 8 (30 rows)");
  c = make(8, 1.0f);
  c.epoch = 1;
  c.position = 4;
  c.epoch_rows = 32;
  refused(c, 2, kSizes, "epoch_rows 32 does not match position 4 x --batch 8 (30 rows)");
  c = make(4, 1.0f);
  c.epoch_loss_sum = 2.0;
  refused(c, 2, kSizes, "epoch_loss_sum 2 at position 0");
  refused(make(5, 1.0f), 2, {{"fc.weight", 6}, {"fc.bias", 3}}, "parameter 'fc.bias' has 2 values, the model's 3");
  refused(make(5, 1.0f), 2, {{"fc.weight", 6}}, "'fc.bias' is not a parameter of the model");
  refused(make(5, 1.0f), 2, {{"fc.weight", 6}, {"fc.bias", 2}, {"fc2.bias", 2}}, "no values for the model's parameter 'fc2.bias'");
}

TEST_F(CheckpointTest, LoadRefusesValuesNoRunWrites) {
  save_checkpoint(dir_, make(5, 1.0f), kShapes);
  const std::string good = slurp(dir_ / "manifest.json");
  // Edits with the checksum recomputed as documented: only the value checks stand in the way.
  auto resum = [](std::string text) {
    const size_t at = text.rfind("\n  \"sha256\": \"");
    return text.substr(0, at + 1) + "  \"sha256\": \"" + sha256_hex(std::string_view(text).substr(0, at + 1)) + "\"\n}\n";
  };
  for (const auto& [from, to, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"position\": 1", "\"position\": -1", "\"position\" -1 is out of range"},
           {"\"step\": 5", "\"step\": 99999999999999999", "\"step\" 99999999999999999 is out of range"},
           {"\"position\": 1", "\"position\": 6", "position 6 in the epoch exceeds the 5 steps taken"},
           {"\"rng\": \"00000000000000ff\"", "\"rng\": \"xyz\"", "\"rng\" must be 16 lowercase hex digits"},
           {"\"epoch_loss_sum\": 1.5", "\"epoch_loss_sum\": -1.0", "is not a finite number >= 0"}}) {
    std::string text = good;
    const size_t p = text.find(from);
    ASSERT_NE(p, std::string::npos) << from;
    text.replace(p, from.size(), to);
    spit(dir_ / "manifest.json", resum(text));
    try {
      load_checkpoint(dir_);
      ADD_FAILURE() << to << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpuw::runtime
