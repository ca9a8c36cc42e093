// Average pools whose divisor depends on the output pixel (count_include_pad=0 with pads,
// ceil_mode's partial last windows) and Pads with a constant other than 0: the per-pixel
// requantization groups of nn::QConv2d (pixel_group, group_*), which the device runs as one
// ACTIVATE per run of ACC rows that share a group (runtime/conv.h; docs/network_compiler.md,
// "Average pools with varying divisors").
#pragma once

#include <cstdint>
#include <vector>

#include "tpuw/compiler/ir.h"
#include "tpuw/nn/qconv.h"

namespace tpuw::compiler::detail {

/// How many window positions an AveragePool divides by, per output row (rows) and column (cols);
/// the divisor of pixel (oy, ox) is rows[oy] * cols[ox]. ONNX and PyTorch: with
/// count_include_pad=1 the positions inside the image or its declared pads count (not the extra
/// end padding that ceil_mode adds for a partial last window), with count_include_pad=0 only those
/// inside the image. `geo` is conv_geometry's (pads resolved, ceil_mode's extension included).
/// GlobalAveragePool: the whole image. A window with no position to count is Error(kUnsupported).
struct PoolCounts {
  std::vector<uint32_t> rows, cols;
  bool uniform(uint64_t taps) const;
};
PoolCounts avgpool_counts(const Graph& g, const Node& n, const nn::ConvGeometry& geo);

/// The constant a Pad-turned-1x1-AveragePool writes into its border (attribute "pad_value", set by
/// fold_pads for a Pad whose constant is not 0); 0 when absent.
float pool_pad_value(const Graph& g, const Node& n);

/// The constant of a Pad node (attribute 'value' of opset 2, or input 2 'constant_value'; 0 when
/// absent). Error(kUnsupported) when the input is not a constant.
double pad_constant(const Graph& g, const Node& n);

/// The float divisor of pixel (oy, ox) and whether the pixel is in a pad_value border: what
/// conv_float uses for an AveragePool.
double avgpool_divisor(const PoolCounts& c, uint64_t oy, uint64_t ox);

/// Quantization of an average pool's varying requantization: for every divisor other than the
/// full window (group 0, already in q.bias_q/mult/shift) a group whose multiplier is
/// in_scale / (divisor * out_scale); for a pad_value border (1x1 pool) a group whose bias is
/// round(pad_value / in_scale), so the border pixels (acc = 0) come out as pad_value requantized.
/// Leaves q unchanged when every pixel uses group 0.
void add_pool_groups(const Graph& g, const Node& n, nn::QConv2d& q, float in_scale, float out_scale);

}  // namespace tpuw::compiler::detail
