// A CNN for bf16 inference (`tpuw run --precision bf16`, docs/network_compiler.md "bf16 CNNs"):
// the same chain of layers the int8 CNN compiler accepts (tpuw/compiler/conv.h), without
// calibration or quantization: float weights and biases, rounded to bf16 (weights) by the runtime
// (tpuw/runtime/conv_bf16.h), which defines the numerics and runs every Conv and average pool as
// an implicit GEMM in bf16 on the device.
//
//   input [batch, C, H, W] -> Conv (+Relu) / AveragePool / GlobalAveragePool / MaxPool (Pad folded)
//   (each optionally followed by one activation function: Sigmoid, Tanh, Clip, LeakyRelu, ...)
//   ... -> Flatten / Reshape to [batch, features] -> Gemm/MatMul [+Add] [+Relu] [+function] ... [Softmax]
//   (an AveragePool whose divisor varies by pixel and a Pad with a constant: pixel groups, below)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qconv.h"

namespace tpuw::compiler {

/// One convolution-like layer of a bf16 CNN.
struct Bf16ConvLayer {
  enum class Kind { kConv, kAvgPool, kMaxPool };
  std::string name;
  Kind kind = Kind::kConv;
  nn::ConvGeometry geom;
  /// kConv: the dense weights [out_c][in_c][kernel_h][kernel_w] (a grouped / depthwise Conv has
  /// zeros outside its groups). kAvgPool: 1/(kernel_h*kernel_w) on the channel diagonal of every
  /// tap (1.0 when the divisor varies by pixel: pixel_group), zeros elsewhere. kMaxPool: empty. float32 as in the model (the runtime rounds to bf16).
  std::vector<float> w;
  std::vector<float> bias;  // [out_c] fp32 (zeros for a Conv without bias and for pools); empty for kMaxPool
  bool relu = false;        // a fused Relu (kConv only)
  /// Where the input comes from: empty = the previous layer (the graph input for the first);
  /// otherwise the channel concatenation of these layers' outputs (-1 = the graph input), in
  /// order: a residual Add ([I; I] weights) or a Concat (identity weights), a 1x1 kConv.
  std::vector<int32_t> sources;
  nn::Activation act;       // a function after the layer (Sigmoid, Tanh, Clip, ...): a VECTOR pass
                            // on the device (tpuw/runtime/vector_functions.h), after bias and ReLU
  /// Per-pixel groups (an average pool whose divisor varies by pixel, a Pad's constant border;
  /// docs/numerics.md "Convolutions and pools in bf16"): empty = none. Otherwise the output pixel
  /// (oy, ox) belongs to group pixel_group[oy * out_w + ox]; its fp32 sum is multiplied by
  /// group_scale[group] (one fp32 multiply, a VECTOR SCALE on the device; none when the scale is 1)
  /// and ACTIVATE adds group_bias[group * out_c + o] in place of bias[o].
  std::vector<uint16_t> pixel_group;
  std::vector<float> group_scale;  // [groups]
  std::vector<float> group_bias;   // [groups * out_c]
  size_t groups() const { return group_scale.size(); }
  /// kMaxPool whose ONNX Indices is a graph output (Bf16Cnn::indices_outputs): computed on the
  /// device beside the values (runtime/maxpool_indices.h); column-major for storage_order=1.
  bool indices = false;
  bool indices_column_major = false;

  /// Throws Error(kInvalidArgument) naming the layer when an array does not match the geometry.
  void check() const;
};

/// A bf16 CNN: the layers, then a flatten (NCHW order) and the dense head in float. Without dense
/// layers (head.layers empty) the model's output is the last layer's feature map itself, NCHW,
/// flattened per row (head.input_features values; head.host_op may still be a softmax).
struct Bf16Cnn {
  uint32_t in_c = 0, in_h = 0, in_w = 0;  // the graph input [batch, in_c, in_h, in_w]
  std::vector<Bf16ConvLayer> convs;
  nn::FloatNetwork head;  // input_features = the last layer's out_c * out_h * out_w
  /// Graph outputs beyond the network's own: max pools' Indices (int64 [N, C, H, W]), in graph order.
  struct IndicesOutput {
    std::string name;
    int32_t layer = -1;
  };
  std::vector<IndicesOutput> indices_outputs;
  std::vector<int64_t> output_dims;  // the graph output's shape without the batch ([classes], [C, H, W], ...)
  /// Several graph inputs, in graph order (empty: one image input, in_c/in_h/in_w), as the int8
  /// CNN's (nn::QCnn::inputs; scale unused): the input row per image is every input's values side
  /// by side; a layer reads image input k as source -1 - k; in_c/in_h/in_w repeat the first image's.
  std::vector<nn::CnnGraphInput> inputs;
  /// The dense head's row when vector inputs join it (nn::QCnn::head_sources): convs.size() - 1 for
  /// the last map, -1 - k for vector input k, in row order. Empty: the last map alone.
  std::vector<int32_t> head_sources;
  /// Values per image of the input row, and input k's offset and features in it.
  uint64_t input_row() const;
  uint64_t input_offset(size_t k) const;
  uint64_t input_features(size_t k) const;

  /// Throws Error(kInvalidArgument) when the layers do not chain.
  void check() const;
};

/// A CNN straight from its imported graph: optimize(), then the chain of compile_quantized_cnn
/// (the same nodes accepted and the same errors, naming the node, for anything else), where the
/// Flatten and the dense head are optional: a model may end in a convolution or pooling layer.
Bf16Cnn compile_bf16_cnn(Graph g);

}  // namespace tpuw::compiler
