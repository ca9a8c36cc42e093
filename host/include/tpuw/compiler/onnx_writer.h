// Trained weights back into an ONNX file: the input model, byte for byte the same graph, with new
// values for some of its fp32 initializers (`tpuw train --output`). The second file of the
// compiler that knows ONNX's protobuf types (the importer is the first).
//
// Everything but the named initializers' data is kept: nodes, names, opset, metadata, the other
// initializers, the initializer's own storage (raw_data stays raw_data, float_data stays
// float_data), so PyTorch (`onnx.numpy_helper.to_array`) loads the same tensor names and shapes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

/// The fp32 initializers of a serialized model, by name: their dims (an empty vector for a
/// scalar). Error(kBadFile) "NAME: ..." when the bytes are not a ModelProto with a graph.
std::map<std::string, Dims> float_initializers(std::span<const uint8_t> model, std::string_view name);

/// The serialized model with every initializer named in `values` holding those values (row-major,
/// the initializer's own dims). Error(kInvalidArgument) "NAME: initializer 'X' ..." when a name is
/// not an fp32 initializer of the model, is stored externally, or the value count differs from
/// its dims; nothing is returned then.
std::vector<uint8_t> replace_float_initializers(std::span<const uint8_t> model, std::string_view name,
                                                const std::map<std::string, std::vector<float>>& values);

}  // namespace tpuw::compiler
