// A quantized 2-D convolution layer (int8, per-output-channel requantization) and its bit-exact
// integer golden model: what the compiler's quantize step produces (tpuw/compiler/conv.h) and the
// device runs as an implicit GEMM (tpuw/runtime/conv.h).
//
//   acc[b][o][oy][ox] = sum_{c,dy,dx} x_q[b][c][oy*sh + dy*dh - pt][ox*sw + dx*dw - pl] * w_q[o][c][dy][dx]
//                       (x outside the image reads 0: the pads; int32 sums wrap like the ACC)
//   y_q[b][o][oy][ox] = requantize(acc, bias_q[o], mult[o], shift[o], relu)   (nn::requantize)
//
// Quantization rules as for a dense layer (qnetwork.h): w_scale[o] = max|W[o,:,:,:]| / 127,
// per-tensor activation scales, bias_q[o] = round(b[o] / (in_scale * w_scale[o])).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tpuw/nn/qnetwork.h"

namespace tpuw::nn {

/// The geometry of one 2-D convolution (the batch is a run-time argument). ONNX Conv's
/// attributes: kernel_shape, strides, dilations, pads = [top, left, bottom, right]; group = 1.
struct ConvGeometry {
  uint32_t in_c = 0, in_h = 0, in_w = 0;
  uint32_t out_c = 0;
  uint32_t kernel_h = 1, kernel_w = 1;
  uint32_t stride_h = 1, stride_w = 1;
  uint32_t dilation_h = 1, dilation_w = 1;
  uint32_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;

  /// floor((in + pads - dilation*(kernel-1) - 1) / stride) + 1 (ONNX's formula); 0 when the
  /// dilated kernel is larger than the padded input.
  uint32_t out_h() const;
  uint32_t out_w() const;
  /// Throws Error(kInvalidArgument) "WHERE: what" naming the bad field: a zero size, kernel,
  /// stride or dilation, a value above 65536, or a dilated kernel larger than the padded input.
  void check(const std::string& where) const;
};

struct QConv2d {
  std::string name;
  ConvGeometry geom;
  std::vector<int8_t> w_q;      // [out_c][in_c][kernel_h][kernel_w] (ONNX order)
  std::vector<int32_t> bias_q;  // [out_c]
  std::vector<int32_t> mult;    // [out_c]
  std::vector<uint8_t> shift;   // [out_c], 0..63
  bool relu = false;
  float out_scale = 1.0f;       // scale of the int8 output tensor (real = q * out_scale)
  /// A max pool (ONNX MaxPool) instead of a convolution: y = the max of the window's int8 inputs
  /// inside the image (pads are skipped; a window with none gives -128), then max(y, 0) if relu;
  /// in_c == out_c, the input's scale kept, w_q/bias_q/mult/shift empty. A device program
  /// (runtime::run_max_pool; on the host on a device without the VECTOR unit), exact because
  /// requantization is monotonic.
  bool max_pool = false;
  /// A max pool whose ONNX Indices output is wanted (a graph output): the int64 flattened index of
  /// each window's first maximum, computed on the device beside the values
  /// (runtime::run_max_pool_indices); column-major for storage_order=1.
  bool indices = false;
  bool indices_column_major = false;
  /// The layers whose int8 outputs this one reads, concatenated along the channels in this order
  /// (-1 - k: the network's image input k, QCnn::inputs; -1 for a network with one input); empty: the previous layer's output (the input for the first). A
  /// residual Add or a Concat of activations with different scales is a 1x1 convolution over the
  /// concatenation (compiler/conv.h); every source has this layer's in_h x in_w.
  std::vector<int32_t> sources;
  /// Requantization that varies by output pixel: an average pool whose divisor depends on the
  /// pixel (count_include_pad=0 with pads, ceil_mode's partial last windows) or a Pad's constant
  /// border. pixel_group[oy * out_w + ox] = 0 uses bias_q/mult/shift; k >= 1 uses group k's
  /// group_bias/group_mult/group_shift[(k - 1) * out_c + o]. Empty: every pixel uses group 0. The
  /// device splits the layer's ACTIVATE by group (runtime/conv.h, docs/network_compiler.md).
  std::vector<uint16_t> pixel_group;
  /// An activation function after the layer (Sigmoid, Tanh, HardSwish, ... : tpuw/nn/activation.h)
  /// as a 256-entry table applied after the requantization (and ReLU): y = lut[y + 128] (ACTIVATE
  /// `lut`, ISA 1.2). The requantization then targets the table's input scale; out_scale is the
  /// table's output scale. Empty: none.
  std::vector<int8_t> lut;
  std::vector<int32_t> group_bias, group_mult;
  std::vector<uint8_t> group_shift;
  /// The groups beyond group 0 (group_mult.size() / out_c).
  uint32_t extra_groups() const { return geom.out_c == 0 ? 0 : static_cast<uint32_t>(group_mult.size() / geom.out_c); }

  /// Throws Error(kInvalidArgument) naming the layer when an array does not match the geometry.
  void check() const;
};

/// One graph output of a CNN with several outputs (QCnn::outputs): the network's output (layer -1:
/// the head's, or the last layer's map without a head) or layer `layer`'s int8 map, NCHW
/// [batch][out_c][out_h][out_w], real = q * that layer's out_scale.
struct CnnOutput {
  std::string name;
  int32_t layer = -1;
  bool indices = false;  // the max pool `layer`'s Indices (int64, NCHW) instead of its map
};

/// One graph input of a CNN with several (QCnn::inputs): an image [batch, c, h, w] read by
/// convolution layers (QConv2d::sources -1 - k), or a vector [batch, c] (image false, h = w = 1)
/// that joins the dense head (QCnn::head_sources). Each has its own calibrated int8 scale.
struct CnnGraphInput {
  std::string name;
  uint32_t c = 0, h = 1, w = 1;
  bool image = true;
  float scale = 1.0f;  // x_q = sat8(round(x / scale))
  uint64_t features() const { return uint64_t{c} * h * w; }
};

/// A quantized CNN: convolution layers (each reads the previous one's int8 NCHW output), then a
/// flatten (NCHW order) and a dense head (QNetwork, whose input_scale is the last conv's out_scale
/// and whose input_features is its C*H*W). Without a head (head.layers empty) the model's output
/// is the last layer's int8 feature map, NCHW [batch][out_c][out_h][out_w], real = q * out_scale.
struct QCnn {
  uint32_t in_c = 0, in_h = 0, in_w = 0;  // the graph input [batch, in_c, in_h, in_w]
  float input_scale = 1.0f;              // x_q = sat8(round(x / input_scale))
  std::vector<QConv2d> convs;
  QNetwork head;
  /// The graph outputs in order when the model has several (empty: one, the network's output).
  std::vector<CnnOutput> outputs;
  /// Several graph inputs, in graph order (empty: one image input, in_c/in_h/in_w/input_scale).
  /// The network's input row per image is then every input's values side by side in this order
  /// (each image NCHW), each part quantized with its own scale (quantize_cnn_input); in_c/in_h/
  /// in_w/input_scale repeat the first image input's.
  std::vector<CnnGraphInput> inputs;
  /// The dense head's input row when a vector input joins it (a Concat along the features of the
  /// flattened last map and vector inputs): the parts in row order, convs.size() - 1 for the last
  /// layer's map (NCHW) and -1 - k for vector input k. Empty: the last map alone. The head's
  /// input_part_scales / input_part_features follow this order.
  std::vector<int32_t> head_sources;

  bool has_head() const { return !head.layers.empty(); }
  /// Output values per image: the head's last layer's width, or the last map's C*H*W.
  uint64_t output_features() const;
  /// The real output scale of a head-less CNN (the last layer's out_scale).
  float map_scale() const { return convs.empty() ? input_scale : convs.back().out_scale; }

  /// The sources of layer l with the default made explicit: {l - 1} (or {-1} for the first).
  std::vector<int32_t> sources_of(size_t l) const;
  /// The graph inputs (one made of in_c/in_h/in_w/input_scale when `inputs` is empty).
  size_t input_count() const { return inputs.empty() ? 1 : inputs.size(); }
  CnnGraphInput input(size_t k) const;
  /// Values per image of the network's input row (every input's features) and input k's offset in it.
  uint64_t input_row() const;
  uint64_t input_offset(size_t k) const;

  /// Throws Error(kInvalidArgument) when the layers do not chain (shapes, scales, sources that are
  /// not earlier layers).
  void check() const;
};

/// Columns [off, off + f) of each of `batch` rows of `row` values (one input's part of the rows).
template <typename T>
std::vector<T> row_columns(std::span<const T> x, uint64_t batch, uint64_t row, uint64_t off, uint64_t f) {
  std::vector<T> a(batch * f);
  for (uint64_t b = 0; b < batch; ++b) std::copy_n(x.data() + b * row + off, f, a.data() + b * f);
  return a;
}

/// The parts' rows side by side: row b is parts[0]'s row b, then parts[1]'s, ... (each part holds
/// `batch` rows of its own width).
template <typename T>
std::vector<T> rows_side_by_side(const std::vector<std::vector<T>>& parts, uint64_t batch) {
  std::vector<T> a;
  uint64_t row = 0;
  for (const std::vector<T>& p : parts) row += p.size() / batch;
  a.reserve(batch * row);
  for (uint64_t b = 0; b < batch; ++b) {
    for (const std::vector<T>& p : parts) {
      const uint64_t per = p.size() / batch;
      a.insert(a.end(), p.begin() + static_cast<std::ptrdiff_t>(b * per), p.begin() + static_cast<std::ptrdiff_t>((b + 1) * per));
    }
  }
  return a;
}

/// Input k's values of every image ([batch][features_k]) out of the network's input rows x.
std::vector<int8_t> cnn_input_part(const QCnn& net, size_t k, std::span<const int8_t> x, uint64_t batch);

/// The float input rows [batch][input_row()] quantized part by part with each input's scale.
std::vector<int8_t> quantize_cnn_input(const QCnn& net, std::span<const float> x);

/// The dense head's input [batch][head.input_features]: the last layer's map `last` (NCHW per
/// image) and, with head_sources, the vector inputs' parts of x side by side in their order.
std::vector<int8_t> cnn_head_input(const QCnn& net, std::span<const int8_t> x, const std::vector<int8_t>& last,
                                   uint64_t batch);

/// Layer l's input, NCHW [batch][in_c][in_h][in_w]: its sources' int8 maps (input k's part of the
/// input rows x for -1 - k, out(j) for layer j) concatenated along the channels, image by image.
std::vector<int8_t> cnn_layer_input(const QCnn& net, size_t l, std::span<const int8_t> x,
                                    const std::function<const std::vector<int8_t>&(size_t)>& out, uint64_t batch);

/// The bit-exact integer forward pass on the CPU: the convolutions (conv2d_int), then
/// forward_int_raw of the head: [batch, n_last] int32 (acc + bias_q of the last layer). Without a
/// head: the last layer's int8 map widened to int32, [batch, output_features()] (NCHW order).
std::vector<int32_t> forward_cnn_int_raw(const QCnn& net, std::span<const int8_t> x_q, uint64_t batch);

/// Every layer's int8 map (NCHW) from the same integer forward pass (what a CnnOutput of a hidden
/// layer holds).
std::vector<std::vector<int8_t>> forward_cnn_int_maps(const QCnn& net, std::span<const int8_t> x_q, uint64_t batch);

/// The integer convolution on the CPU: x_q NCHW [batch][in_c][in_h][in_w] int8 -> y_q NCHW int8.
/// Throws Error(kInvalidArgument) for a bad layer or an input of the wrong size.
std::vector<int8_t> conv2d_int(const QConv2d& layer, std::span<const int8_t> x_q, uint64_t batch);

}  // namespace tpuw::nn
