// Per-row affine operators as dense layers (issue 13; docs/conformance.md).
//
// Operators that map each row of an activation [batch, features...] to an affine function of
// that same row are run as, or folded into, dense layers:
//
//   Add / Sub / Mul / Div by a constant that broadcasts over the batch (x + c, x - c, c - x, x * c,
//     x / c; c / x is refused): y = x * s + t per feature;
//   BatchNormalization (inference, training_mode = 0) on [batch, C, ...]:
//     s[c] = scale[c] / sqrt(var[c] + epsilon), t[c] = B[c] - mean[c] * s[c];
//   Transpose whose permutation keeps the batch axis first: a permutation of the features;
//   Relu on the graph input: the identity with ReLU;
//   MatMul of [batch, g..., M, K] by a constant B [1 | g..., K, P] that broadcasts over the batch
//     (a batched MatMul, e.g. ONNX's test_matmul_4d): one Dense node whose weight is block-diagonal
//     over (g, m), at most kMaxFeatureMapFeatures^2 values (larger: Error(kUnsupported) naming
//     the node); fuse_dense leaves such a MatMul alone.
//
// When the operator's input is a Dense node's output (no ReLU, nothing else reads it), the map is
// folded into that layer's columns (W'[k][j] = W[k][src(j)] * s[j], b'[j] = b[src(j)] * s[j] +
// t[j]; float32, so within float rounding of the unfolded product). Otherwise it becomes its own
// Dense node whose weight is diagonal (or a permutation), limited to kMaxFeatureMapFeatures
// features (the weight is F x F); larger ones are Error(kUnsupported) naming the node.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

/// Largest feature count of a standalone map (its dense layer's weight is F x F).
constexpr int64_t kMaxFeatureMapFeatures = 4096;

/// Rewrites the operators above after fuse_dense (shapes inferred). Returns how many it rewrote.
size_t lower_feature_maps(Graph& g);

}  // namespace tpuw::compiler
