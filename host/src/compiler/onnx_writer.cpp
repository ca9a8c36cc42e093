// Trained fp32 initializer values into a copy of the input model (tpuw/compiler/onnx_writer.h).
#include "tpuw/compiler/onnx_writer.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <limits>
#include <optional>
#include <set>

namespace tpuw::compiler {
namespace {

onnx::ModelProto parse_model(std::span<const uint8_t> bytes, const std::string& file) {
  if (bytes.empty()) throw Error(ErrorKind::kBadFile, fmt::format("{}: file is empty, not an ONNX model", file));
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorKind::kBadFile, fmt::format("{}: {} bytes is larger than protobuf's 2 GiB limit", file, bytes.size()));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !model.has_graph()) {
    throw Error(ErrorKind::kBadFile,
                fmt::format("{}: not a valid ONNX model (protobuf parse failed or no graph)", file));
  }
  return model;
}

Dims dims_of(const onnx::TensorProto& t) { return Dims(t.dims().begin(), t.dims().end()); }

}  // namespace

std::map<std::string, Dims> float_initializers(std::span<const uint8_t> model, std::string_view name) {
  const onnx::ModelProto m = parse_model(model, std::string(name));
  std::map<std::string, Dims> out;
  for (const onnx::TensorProto& t : m.graph().initializer()) {
    if (t.data_type() == onnx::TensorProto::FLOAT) out.emplace(t.name(), dims_of(t));
  }
  return out;
}

std::vector<uint8_t> replace_float_initializers(std::span<const uint8_t> model, std::string_view name,
                                                const std::map<std::string, std::vector<float>>& values) {
  const std::string file(name);
  onnx::ModelProto m = parse_model(model, file);
  std::set<std::string> done;
  for (onnx::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    const auto it = values.find(t.name());
    if (it == values.end()) continue;
    auto fail = [&](std::string_view what) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: initializer '{}' {}", file, t.name(), what));
    };
    if (t.data_type() != onnx::TensorProto::FLOAT) fail("is not float32");
    if (t.data_location() == onnx::TensorProto::EXTERNAL) fail("is stored outside the model file");
    if (!done.insert(t.name()).second) fail("is defined twice");
    const std::optional<int64_t> count = checked_elements(dims_of(t));
    const std::vector<float>& v = it->second;
    if (!count || static_cast<uint64_t>(*count) != v.size()) {
      fail(fmt::format("has shape {}; {} values were given", dims_string(dims_of(t)), v.size()));
    }
    if (t.has_raw_data()) {
      std::string raw(v.size() * sizeof(float), '\0');
      // ONNX raw data is little-endian, as is every host this builds for.
      if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
      t.set_raw_data(std::move(raw));
    } else {
      t.clear_float_data();
      t.mutable_float_data()->Reserve(static_cast<int>(v.size()));
      for (const float f : v) t.add_float_data(f);
    }
  }
  for (const auto& [n, v] : values) {
    if (!done.contains(n)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: no float32 initializer named '{}'", file, n));
    }
  }
  std::string out;
  if (!m.SerializeToString(&out)) {
    throw Error(ErrorKind::kInternal, fmt::format("{}: the updated model could not be serialized", file));
  }
  return {out.begin(), out.end()};
}

}  // namespace tpuw::compiler
