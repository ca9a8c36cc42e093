// The quantized network: what the model importer and quantizer (tpuw/nn/onnx_import.h,
// tpuw/nn/quantize.h) hand to the network compiler (tpuw/runtime/network.h).
//
// A network is a chain of dense layers y = act(x . W + b) running on the device, followed by
// optional host-side operators (softmax). Everything on the device is integer; the arithmetic of
// one layer is exactly the ACTIVATE instruction of docs/isa.md:
//
//   acc[j]  = sum_k x_q[k] * w_q[k][j]                         (int8 x int8 -> int32, MATMUL)
//   y_q[j]  = sat8( relu?( round((acc[j] + bias_q[j]) * mult[j] / 2^shift[j]) ) )   (ACTIVATE)
//   y_q[j]  = lut[y_q[j] + 128]           (layers with a lookup table: ACTIVATE `lut`, ISA 1.2)
//
// For the last layer (`int32_output`), the device stores acc[j] + bias_q[j] as int32 and the host
// dequantizes: y[j] = (acc[j] + bias_q[j]) * out_scale[j] as float32.
//
// Quantization rules (docs/quantization.md says why):
//   weights      symmetric int8 per output column j: w_scale[j] = max|W[:,j]| / 127
//   activations  symmetric int8 per tensor: in_scale = max|x| / 127 over calibration data
//   bias         int32, bias_q[j] = round(b[j] / (in_scale * w_scale[j]))
//   requant      mult[j] / 2^shift[j] ~= in_scale * w_scale[j] / out_scale (mult in [2^30, 2^31))
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpuw::nn {

/// One dense layer, quantized. Sizes: w_q has k*n entries row-major [k][n].
struct QLayer {
  std::string name;              // ONNX node name(s), for reports and errors
  uint32_t k = 0;                // input features
  uint32_t n = 0;                // output features
  std::vector<int8_t> w_q;       // [k][n]
  std::vector<int32_t> bias_q;   // [n] (zeros when the model has no bias)
  bool relu = false;             // ReLU fused after the layer
  bool int32_output = false;     // last device layer: int32 out, dequantized on the host
  std::vector<int32_t> mult;     // [n] requantization multiplier (unused when int32_output)
  std::vector<uint8_t> shift;    // [n] requantization shift 0..63 (unused when int32_output)
  std::vector<float> out_scale;  // [n] int32_output: float per unit of acc; otherwise 1 entry:
                                 // the scale of the int8 output tensor
  std::vector<int8_t> lut;       // empty, or 256 entries: the activation function as a table
                                 // (entry q + 128 replaces requantized result q; not with
                                 // int32_output). The requantization then targets the table's
                                 // input scale, out_scale is the table's output scale.
};

/// Host-side operators after the device layers (fp32, row by row; docs/network_compiler.md).
enum class HostOp { kNone, kSoftmax, kLogSoftmax, kLayerNorm };

/// "softmax", "logsoftmax", "layernorm" ("none" for kNone).
const char* host_op_name(HostOp op);

/// One host operator of the model (Softmax, LogSoftmax, LayerNormalization), applied in fp32 to
/// the output rows after the device program. A row's features are viewed as [outer][len][inner]:
/// Softmax and LogSoftmax normalize over `len` for every (outer, inner) pair (ONNX opset 13's one
/// axis; opset < 13's flattened axes have inner = 1); LayerNormalization normalizes each
/// contiguous block of `len` features (inner = 1) and applies scale[len] and bias[len].
struct HostStep {
  HostOp op = HostOp::kSoftmax;
  std::string name;                // "node (Op)": reports and errors
  uint32_t outer = 1, len = 0, inner = 1;
  float epsilon = 1e-5f;           // LayerNormalization
  std::vector<float> scale, bias;  // LayerNormalization: [len] (bias: zeros when the model has none)

  uint32_t features() const { return outer * len * inner; }
};

struct QNetwork {
  uint32_t input_features = 0;   // k of the first layer
  float input_scale = 1.0f;      // float input x -> x_q = sat8(round(x / input_scale))
  // Several graph inputs (FloatNetwork::input_parts): the input row is their features side by side,
  // part p (input_part_features[p] features) quantized with its own input_part_scales[p]; the
  // first layer's weight row blocks are quantized to one product scale per column (docs/
  // network_compiler.md "Several graph inputs"). Empty for one input (input_scale).
  std::vector<uint32_t> input_part_features;
  std::vector<float> input_part_scales;
  std::vector<HostStep> input_steps;  // FloatNetwork::input_steps: fp32, before quantize_input
  std::vector<QLayer> layers;    // in order; layers[i].k == layers[i-1].n
  HostOp host_op = HostOp::kNone;      // a softmax over every output feature (the CNN head's form)
  std::vector<HostStep> host_steps;    // then these, in order (the MLP compiler's form)
};

}  // namespace tpuw::nn
