// ONNX Conv in the graph compiler: attribute rules (legalize), shape inference, Relu fusion, the
// float reference (interpret_float) and int8 quantization to nn::QConv2d (tpuw/nn/qconv.h), which
// the device runs as an implicit GEMM (tpuw/runtime/conv.h; docs/network_compiler.md).
//
// MaxPool (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode as PyTorch computes it: the
// partial last window becomes end padding, which a max skips) shares the geometry rules; its Indices
// output (storage_order 0 or 1) runs on the device when it is a graph output (QConv2d::indices,
// tpuw/runtime/maxpool_indices.h); an Indices another node reads is refused.
//
// Supported: 2-D Conv (x [batch, C, H, W], constant weight [O, C, KH, KW], optional constant bias
// [O]), any kernel size, strides, dilations, explicit pads (asymmetric too) or auto_pad
// (NOTSET, VALID, SAME_UPPER, SAME_LOWER), any group (grouped and depthwise convolutions run as
// ordinary ones with zeros outside the groups; the device skips all-zero weight tiles). 1-D and
// 3-D convolutions are refused naming the node and the attribute.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <functional>
#include <vector>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/float_network.h"
#include "tpuw/nn/qconv.h"

namespace tpuw::compiler {

/// Legalize's Conv rule: attribute types and values that need no shapes (group, lengths of
/// kernel_shape / strides / dilations / pads, positive strides and dilations, non-negative pads,
/// auto_pad's value, auto_pad together with pads). kBadFile for an invalid model, kUnsupported
/// for a valid one we do not run.
void check_conv_attributes(const Graph& g, const Node& n);

/// The geometry of a Conv node whose input and weight shapes are known: channels, kernel from the
/// weight (checked against kernel_shape), pads resolved from auto_pad. Error(kBadFile) for
/// mismatches (channels, kernel_shape, a dilated kernel larger than the padded input),
/// Error(kUnsupported) for an input that is not [batch, C, H, W] or a weight that is not a constant.
nn::ConvGeometry conv_geometry(const Graph& g, const Node& n);

/// The pads of a Pad node over an input of rank `rank` ([begin..., end...], 2*rank values), or
/// nullopt when its pads input is not a constant yet (strict: Error(kUnsupported)). Only mode
/// 'constant' with value 0 is accepted, on the spatial dimensions of [batch, C, H, W] (opset 2's
/// attribute form or opset 11's inputs; no axes input). Other Pads are Error(kUnsupported).
std::optional<std::vector<int64_t>> pad_amounts(const Graph& g, const Node& n, size_t rank, bool strict);

/// Folds every Pad into the Conv or AveragePool that is its only reader (their pads grow; an
/// AveragePool then needs count_include_pad=1 semantics, which explicit zero padding has). A Pad
/// that cannot be folded becomes a 1x1 AveragePool with its pads (the identity with a zero border;
/// its origin names the Pad).
void fold_pads(Graph& g);

/// BatchNormalization (inference, [batch, C, H, W], constant parameters) in a CNN, before
/// lower_feature_maps: right after a Conv (no ReLU, the Conv's output read only by it) it is folded
/// into the Conv, W'[o] = W[o] * s[o], b'[o] = b[o] * s[o] + t[o] with s = scale / sqrt(var + eps),
/// t = B - mean * s (float32, like the model's own tensors); otherwise, after a conv/pool layer (or
/// its Relu) or before one, it becomes a 1x1 depthwise Conv (group = C) with weight s and bias t,
/// its own layer. Other BatchNormalizations are left to lower_feature_maps. Returns how many it
/// rewrote.
size_t fold_conv_batchnorm(Graph& g);

/// Fusion: a Relu whose input is a Conv's (or AveragePool's / GlobalAveragePool's) output and its
/// only reader becomes its attribute relu = 1 (the device's ACTIVATE applies it). Returns the
/// number of Relus fused.
size_t fuse_conv_relu(Graph& g);

/// The float reference of a Conv node: x NCHW [batch, C, H, W] float32; weights and bias as
/// float32, double accumulation, ReLU (attribute relu) in double, float32 result NCHW.
std::vector<float> conv_float(const Graph& g, const Node& n, std::span<const float> x, uint64_t batch);

/// Int8 quantization of a Conv node (the rules of qnetwork.h, per output channel):
/// w_scale[o] = max|W[o]| / 127, w_q = sat(round(W / w_scale[o]), -127, 127),
/// bias_q[o] = sat32(round(b[o] / (in_scale * w_scale[o]))), mult[o] / 2^shift[o] ~=
/// in_scale * w_scale[o] / out_scale. Error(kUnsupported) naming the node for a non-finite weight
/// or a factor the device cannot express.
nn::QConv2d quantize_conv(const Graph& g, const Node& n, float in_scale, float out_scale);

/// Int8 quantization of a residual Add of two activations or a Concat of activations along the
/// channels (inputs [batch, C_k, H, W] with scales in_scales[k]) as a 1x1 convolution over the
/// channel concatenation [x_0; x_1; ...] (nn::QConv2d::sources): the int32 accumulate and the
/// usual requantization do the rescale on the device. Add: w = round(127 s_k / max s) on the
/// diagonal of block k, multiplier max s / (127 s_out) (the smaller input's weight is exact to
/// 0.5/w relative); Concat: weight 127 on the diagonal, multiplier s_k / (127 s_out) per channel
/// (exact up to the output rounding). `relu`: a Relu fused after it.
nn::QConv2d quantize_merge(const Graph& g, const Node& n, std::span<const float> in_scales, float out_scale, bool relu);

/// The graph inputs of a CNN (compile_quantized_cnn, compile_bf16_cnn): one image [batch, C, H, W],
/// or several inputs, each an image or a vector [batch, F] (a vector joins the dense head), at
/// least one an image. The float row per image is every input's values side by side in graph
/// order (offset[k]: input k's first value). Throws Error(kUnsupported) naming the input otherwise.
struct CnnInputs {
  uint64_t row = 0;
  std::vector<uint64_t> offset, features;
  std::vector<bool> image;
  /// The graph input index of v when it is a vector input, else -1.
  int vector_input(const Graph& g, ValueId v) const;
  /// Every image input k feeds a layer (`image_read(-1 - k)`) and every vector input joins the
  /// dense head (-1 - k in `head_sources`); Error(kUnsupported) naming the first input that does not.
  void check_used(const Graph& g, const std::function<bool(int32_t source)>& image_read,
                  std::span<const int32_t> head_sources) const;
};
CnnInputs cnn_inputs(const Graph& g);

/// A CNN straight from its imported graph: optimize(), then the chain input [batch, C, H, W] ->
/// Conv (+Relu) ... -> Flatten / Reshape to [batch, features] -> the dense head (Gemm/MatMul
/// [+Add] [+Relu] ... [Softmax]). Calibrated on `calib` ([rows, C*H*W] float) with
/// interpret_float: per-tensor activation scales max|x| / 127 (symmetric_scale), every Conv through
/// quantize_conv, the head through the quantize pass (its input scale is the last conv's output
/// scale); AveragePool / GlobalAveragePool run as convolutions with identity weights; a MaxPool
/// becomes a max-pool layer (nn::QConv2d::max_pool, the int8 max on the device: runtime::run_max_pool)
/// whose input takes its output's scale, so the layer before it is quantized straight to that scale
/// and the int8 max is exact. The model may also end in the last conv/pool layer (or a Flatten/Reshape of it) with no
/// dense head: the QCnn then has no head and its output is that layer's int8 map (its scale
/// calibrated on its float output). A layer may read the input or any earlier layer's output (a
/// branch); a residual Add of two layer outputs and a Concat of layer outputs along the channels
/// are layers of their own (quantize_merge) and a Relu after one fuses into it. Several graph
/// inputs (cnn_inputs; `calib` rows are then every input side by side): each image input is read by
/// layers as the one input is (QConv2d::sources -1 - k) with its own calibrated scale; a vector
/// input joins the head in a Concat with the Flatten's output along the features (QCnn::head_sources),
/// its scale and the map's calibrated per part and reconciled in the head's first layer (a product
/// scale per column, as for the dense path's inputs). Anything else is Error(kUnsupported) naming
/// the node or input.
nn::QCnn compile_quantized_cnn(Graph g, std::span<const float> calib, uint64_t rows);

/// Largest map of one image a Conv or pool may read (padded) or write: 2^24 values, 32x the unified
/// buffer of the largest device configuration (32768 rows of 16 lanes). Shape inference refuses a
/// layer above it from the shapes, before calibration or planning allocates anything for it.
constexpr int64_t kMaxMapElementsPerImage = int64_t{1} << 24;

}  // namespace tpuw::compiler
