// Int8 post-training quantization as passes over the graph IR (tpuw/compiler/ir.h), with the
// float interpreter that calibrates it and the lowering of the quantized graph to nn::QNetwork.
//
//   Graph g = optimize(import_onnx_graph(bytes, "mlp.onnx"));   // Dense/Reshape/Flatten/Softmax
//   quantize(g, calib_x, rows);                                 // Quantize -> QDense... -> Dequantize
//   nn::QNetwork q = lower_to_qnetwork(g);
//
// The rules are exactly nn::quantize's (tpuw/nn/quantize.h, docs/quantization.md), and nn::quantize
// is this pass run on the graph of a FloatNetwork (graph_of_float_network): same QNetwork bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qnetwork.h"

namespace tpuw::compiler {

/// The float reference over the IR: runs the optimized (fused) graph on x ([batch, features of
/// the one graph input], row-major float32) and returns every value's tensor, indexed by ValueId
/// (empty for constants and values not computed). Same arithmetic as nn::forward_float: a Dense
/// accumulates in double from float32 weights and bias and stores float32 after its ReLU;
/// Reshape/Flatten copy; Softmax is nn::softmax_rows over the last dimension. Other operators are
/// Error(kUnsupported) naming the node (a new operator adds one case here). Throws
/// Error(kInvalidArgument) when x.size() is not batch x the input's features. A graph with several
/// inputs (a CNN's: compile_quantized_cnn) reads each row of x as every input's values side by
/// side, in graph order.
std::vector<std::vector<float>> interpret_float(const Graph& g, std::span<const float> x, uint64_t batch);

/// The quantization pass on an optimized graph (one fp32 input, a chain of Dense, Reshape,
/// Flatten and a final Softmax): calibrates on `calib` ([rows, features]) with interpret_float and
/// rewrites the graph to int8: a Quantize of the input (scale = max|calib| / 127), every Dense a
/// QDense with int8 weights (per-column scales), int32 bias, per-column mult/shift into the next
/// int8 activation (scale from its calibrated float tensor; a Dense with a function requantizes
/// into its lookup table's input scale), the last one int32_output followed by a Dequantize to fp32
/// (per-column scales) before the host Softmax. A function on the last Dense first gets an identity
/// Dense after it (add_int8_output_layer, tpuw/compiler/activations.h). Value scales are kept in
/// Value::scale. Errors as nn::quantize: kInvalidArgument for rows == 0 or a size mismatch,
/// kUnsupported for no Dense, a non-finite weight or bias, a factor the device cannot express.
void quantize(Graph& g, std::span<const float> calib, uint64_t rows);

/// Every Dense weight and bias of `g` finite, checked as quantize() checks them, with its message:
/// Error(kBadFile) "SOURCE: layer 'L' weight 'W' (as [inputs, outputs]) element [r, c] is NaN
/// (every value READER reads must be finite)". `tpuw run --precision bf16` runs it with READER
/// "the bf16 compiler" on the float network's graph (issue 29: a NaN or infinite weight or bias,
/// or one that a Gemm's alpha/beta made infinite, ran and gave NaN/inf outputs).
void require_finite_weights(const Graph& g, std::string_view reader);

/// Lowering of a quantized graph (after quantize()) to the device's nn::QNetwork.
nn::QNetwork lower_to_qnetwork(const Graph& g);

/// The IR of a FloatNetwork: its input [batch, input_features], one Dense per layer (origin: the
/// layer's name), a Softmax when its host op is one. optimize() leaves it unchanged.
Graph graph_of_float_network(const nn::FloatNetwork& net);

/// optimize(), quantize(), lower_to_qnetwork(): a model's QNetwork straight from its imported graph.
nn::QNetwork compile_quantized(Graph g, std::span<const float> calib, uint64_t rows);

}  // namespace tpuw::compiler
