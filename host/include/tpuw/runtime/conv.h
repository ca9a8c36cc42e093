// 2-D convolution (int8) on a TPU Worker device as an implicit GEMM: the patches are formed by
// address generation over the unified buffer, never in host memory (docs/network_compiler.md,
// "Convolution").
//
//   y[b][o][oy][ox] = requantize(sum_{c,dy,dx} x[b][c][oy*sh + dy*dh - pt][ox*sw + dx*dw - pl]
//                                                * w[o][c][dy][dx], bias_q[o], mult[o], shift[o], relu)
//
// (x outside the image reads 0: the pads.) The arithmetic is exactly the ACTIVATE instruction's
// (nn::requantize), so the device output equals nn::conv2d_int() bit for bit.
//
// On the device, one UB row is one pixel of ArrayN channels (NHWC, channel blocks of ArrayN like a
// GEMM's K blocks). The host image of the input is the padded image, split into stride phases
// (pixel (Y, X) of the padded image goes to phase (Y % sh, X % sw) at (Y / sh, X / sw)), so that
// every kernel tap (dy, dx) reads one contiguous UB row range of one phase, shifted by
// (dy*dh / sh) * Wq + (dx*dw / sw): one MATMUL per (tap, channel block, image), all taps of an
// output channel block accumulating into the same ACC rows. Output row oy*Wq + ox of an image is
// pixel (oy, ox) when ox < Wo; the rest (ox >= Wo) are the wasted rows of the padded border.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpuw/asm.h"
#include "tpuw/device.h"
#include "tpuw/device_configs.h"
#include "tpuw/nn/qconv.h"
#include "tpuw/runtime/network.h"

namespace tpuw::runtime {

using nn::ConvGeometry;
using nn::QConv2d;

/// How a convolution is laid out on one device configuration.
struct ConvPlan {
  ConvGeometry geom;
  uint64_t batch = 0;
  uint32_t array_n = 0;
  uint32_t beat = 0;               // DMA beat bytes
  uint64_t hp = 0, wp = 0;         // padded input
  uint64_t hq = 0, wq = 0;         // one stride phase of the padded input
  uint64_t phases = 0;             // stride_h * stride_w
  uint64_t ho = 0, wo = 0;         // output
  uint64_t wo_stored = 0;          // output pixels per row in host memory (wo rounded to the DMA)
  uint64_t c_blocks = 0;           // ceil(in_c / N)
  uint64_t o_blocks = 0;           // ceil(out_c / N)
  uint64_t taps = 0;               // kernel_h * kernel_w
  uint64_t img_rows = 0;           // UB rows of one image's channel block (phases, pads, slack)
  uint64_t acc_rows = 0;           // rows of one image's MATMUL: (ho - 1) * wq + wo_stored
  uint64_t buffers = 2;            // 2: input, ACC strip and staging double-buffered; 1: single
  uint64_t images_per_tile = 0;    // images on chip at once (per buffer)
  uint64_t tiles = 0;              // ceil(batch / images_per_tile)
  uint64_t weight_tiles = 0;       // o_blocks * taps * c_blocks N x N tiles
  uint32_t w_slots = 0;            // WB tile slots
  bool weights_resident = false;   // every weight tile stays in the WB for the whole run
  uint64_t pinned_tiles = 0;       // tiles loaded once (all when resident); the rest once per tile
  std::vector<uint64_t> tap_offset;  // per tap (dy * kernel_w + dx): UB row offset in an image
  /// Requantization groups beyond the layer's own (QConv2d::pixel_group): each has its (bias, mult,
  /// shift) rows per output block after the layer's, and the ACTIVATE of a strip is split into runs
  /// of rows that share a group (activate_runs). set_pixel_groups fills both.
  uint64_t extra_groups = 0;
  std::vector<uint16_t> pixel_group;  // [ho * wo]; empty: every pixel uses group 0
  /// ACC rows of the layer's lookup table after each (bias, mult, shift) triple (QConv2d::lut;
  /// 0: none, else ceil(64 / N)); its ACTIVATEs set `lut`.
  uint64_t lut_rows = 0;
  uint64_t param_rows_per_block() const { return 3 + lut_rows; }

  uint64_t in_bytes() const { return batch * c_blocks * img_rows * array_n; }
  uint64_t w_bytes() const { return weight_tiles * array_n * array_n; }
  /// Weight bytes the program loads: the pinned tiles once, the others once per tile of images.
  uint64_t w_bytes_moved() const;
  uint64_t param_bytes() const { return (1 + extra_groups) * o_blocks * param_rows_per_block() * 4 * uint64_t{array_n}; }
  uint64_t out_bytes() const { return batch * o_blocks * ho * wo_stored * array_n; }
  /// MXU rows streamed (every MATMUL row, wasted border rows included).
  uint64_t mxu_rows() const { return batch * executed_tiles() * acc_rows; }
  /// Weight tiles that are all zero (set by mark_zero_tiles; empty: none). Their LOADW and
  /// MATMULs are skipped (an average pool's off-diagonal channel blocks), except the first tile of
  /// an output block whose tiles are all zero (it still clears the ACC).
  std::vector<uint8_t> zero_tile;
  bool skipped(uint64_t tile) const;
  uint64_t executed_tiles() const;
  /// Multiply-accumulates of the convolution itself.
  uint64_t macs() const;
  /// Input, weights and output once (int8), the bias as int32: the least any device can move.
  uint64_t min_bytes() const;
};

/// The multiply-accumulates a convolution layer's math needs for `batch` images: output pixels x
/// taps x the (output, input) channel pairs whose kernel has a nonzero weight. A dense Conv counts
/// every pair; a grouped or depthwise Conv, an average pool (channel-diagonal weights) and a
/// residual Add or Concat (0/1 selection weights) count only the pairs they multiply, which the
/// device's skipped zero weight tiles never exceed, so utilization = macs / (N^2 x cycles) <= 1
/// (issue 25 item 7; before, these layers counted in_c x out_c pairs and reported up to 2.66).
/// `w` is [out_c][in_c][kernel_h][kernel_w] (ONNX order).
template <typename T>
uint64_t conv_weight_macs(const nn::ConvGeometry& gm, uint64_t batch, std::span<const T> w) {
  const uint64_t taps = uint64_t{gm.kernel_h} * gm.kernel_w;
  if (taps == 0 || w.size() != uint64_t{gm.out_c} * gm.in_c * taps) return 0;
  uint64_t pairs = 0;
  for (uint64_t pair = 0; pair < uint64_t{gm.out_c} * gm.in_c; ++pair) {
    for (uint64_t t = 0; t < taps; ++t) {
      if (w[pair * taps + t] != T{0}) {
        ++pairs;
        break;
      }
    }
  }
  return batch * gm.out_h() * gm.out_w() * taps * pairs;
}

/// Chooses the layout. Throws Error(kInvalidArgument) for a bad geometry or batch 0,
/// Error(kUnsupported) when one image does not fit the UB / ACC (spatial tiling is not done).
/// `extra_groups`: requantization groups beyond the layer's own; `lut`: the layer has a lookup
/// table (both need ACC rows for their params).
ConvPlan plan_conv(const DeviceParams& params, const ConvGeometry& geom, uint64_t batch, uint64_t extra_groups = 0,
                   bool lut = false);

/// Copies a layer's per-pixel requantization groups into the plan (planned with the same
/// extra_groups). Error(kInvalidArgument) when they disagree.
void set_pixel_groups(ConvPlan& plan, const QConv2d& layer);

/// One ACTIVATE of a strip: ACC rows [row, row + rows) of the strip's images (image i's rows start
/// at i * acc_rows) with the params of `group`. Rows that are never stored (the wasted border
/// columns) join whichever run they sit in, so a layer without groups has one run per strip and an
/// average pool with a border of smaller divisors about one per image row that has border pixels
/// (plus one per border pixel run).
struct ActivateRun {
  uint64_t row = 0, rows = 0;
  uint16_t group = 0;
};
std::vector<ActivateRun> activate_runs(const ConvPlan& plan, uint64_t images);

/// The host images (x is NCHW int8 [batch][in_c][in_h][in_w]; y likewise [batch][out_c][ho][wo]).
/// `pad` fills every position that is not an input pixel (0; a max pool's -128).
std::vector<int8_t> pack_conv_input(const ConvPlan& plan, std::span<const int8_t> x, int8_t pad = 0);
std::vector<int8_t> pack_conv_weights(const ConvPlan& plan, std::span<const int8_t> w_q);
/// Fills plan.zero_tile from the packed weights.
void mark_zero_tiles(ConvPlan& plan, std::span<const int8_t> packed_weights);
std::vector<int32_t> pack_conv_params(const ConvPlan& plan, const QConv2d& layer);
std::vector<int8_t> unpack_conv_output(const ConvPlan& plan, std::span<const int8_t> packed);

/// A compiled program (without the FENCE: the driver appends it).
struct ConvProgram {
  std::vector<isa::Word> code;
  std::vector<uint64_t> fold_index;
  uint64_t loads = 0, loadws = 0, matmuls = 0, stores = 0;
  uint64_t activates = 0;  // one per strip, more with requantization groups (activate_runs)
};
ConvProgram compile_conv(const ConvPlan& plan, bool relu, uint64_t in_addr, uint64_t w_addr, uint64_t param_addr,
                         uint64_t out_addr);

struct ConvRunResult {
  std::vector<int8_t> y;        // NCHW [batch][out_c][ho][wo]
  ConvPlan plan;
  PerfCounters perf;
  uint64_t cycles = 0;          // PERF_CYCLES
  double utilization = 0;       // macs / (N^2 * cycles)
  double row_efficiency = 0;    // batch*ho*wo*taps*c_blocks*o_blocks / mxu_rows(): 1 - border waste
  uint64_t min_bytes = 0;       // plan.min_bytes()
  uint64_t moved_bytes = 0;     // PERF_RD_BYTES + PERF_WR_BYTES (fetch and fence included)
  uint64_t instructions = 0;    // including the FENCE
  double wall_s = 0;
  std::vector<int64_t> indices; // a max pool's Indices (QConv2d::indices): NCHW int64, ONNX's
  bool host = false;            // a max pool run on the host (nn::conv2d_int): no device program,
                                // plan has only geom and batch, every counter 0
};

/// Runs the layer on `device`. Throws Error(kInvalidArgument) for a layer whose arrays do not match
/// its geometry or an input of the wrong size, and whatever plan_conv and the driver throw.
ConvRunResult run_conv2d(Device& device, const QConv2d& layer, std::span<const int8_t> x, uint64_t batch);

/// A whole quantized CNN (nn::QCnn, from compiler::compile_quantized_cnn): every convolution is
/// one device program (run_conv2d), the dense head one more (run_network); the int8 activations
/// pass through host memory between them (NCHW, flattened in that order for the head). A max pool
/// (QConv2d::max_pool) is a device program too (run_max_pool, tpuw/runtime/maxpool.h); on a device
/// without the VECTOR unit (FEATURES.BF16) it runs on the host on those int8 activations
/// (ConvRunResult::host): exact, no device bytes.
/// Without a head (QCnn::has_head() false) the output is the last layer's int8 map (NCHW) widened
/// to int32, and `head` stays empty.
struct CnnRunResult {
  std::vector<int32_t> output_i32;     // [batch][n_last]: acc + bias_q of the last layer (or the map)
  std::vector<ConvRunResult> convs;    // per convolution (its y is the next layer's input)
  NetworkRunResult head;
  uint64_t cycles = 0;                 // sum of the programs' PERF_CYCLES
  uint64_t macs = 0;                   // convolutions + dense layers
  double utilization = 0;              // macs / (N^2 * cycles)
  uint64_t moved_bytes = 0;            // sum of PERF_RD_BYTES + PERF_WR_BYTES
  uint64_t min_bytes = 0;              // sum of the layers' minimums (each layer's input, weights, output once)
};

/// Runs `net` on `device`: x_q is [batch][in_c][in_h][in_w] int8 (quantized with net.input_scale);
/// with several graph inputs (QCnn::inputs) [batch][input_row()], every input's part side by side
/// (nn::quantize_cnn_input). Each image input is the layers' host-memory input as a single one is;
/// a vector input joins the head's rows (nn::cnn_head_input).
CnnRunResult run_cnn(Device& device, const nn::QCnn& net, std::span<const int8_t> x_q, uint64_t batch);

}  // namespace tpuw::runtime
