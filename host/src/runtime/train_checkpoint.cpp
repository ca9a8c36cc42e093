// Training checkpoints (tpuw/runtime/train_checkpoint.h; the format in docs/training.md).
#include "tpuw/runtime/train_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>

#include "tpuw/error.h"
#include "tpuw/file_io.h"
#include "tpuw/runtime/npy.h"
#include "tpuw/sha256.h"

namespace tpuw::runtime {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kFormat = "tpuw-train-checkpoint";
constexpr int kVersion = 2;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kPrevManifest = "manifest.prev.json";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;
// The line that ends a version 2 manifest, before the 64 hex digits of its checksum.
constexpr std::string_view kSumKey = "  \"sha256\": \"";
constexpr std::string_view kSumTail = "\"\n}\n";
// Steps, epochs and rows beyond 2^53 cannot come from a run (and would not survive a double).
constexpr int64_t kMaxCount = int64_t{1} << 53;

bool is_hex(std::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (const char ch : s) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

// "g<N>-..." or "s<N>-..." (version 1): N, the generation or step the file belongs to.
std::optional<uint64_t> numbered(std::string_view f, char tag) {
  if (f.size() < 3 || f[0] != tag) return std::nullopt;
  uint64_t n = 0;
  size_t i = 1;
  for (; i < f.size() && f[i] >= '0' && f[i] <= '9' && i < 19; ++i) n = n * 10 + static_cast<uint64_t>(f[i] - '0');
  if (i == 1 || i >= f.size() || f[i] != '-') return std::nullopt;
  return n;
}

// The text of a version 2 manifest: the JSON of `j` with its checksum as the last member.
std::string manifest_text(const json& j) {
  std::string body = j.dump(2);  // "{\n  ...\n}"
  body.resize(body.size() - 2);  // drop "\n}"
  body += ",\n";
  const std::string sum = sha256_hex(body);
  return body + std::string(kSumKey) + sum + std::string(kSumTail);
}

// Parses a manifest's bytes; Error naming `where` when it is not JSON of this format, or (version
// 2) its checksum does not match its bytes.
json parse_manifest(const std::vector<uint8_t>& bytes, const std::string& where) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: not valid JSON ({} bytes; torn or truncated?)", where, bytes.size()));
  }
  if (j.value("format", "") != kFormat || !j.contains("version") || !j["version"].is_number_integer() ||
      (j["version"] != 1 && j["version"] != kVersion)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: not a tpuw training checkpoint (format {} version 1 or {} "
                                                 "expected)", where, kFormat, kVersion));
  }
  if (j["version"] == kVersion) {
    const size_t at = text.rfind(std::string("\n") + std::string(kSumKey));
    const std::string_view rest = at == std::string_view::npos ? std::string_view() : text.substr(at + 1 + kSumKey.size());
    if (at == std::string_view::npos || rest.size() != 64 + kSumTail.size() || rest.substr(64) != kSumTail) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: the checksum line (\"sha256\", last) is missing or malformed",
                                                   where));
    }
    const std::string want(rest.substr(0, 64));
    const std::string got = sha256_hex(text.substr(0, at + 1));
    if (got != want) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: checksum mismatch (the manifest's bytes hash to {}, it records "
                                                   "{}): the file was changed or damaged", where, got, want));
    }
  }
  return j;
}

json write_tensors(const fs::path& dir, const std::map<std::string, std::vector<float>>& m, uint64_t gen, char tag,
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
    const std::string file = fmt::format("g{}-{}{}.npy", gen, tag, i++);
    const std::vector<uint8_t> bytes = npy::serialize(npy::Array::from<float>(shape, v));
    write_file_atomic(dir / file, bytes, "a checkpoint tensor");
    files.insert(file);
    list.push_back({{"name", name}, {"file", file}, {"shape", shape}, {"bytes", bytes.size()},
                    {"sha256", sha256_hex(bytes)}});
  }
  return list;
}

std::map<std::string, std::vector<float>> read_tensors(const fs::path& dir, const json& list, bool summed,
                                                       const std::string& where, const char* what) {
  std::map<std::string, std::vector<float>> m;
  if (!list.is_array()) throw Error(ErrorKind::kBadFile, fmt::format("{}: \"{}\" is not an array", where, what));
  for (const json& e : list) {
    if (!e.is_object() || !e.contains("name") || !e.contains("file") || !e["name"].is_string() || !e["file"].is_string()) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: a \"{}\" entry needs \"name\" and \"file\"", where, what));
    }
    const std::string name = e["name"].get<std::string>();
    const std::string file = e["file"].get<std::string>();
    if (file.find('/') != std::string::npos || file.empty() || file[0] == '.') {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: tensor file '{}' is not a plain file name", where, file));
    }
    const fs::path p = dir / file;
    npy::Array a;
    if (summed) {
      if (!e.contains("bytes") || !e["bytes"].is_number_unsigned() || !e.contains("sha256") || !e["sha256"].is_string() ||
          !is_hex(e["sha256"].get<std::string>(), 64) || !e.contains("shape") || !e["shape"].is_array()) {
        throw Error(ErrorKind::kBadFile, fmt::format("{}: the entry of '{}' needs \"shape\", \"bytes\" and \"sha256\"",
                                                     where, name));
      }
      const uint64_t want = e["bytes"].get<uint64_t>();
      if (want > npy::kMaxDataBytes + npy::kMaxHeaderBytes) {
        throw Error(ErrorKind::kBadFile, fmt::format("{}: '{}' records {} bytes, more than any tensor", where, name, want));
      }
      std::error_code ec;
      const uintmax_t size = fs::file_size(p, ec);
      if (ec) throw Error(ErrorKind::kBadFile, fmt::format("{}: tensor '{}' ({}): {}", where, name, p.string(), ec.message()));
      if (size != want) {
        throw Error(ErrorKind::kBadFile, fmt::format("{}: {} has {} bytes, the manifest records {} (truncated?)", where,
                                                     p.string(), size, want));
      }
      const std::vector<uint8_t> bytes = read_file_bounded(p, want, "a checkpoint tensor");
      const std::string got = sha256_hex(bytes);
      if (bytes.size() != want || got != e["sha256"].get<std::string>()) {
        throw Error(ErrorKind::kBadFile, fmt::format("{}: {}: checksum mismatch (the file was changed or damaged)", where,
                                                     p.string()));
      }
      a = npy::parse(bytes, p.string());
      std::vector<uint64_t> shape;
      for (const json& d : e["shape"]) {
        if (!d.is_number_unsigned()) throw Error(ErrorKind::kBadFile, fmt::format("{}: the shape of '{}' is malformed", where, name));
        shape.push_back(d.get<uint64_t>());
      }
      if (shape != a.shape) {
        throw Error(ErrorKind::kBadFile, fmt::format("{}: {} has shape {}, the manifest records {}", where, p.string(),
                                                     npy::shape_string(a.shape), npy::shape_string(shape)));
      }
    } else {
      a = npy::load(p);
    }
    if (a.dtype != npy::DType::kFloat32) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: dtype is {}, expected float32", p.string(), npy::to_string(a.dtype)));
    }
    const auto v = a.view<float>();
    if (!m.emplace(name, std::vector<float>(v.begin(), v.end())).second) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: tensor '{}' listed twice in \"{}\"", where, name, what));
    }
  }
  return m;
}

// One generation, read and checked in full; Error(kBadFile) naming `mf` otherwise.
Checkpoint read_generation(const fs::path& dir, const fs::path& mf) {
  const std::string where = mf.string();
  std::error_code ec;
  if (!fs::exists(mf, ec)) throw Error(ErrorKind::kBadFile, fmt::format("{}: missing", where));
  const json j = parse_manifest(read_file_bounded(mf, kMaxManifestBytes, "the checkpoint manifest"), where);
  const bool v2 = j["version"] == kVersion;
  Checkpoint c;
  try {
    c.generation = v2 ? j.at("generation").get<int64_t>() : 0;
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
  auto count = [&](const char* key, int64_t v) {
    if (v < 0 || v > kMaxCount) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: \"{}\" {} is out of range [0, 2^53]", where, key, v));
    }
  };
  count("generation", c.generation);
  count("step", c.state.steps);
  count("epoch", c.epoch);
  count("position", c.position);
  count("epoch_rows", c.epoch_rows);
  if (c.position > c.state.steps) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: position {} in the epoch exceeds the {} steps taken", where,
                                                 c.position, c.state.steps));
  }
  if (!std::isfinite(c.epoch_loss_sum) || c.epoch_loss_sum < 0) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: \"epoch_loss_sum\" {} is not a finite number >= 0", where,
                                                 c.epoch_loss_sum));
  }
  if (!is_hex(c.rng, 16)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: \"rng\" must be 16 lowercase hex digits", where));
  }
  if (!c.options.is_object()) throw Error(ErrorKind::kBadFile, fmt::format("{}: \"options\" is not an object", where));
  c.state.params = read_tensors(dir, j.value("params", json()), v2, where, "params");
  c.state.momentum = read_tensors(dir, j.value("momentum", json::array()), v2, where, "momentum");
  if (c.state.params.empty()) throw Error(ErrorKind::kBadFile, fmt::format("{}: no parameters", where));
  for (const auto& [name, v] : c.state.momentum) {
    const auto it = c.state.params.find(name);
    if (it == c.state.params.end() || it->second.size() != v.size()) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: momentum buffer '{}' has no parameter of its size", where, name));
    }
  }
  c.manifest = mf;
  return c;
}

// The file names a manifest's bytes name (empty when they do not parse).
std::set<std::string> named_files(const std::vector<uint8_t>& bytes) {
  std::set<std::string> files;
  const json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (!j.is_object()) return files;
  for (const char* key : {"params", "momentum"}) {
    if (!j.contains(key) || !j[key].is_array()) continue;
    for (const json& e : j[key]) {
      if (e.is_object() && e.contains("file") && e["file"].is_string()) files.insert(e["file"].get<std::string>());
    }
  }
  return files;
}

}  // namespace

void save_checkpoint(const fs::path& dir, const Checkpoint& c, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: cannot create the checkpoint directory{}", dir.string(),
                                                 ec ? ": " + ec.message() : ""));
  }
  // A generation above every one in the directory: no file a manifest names is ever overwritten.
  uint64_t gen = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (const auto n = numbered(e.path().filename().string(), 'g')) gen = std::max(gen, *n);
  }
  ++gen;
  std::set<std::string> files;
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["generation"] = gen;
  j["step"] = c.state.steps;
  j["epoch"] = c.epoch;
  j["position"] = c.position;
  j["epoch_loss_sum"] = c.epoch_loss_sum;
  j["epoch_rows"] = c.epoch_rows;
  j["rng"] = c.rng;
  j["trainer"] = c.trainer;
  j["options"] = c.options;
  j["params"] = write_tensors(dir, c.state.params, gen, 'p', shapes, files);
  j["momentum"] = write_tensors(dir, c.state.momentum, gen, 'm', shapes, files);
  // The current manifest, if it checks out, becomes the previous generation, but only after the
  // new one is committed: until then manifest.prev.json still names the generation before it, so
  // two distinct complete generations exist at every instant (a damaged current manifest is not
  // kept: the previous generation stays what it was).
  const fs::path mf = dir / kManifest, prev = dir / kPrevManifest;
  std::vector<uint8_t> kept;
  if (fs::exists(mf, ec)) {
    try {
      std::vector<uint8_t> cur = read_file_bounded(mf, kMaxManifestBytes, "the checkpoint manifest");
      parse_manifest(cur, mf.string());
      kept = std::move(cur);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kResource) throw;
    }
  }
  const std::string text = manifest_text(j);
  write_file_atomic(mf, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
                    "the checkpoint manifest");  // the commit point
  if (!kept.empty()) {
    write_file_atomic(prev, kept, "the previous checkpoint manifest");
  } else if (fs::exists(prev, ec)) {
    try {
      kept = read_file_bounded(prev, kMaxManifestBytes, "the previous checkpoint manifest");
    } catch (const Error&) {
      kept.clear();
    }
  }
  // Garbage now: tensor files neither manifest names, and temporaries of interrupted saves.
  for (const std::string& f : named_files(kept)) files.insert(f);
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const bool tensor = (numbered(f, 'g') || numbered(f, 's')) && f.ends_with(".npy");
    const bool temp = f.find(".tmp-") != std::string::npos &&
                      (numbered(f.substr(1), 'g') || numbered(f.substr(1), 's') || f.starts_with(".manifest.json.") ||
                       f.starts_with(".manifest.prev.json."));
    if ((tensor && !files.contains(f)) || (temp && f[0] == '.')) fs::remove(e.path(), ec);
  }
}

Checkpoint load_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: not a checkpoint directory (it does not exist or is a file)",
                                                 dir.string()));
  }
  const fs::path mf = dir / kManifest, prev = dir / kPrevManifest;
  std::string newest;
  try {
    return read_generation(dir, mf);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadFile) throw;
    newest = e.what();
  }
  if (!fs::exists(prev, ec)) {
    if (!fs::exists(mf, ec)) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: not a checkpoint directory (no {})", dir.string(), kManifest));
    }
    throw Error(ErrorKind::kBadFile, fmt::format("{}; no previous checkpoint ({}) to fall back to", newest, kPrevManifest));
  }
  try {
    Checkpoint c = read_generation(dir, prev);
    c.fallback = newest;
    return c;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kBadFile) throw;
    throw Error(ErrorKind::kBadFile, fmt::format("{}; the previous checkpoint is not usable either: {}", newest, e.what()));
  }
}

void check_resume(const Checkpoint& c, int64_t rows, int64_t batch, int64_t epochs,
                  const std::map<std::string, uint64_t>& param_sizes) {
  const std::string where = c.manifest.string();
  const int64_t per_epoch = (rows + batch - 1) / batch;
  // position == per_epoch: a --checkpoint-every save on an epoch's last step (the epoch is done,
  // the next one not begun).
  if (c.position > per_epoch) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: position {} is past the end of an epoch ({} rows at --batch {} "
                                                 "are {} steps, positions 0..{})", where, c.position, rows, batch,
                                                 per_epoch, per_epoch));
  }
  // step == epoch * per_epoch + position, without overflow (all three are in [0, 2^53]).
  const auto want = static_cast<__int128>(c.epoch) * per_epoch + c.position;
  if (want != c.state.steps) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: step {} does not match epoch {} position {} ({} steps per epoch "
                                                 "give step {})", where, c.state.steps, c.epoch, c.position, per_epoch,
                                                 want <= kMaxCount ? fmt::format("{}", static_cast<int64_t>(want))
                                                                   : std::string("beyond 2^53")));
  }
  if (c.epoch > epochs || (c.epoch == epochs && c.position > 0)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: the checkpoint is in epoch {} (position {}), beyond --epochs {}",
                                                 where, c.epoch + 1, c.position, epochs));
  }
  if (c.epoch_rows != std::min(c.position * batch, rows)) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: epoch_rows {} does not match position {} x --batch {} ({} rows)",
                                                 where, c.epoch_rows, c.position, batch, rows));
  }
  if (c.position == 0 && c.epoch_loss_sum != 0.0) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: epoch_loss_sum {} at position 0 (no steps in the epoch yet)", where,
                                                 c.epoch_loss_sum));
  }
  for (const auto& [name, n] : param_sizes) {
    const auto it = c.state.params.find(name);
    if (it == c.state.params.end()) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: no values for the model's parameter '{}'", where, name));
    }
    if (it->second.size() != n) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: parameter '{}' has {} values, the model's {}", where, name,
                                                   it->second.size(), n));
    }
  }
  for (const auto& [name, v] : c.state.params) {
    if (!param_sizes.contains(name)) {
      throw Error(ErrorKind::kBadFile, fmt::format("{}: '{}' is not a parameter of the model", where, name));
    }
  }
}

}  // namespace tpuw::runtime
