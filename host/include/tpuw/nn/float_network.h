// The float network: what the ONNX importer (tpuw/nn/onnx_import.h) produces and the quantizer
// (tpuw/nn/quantize.h) consumes. A chain of dense layers y = act(x . W + b), then an optional
// host-side operator (softmax), exactly the shape the device runs (tpuw/nn/qnetwork.h).
//
// forward_float() is the float reference: what the model computes before quantization, used to
// calibrate activation scales and to measure the accuracy that int8 costs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpuw/nn/activation.h"
#include "tpuw/nn/qnetwork.h"

namespace tpuw::nn {

/// One dense layer in float. w has k*n entries row-major [k][n] (ONNX MatMul's B layout).
struct DenseLayer {
  std::string name;      // ONNX node name(s) the layer came from, e.g. "fc1 (Gemm) + relu1 (Relu)"
  uint32_t k = 0;        // input features
  uint32_t n = 0;        // output features
  std::vector<float> w;  // [k][n]
  std::vector<float> b;  // [n] (zeros when the model has no bias)
  bool relu = false;     // ReLU fused after the layer
  Activation act;        // a function after the ReLU (if any): Sigmoid, Tanh, ... (int8: a table)
};

/// One graph output of a model with several (FloatNetwork::outputs): columns [col, col + cols) of
/// the last layer's output rows, then its own host operators (applied to those columns alone).
struct NetOutput {
  std::string name;                  // the graph output
  uint32_t col = 0, cols = 0;        // the slice of the last layer's output features
  std::vector<HostStep> host_steps;  // in order, each over `cols` features
};

/// One graph input of a model with several (FloatNetwork::input_parts).
struct InputPart {
  std::string name;            // the graph input
  std::vector<int64_t> shape;  // as declared; -1 for a symbolic (batch) dimension
  uint32_t features = 0;       // product of its non-batch dimensions
};

struct FloatNetwork {
  std::string source;                // file (or name) the model was read from, for messages
  std::string input_name;            // the graph input
  std::vector<int64_t> input_shape;  // as declared; -1 for a symbolic (batch) dimension
  std::string output_name;           // the graph output
  uint32_t input_features = 0;       // product of the input's non-batch dimensions == layers[0].k
  // A model with several graph inputs (compiler: merge_graph_inputs): the network's input row is
  // their rows side by side in this order (input_features is the sum; input_name joins the names
  // with '+'). Empty for one input.
  std::vector<InputPart> input_parts;
  // Host operators (Softmax, LogSoftmax, LayerNormalization) that read the graph input before any
  // device operator: applied in fp32 to the raw input rows, in order, before the device (and
  // before int8 quantization and calibration), each over input_features. Empty for most models.
  std::vector<HostStep> input_steps;
  std::vector<DenseLayer> layers;    // in order; layers[i].k == layers[i-1].n
  HostOp host_op = HostOp::kNone;    // applied on the host after the last layer (the CNN head's form)
  std::vector<HostStep> host_steps;  // then these host operators, in order (the MLP compiler's form)
  // A Reshape whose shape fixes dimension 0 (ONNX's [2, 12] for a [2, 3, 4] input) keeps the batch
  // only when the input has exactly that many rows: the runtime checks it (never reinterprets).
  uint64_t fixed_batch = 0;          // 0: any number of rows
  std::string fixed_batch_by;        // "node 'r' (Reshape): reshape to [2, 12]": the node that fixes it
  // A model with several outputs: every one of them, in the graph's order (output_name is the
  // first's; host_op and host_steps are then empty: each output has its own). Empty for one output.
  std::vector<NetOutput> outputs;

  uint32_t output_features() const { return layers.empty() ? input_features : layers.back().n; }
};

/// Row-wise softmax over `cols` columns, in place (max-subtracted, float32 result).
void softmax_rows(std::span<float> y, uint32_t cols);

/// One host operator over rows of `cols` features (y is [rows, cols]), in place, float32 results:
/// Softmax as softmax_rows (float exp of the max-subtracted value, double sum); LogSoftmax
/// (x - max) - log(sum), the sum and the difference in double; LayerNormalization with the mean
/// and the (biased) variance in double. Throws Error(kInternal) when cols != step.features().
void apply_host_step(std::span<float> y, uint32_t cols, const HostStep& step);

/// `op` (kSoftmax: softmax_rows) and then every step, in place: what the host does after the device.
void apply_host_ops(std::span<float> y, uint32_t cols, HostOp op, std::span<const HostStep> steps);

/// The rows the device reads: x ([rows, cols]) after the input host steps (a copy of x when there
/// are none).
std::vector<float> apply_input_steps(std::span<const HostStep> steps, std::span<const float> x, uint32_t cols);

/// The outputs of a model with several (net.outputs, in order) from the last layer's rows y
/// [rows, output_features()]: each output's columns, then its host operators; [rows, cols] each.
/// Empty when net.outputs is.
std::vector<std::vector<float>> split_outputs(const FloatNetwork& net, std::span<const float> y, uint64_t rows);

/// The float reference forward pass: x is [batch, input_features] row-major; returns
/// [batch, output_features]. Accumulates in double, stores float32 after every layer.
/// Throws Error(kInvalidArgument) when x.size() != batch * input_features.
std::vector<float> forward_float(const FloatNetwork& net, std::span<const float> x, uint64_t batch);

/// Like forward_float, but returns every layer's float output (after ReLU, before the host op):
/// result[i] is [batch, layers[i].n]. The quantizer calibrates activation scales from these.
std::vector<std::vector<float>> forward_float_layers(const FloatNetwork& net, std::span<const float> x,
                                                     uint64_t batch);

/// Index of the largest element of each row (the predicted class), [batch].
std::vector<uint32_t> argmax_rows(std::span<const float> y, uint32_t cols);

}  // namespace tpuw::nn
