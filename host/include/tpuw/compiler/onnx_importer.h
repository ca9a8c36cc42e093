// ONNX -> graph IR. The only part of the compiler that knows ONNX's protobuf types.
//
// The importer is faithful, not clever: every node becomes an IR node (unknown operators too, as
// Op::kUnknown with their name, for legalize() to report), initializers become constants, the
// graph's inputs and outputs are kept. It normalizes what the opset changes but the meaning does
// not: Softmax's default axis (1 before opset 13, -1 from 13) is made explicit, and Reshape's
// opset-1 `shape` attribute becomes a constant second input.
//
// Errors: Error(kBadFile) "SOURCE: ..." for what is not a consistent model (unparseable bytes, no
// graph or opset, a tensor whose data does not match its dims, a node reading a value that no
// initializer or earlier node defines, a value defined twice, an undefined graph output);
// Error(kUnsupported) for what the IR cannot hold (external or sparse tensor data, an element
// type outside fp32/fp64/int64/int32/int8/bool, a non-tensor graph input).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

/// Imports a serialized ModelProto; `name` prefixes error messages (and becomes Graph::source).
Graph import_onnx_graph(std::span<const uint8_t> bytes, std::string_view name);

/// Reads and imports an ONNX file.
Graph import_onnx_file(const std::filesystem::path& path);

}  // namespace tpuw::compiler
