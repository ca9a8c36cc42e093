// Training checkpoints (tpuw/runtime/train_checkpoint.h).
#include "tpuw/runtime/train_checkpoint.h"

#include <fmt/format.h>

#include <set>
#include <system_error>

#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/npy.h"

namespace tpuw::runtime {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kFormat = "tpuw-train-checkpoint";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;

json write_tensors(const fs::path& dir, const std::map<std::string, std::vector<float>>& m, int64_t step, char tag,
                   const std::map<std::string, std::vector<int64_t>>& shapes, std::set<std::string>& files) {
  json list = json::array();
  size_t i = 0;
  for (const auto& [name, v] : m) {
    std::vector<uint64_t> shape;
    const auto it = shapes.find(name);
    uint64_t count = 1;
    if (it != shapes.end()) {
      for (const int64_t d : it->second) {
        shape.push_back(static_cast<uint64_t>(d));
        count *= static_cast<uint64_t>(d);
      }
    }
    if (it == shapes.end() || count != v.size()) shape = {v.size()};
    const std::string file = fmt::format("s{}-{}{}.npy", step, tag, i++);
    npy::save(dir / file, npy::Array::from<float>(shape, v));
    files.insert(file);
    list.push_back({{"name", name}, {"file", file}, {"shape", shape}});
  }
  return list;
}

std::map<std::string, std::vector<float>> read_tensors(const fs::path& dir, const json& list, const std::string& where) {
  std::map<std::string, std::vector<float>> m;
  if (!list.is_array()) throw Error(ErrorKind::kBadFile, fmt::format("{}: a tensor list is not an array", where));
  for (const json& e : list) {
    if (!e.is_object() || !e.contains("name") || !e.contains("file") || !e["name"].is_string() || !e["file"].is_string()) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: a tensor entry needs \"name\" and \"file\"", where));
    }
    const std::string file = e["file"].get<std::string>();
    if (file.find('/') != std::string::npos || file.empty() || file[0] == '.') {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: tensor file '{}' is not a plain file name", where, file));
    }
    const npy::Array a = npy::load(dir / file);
    if (a.dtype != npy::DType::kFloat32) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}, expected float32", (dir / file).string(),
                                                   npy::to_string(a.dtype)));
    }
    const auto v = a.view<float>();
    if (!m.emplace(e["name"].get<std::string>(), std::vector<float>(v.begin(), v.end())).second) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: tensor '{}' listed twice", where, e["name"].get<std::string>()));
    }
  }
  return m;
}

}  // namespace

void save_checkpoint(const fs::path& dir, const Checkpoint& c, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: cannot create the checkpoint directory{}", dir.string(),
                                                 ec ? ": " + ec.message() : ""));
  }
  std::set<std::string> files;
  json j;
  j["format"] = kFormat;
  j["version"] = 1;
  j["step"] = c.state.steps;
  j["epoch"] = c.epoch;
  j["position"] = c.position;
  j["epoch_loss_sum"] = c.epoch_loss_sum;
  j["epoch_rows"] = c.epoch_rows;
  j["rng"] = c.rng;
  j["trainer"] = c.trainer;
  j["options"] = c.options;
  j["params"] = write_tensors(dir, c.state.params, c.state.steps, 'p', shapes, files);
  j["momentum"] = write_tensors(dir, c.state.momentum, c.state.steps, 'm', shapes, files);
  files.insert("manifest.json");
  {
    AtomicFile f(dir / "manifest.json", "the checkpoint manifest");
    f.write(std::string_view(j.dump(2) + "\n"));
    f.commit();
  }
  // The new manifest is in place: the files of older checkpoints are garbage now.
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() > 5 && f[0] == 's' && f.ends_with(".npy") && !files.contains(f)) fs::remove(e.path(), ec);
  }
}

Checkpoint load_checkpoint(const fs::path& dir) {
  const fs::path mf = dir / "manifest.json";
  const std::string where = mf.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: not a checkpoint directory (it does not exist or is a file)",
                                                 dir.string()));
  }
  const std::vector<uint8_t> bytes = read_file_bounded(mf, kMaxManifestBytes, "the checkpoint manifest");
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(ErrorKind::kBadFile, fmt::format("{}: not valid JSON", where));
  if (j.value("format", "") != kFormat || j.value("version", 0) != 1) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: not a tpuw training checkpoint (format {} version 1 expected)",
                                                 where, kFormat));
  }
  Checkpoint c;
  try {
    c.state.steps = j.at("step").get<int64_t>();
    c.epoch = j.at("epoch").get<int64_t>();
    c.position = j.at("position").get<int64_t>();
    c.epoch_loss_sum = j.at("epoch_loss_sum").get<double>();
    c.epoch_rows = j.at("epoch_rows").get<int64_t>();
    c.rng = j.at("rng").get<std::string>();
    c.trainer = j.at("trainer").get<std::string>();
    c.options = j.at("options");
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {}", where, e.what()));
  }
  if (c.state.steps < 0 || c.epoch < 0 || c.position < 0 || c.epoch_rows < 0) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: negative step, epoch or position", where));
  }
  c.state.params = read_tensors(dir, j.value("params", json::array()), where);
  c.state.momentum = read_tensors(dir, j.value("momentum", json::array()), where);
  return c;
}

}  // namespace tpuw::runtime
