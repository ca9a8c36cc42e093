// Internal to the compiler: the dense head of a CNN (the nodes after its Flatten/Reshape), shared
// by the int8 (compile_quantized_cnn) and bf16 (compile_bf16_cnn) CNN compilers.
#pragma once

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
void add_head_node(const Graph& g, const CnnInputs& ins, const Node& n, ValueId act, nn::FloatNetwork& head);

}  // namespace tpuw::compiler::detail
