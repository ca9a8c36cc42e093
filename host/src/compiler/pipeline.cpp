// The pass pipeline (tpuw/compiler/passes.h; docs/compiler.md lists it with each pass's guarantee).
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/channel_moves.h"
#include "tpuw/compiler/conv.h"
#include "tpuw/compiler/feature_maps.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {

Graph optimize(Graph g) {
  verify(g);
  legalize(g);
  // Shape inference and folding feed each other (Shape needs its input's shape, Reshape needs its
  // folded shape input); every round that folds removes at least one node, so this ends.
  for (;;) {
    infer_shapes(g, /*strict=*/false);
    if (!fold_constants(g)) break;
    verify(g);
  }
  remove_identities(g);
  verify(g);
  remove_dead_code(g);
  verify(g);
  fuse_gelu(g);  // PyTorch's Erf form of GELU, before fuse_dense takes its Add for a bias
  infer_shapes(g, /*strict=*/true);
  lower_channel_moves(g);  // ReduceMean over H, W; channel Slice and shuffle: CNN layers (no-op elsewhere)
  fuse_dense(g);
  fold_conv_batchnorm(g);  // before lower_feature_maps: a CNN's BatchNormalization stays per channel
  lower_feature_maps(g);
  fuse_activations(g);  // Sigmoid, Tanh, ... into the Dense before them (int8 lookup tables)
  fold_pads(g);
  fuse_conv_relu(g);
  verify(g);
  remove_dead_code(g);
  verify(g);
  return g;
}

nn::FloatNetwork compile_float(Graph g) {
  g.batch_may_be_fixed = true;  // lower_to_float_network records it, tpuw run checks the rows
  Graph o = optimize(std::move(g));
  merge_graph_inputs(o);  // several inputs: one input row (the dense path only; CNNs and training refuse them)
  return lower_to_float_network(o);
}

}  // namespace tpuw::compiler
