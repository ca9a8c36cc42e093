// Elementwise activation functions on the int8 MLP path (issue 13): Sigmoid, Tanh, LeakyRelu,
// Clip (Relu6), HardSigmoid, HardSwish, Gelu (and PyTorch's Erf form of it), Erf.
//
// They run on the device as ACTIVATE's 256-entry lookup table (ISA 1.2; nn::act_table builds it
// at compile time from the calibrated scales, docs/numerics.md "Lookup tables"). In the graph a
// function is fused into the Dense before it as attributes:
//   act        nn::ActFn as an int (0: none)
//   act_alpha  LeakyRelu alpha, Clip min, HardSigmoid alpha
//   act_beta   Clip max, HardSigmoid beta
//   act_node   the label "NAME (OP)" of the model node (messages)
// The function follows the Dense's ReLU (if any).
#pragma once

#include <cstddef>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/activation.h"

namespace tpuw::compiler {

/// True for Sigmoid, Tanh, LeakyRelu, Clip, HardSigmoid, HardSwish, Gelu, Erf.
bool is_activation_op(Op op);

/// The function a node of one of those operators computes (attributes, Clip's constant min/max
/// inputs); Error naming the node for a non-constant bound or an unknown Gelu approximation.
nn::Activation activation_of(const Graph& g, const Node& n);

/// The function fused into a Dense node (none when it has no `act` attribute).
nn::Activation dense_activation(const Graph& g, const Node& dense);
/// Sets (or, for none, clears) the act attributes of a Dense node.
void set_dense_activation(Node& dense, const nn::Activation& a);

/// Rewrites the exact GELU as PyTorch exports it -- Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) ->
/// Mul(0.5), or Mul(x, 0.5) times (1 + Erf(x / sqrt 2)) -- into one Gelu node. Runs after constant
/// folding (the scalars are constants), before fuse_dense. Returns how many it rewrote.
size_t fuse_gelu(Graph& g);

/// When the graph's last Dense has a function, an identity Dense (F x F weights, F at most
/// kMaxFeatureMapFeatures, else Error(kUnsupported) naming the layer) follows it: the int8
/// network's last layer has an int32 output dequantized on the host, and the lookup table needs an
/// int8 one. The quantize pass runs it first; bf16 needs no such layer (the VECTOR unit applies the
/// function to the last layer's fp32 result). Returns whether it added the layer.
bool add_int8_output_layer(Graph& g);

/// After fuse_dense / lower_feature_maps, in a graph without convolutions: every activation node
/// whose input is a Dense output nothing else reads (and that has no function yet) is fused into
/// it; any other activation of a [batch, features...] tensor becomes an identity Dense (diagonal
/// weight, at most kMaxFeatureMapFeatures features) with the function. The last Dense may keep a
/// function (int8: add_int8_output_layer, in quantize). Returns how many it fused.
size_t fuse_activations(Graph& g);

}  // namespace tpuw::compiler
