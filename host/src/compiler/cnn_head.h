// Internal to the compiler: the dense head of a CNN (the nodes after its Flatten/Reshape), shared
// by the int8 (compile_quantized_cnn) and bf16 (compile_bf16_cnn) CNN compilers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/ir.h"
#include "tpuw/nn/float_network.h"

namespace tpuw::compiler::detail {

/// Adds node `n` of a CNN's dense head to `head`; `act` is the head's current value (the output of
/// the node before), which `n` must read. A Dense becomes a DenseLayer (its Relu attribute
/// included); an activation function (Sigmoid, Tanh, LeakyRelu, Clip, HardSigmoid, HardSwish, Gelu,
/// Erf) right after a dense layer that has none joins it (DenseLayer::act: an int8 lookup table in
/// the layer's ACTIVATE, VECTOR ops in bf16); a Softmax over [batch, features] is the host op; a
/// Flatten/Reshape adds nothing. Anything else, a node after the Softmax, a second function on one
/// dense layer or a function with no dense layer before it is Error(kUnsupported) naming the node;
/// so is a node reading one of the graph's vector inputs (`ins`): a vector joins the head only in
/// the Concat with the flattened map right after the Flatten, which the caller has consumed.
/// The dense head's row when node `i` is a Concat, along the features, of the flattened last map
/// `act` with vector graph inputs (`ins`): each part's source in the Concat's order (`map_source`
/// for the map, -1 - k for vector input k), and `i` moves past the Concat. Empty, `i` unchanged,
/// when node `i` is not such a Concat. Error(kUnsupported) naming the Concat when it joins along the
/// batch axis, or a part is a hidden activation, appears twice, or is also read by another node.
std::vector<int32_t> head_concat_sources(const Graph& g, const CnnInputs& ins, size_t& i, ValueId act,
                                         int32_t map_source);

void add_head_node(const Graph& g, const CnnInputs& ins, const Node& n, ValueId act, nn::FloatNetwork& head);

}  // namespace tpuw::compiler::detail
