// Channel moves of a CNN as convolutions (issue 25: torchvision's shufflenet and friends).
//
// Layout operators on a feature map [batch, C, H, W] that only select or reorder channels, and the
// spatial mean, become the layers the CNN compilers already run on the device (int8 and bf16 alike):
//
//   ReduceMean over axes {2, 3} (x.mean([2, 3]), keepdims 1)  -> GlobalAveragePool
//                                 (keepdims 0)                -> GlobalAveragePool + Flatten
//   Slice along axis 1 (x.chunk(2, dim=1), x[:, a:b])         -> 1x1 Conv, weight W[o][c] = 1 where
//                                                                c is output channel o's source
//   the channel shuffle Reshape [B, C, H, W] -> [B, g, C/g, H, W] -> Transpose [0, 2, 1, 3, 4]
//                   -> Reshape [B, C, H, W]                     -> 1x1 Conv, W a permutation
//
// A selection weight holds only 0 and 1: exact in bf16 and in int8 (per-channel weight scale
// 1/127, w_q = 127), so the layer's only error is the usual output requantization; the device
// skips its all-zero weight tiles. Each move costs one 1x1 layer pass over its map, named in the
// report by the nodes it replaced. (Fusing a selection into the next Conv's weights, or writing a
// producer's output straight into its slice of the consumer's buffer, would save the pass; not done.)
// Slices along other axes and other Reshape/Transpose chains are left alone for the passes after
// this one to run or report.
#pragma once

#include <cstddef>

#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

/// Rewrites the moves above (strict shapes inferred, before fuse_dense). Returns how many it rewrote.
size_t lower_channel_moves(Graph& g);

}  // namespace tpuw::compiler
