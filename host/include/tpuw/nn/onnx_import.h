// ONNX import: reads an ONNX model (the format PyTorch's torch.onnx.export writes) into a
// FloatNetwork (tpuw/nn/float_network.h). It is the graph compiler's pipeline (docs/compiler.md):
// ONNX -> graph IR (tpuw/compiler/onnx_importer.h) -> passes -> lowering (tpuw/compiler/passes.h).
//
//   tpuw::nn::FloatNetwork net = tpuw::nn::import_onnx("mlp.onnx");
//
// Supported (what PyTorch exports for MLPs; default ONNX domain, any opset):
//   Gemm      A = the activation [batch, k], B = an initializer; attributes alpha, beta, transB,
//             transA = 0; C (optional) an initializer broadcastable to [n]
//   MatMul    activation [batch, k] x initializer [k, n]; an Add of an initializer broadcastable
//             to [n] right after it (either operand order) becomes the layer's bias
//   Relu      after a layer (fused into it)
//   Flatten   axis = 1 (keeps the batch dimension)
//   Reshape   to [batch, features...] with a shape that folds to a constant keeping the batch
//             ([-1, f], [0, f], [0, -1], PyTorch's x.view(x.size(0), -1) as Shape -> Gather ->
//             Unsqueeze -> Concat); a shape that fixes, merges or moves the batch ([1, -1], [-1])
//             is refused, never reinterpreted
//   Softmax   the last operator, over the feature axis (runs on the host)
//   Identity, Constant, Dropout in inference (any opset; a training_mode input must be a constant
//             false, the mask output must be unread); nodes nothing reads are dropped
// The graph must be a chain from its one input to its one output; weights and biases must be
// initializers or Constant outputs (float32 or float64; shapes int64 or int32).
//
// Errors (never a crash, whatever the bytes):
//   Error(kBadFile)     "FILE: ..." the file cannot be read, is empty, is not a parseable
//                       ModelProto (truncated, garbage), has no graph, or is inconsistent (a
//                       tensor's data does not match its dims, a node reads an undefined value).
//   Error(kUnsupported) "FILE: node 'NAME' (OP): ..." naming the node, its operator and what is
//                       missing (unknown operator, attribute or attribute value, a non-chain
//                       graph, external tensor data, a non-float input).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "tpuw/nn/float_network.h"

namespace tpuw::nn {

/// Reads and imports an ONNX file.
FloatNetwork import_onnx(const std::filesystem::path& path);

/// Imports an in-memory serialized ModelProto; `name` is used in error messages.
FloatNetwork import_onnx_bytes(std::span<const uint8_t> bytes, std::string_view name);

}  // namespace tpuw::nn
