// The training pass for CNNs (issue 13, docs/training.md "Training CNNs"): a chain of Conv (+Relu),
// MaxPool, AveragePool, GlobalAveragePool, residual Adds (ResNet blocks), then Flatten/Reshape and Gemm / MatMul(+Add) (+Relu)
// layers, with an optional trailing Softmax (the loss applies it). The layers are compile_bf16_cnn's
// (the bf16 inference path's, so training and `tpuw run --precision bf16` run the same forward);
// this pass adds the initializer names and stored layouts the trainer reports its parameters under,
// so the trained ONNX file keeps the model's names.
#pragma once

#include <string>
#include <vector>

#include "tpuw/compiler/conv_bf16.h"
#include "tpuw/compiler/ir.h"

namespace tpuw::compiler {

/// A residual connection (ResNet's basic block: Conv-Relu-Conv, Add of the block input, Relu):
/// the output of conv-part layer `to` becomes relu?(conv_to(...) + acts[from]), acts[from] being
/// the input of layer `from` (from <= to; the same [C, H, W] as layer to's output). Layer `to` itself
/// has no ReLU (the ReLU after the Add is `relu`).
struct CnnResidual {
  size_t from = 0, to = 0;
  bool relu = false;
};

struct CnnTrainModel {
  Bf16Cnn net;
  /// The residual Adds, in graph order (at most one per layer `to`).
  std::vector<CnnResidual> residuals;
  /// Per net.convs entry: the Conv's weight / bias initializer names ("" for a pool, and for the
  /// bias of a Conv without one: it stays zero and is not trained).
  std::vector<std::string> conv_weight, conv_bias;
  /// Per net.head.layers entry: weight / bias initializer names ("" for no bias) and whether the
  /// weight is stored [out, in] (Gemm transB = 1, PyTorch's Linear) rather than [in, out].
  std::vector<std::string> dense_weight, dense_bias;
  std::vector<uint8_t> dense_out_in;

  int64_t classes() const;
};

/// Throws Error(kUnsupported) naming the node for anything else than the chain above (a grouped
/// Conv, a BatchNormalization — fold it before exporting for training —, an elementwise op, a
/// branch, a Gemm with transA / alpha / beta), and whatever compile_bf16_cnn throws. A residual Add
/// of two activations is accepted when one input is a Conv's output (no ReLU between) and the other
/// the input of an earlier Conv of the chain (CnnResidual).
CnnTrainModel build_cnn_training_model(Graph g);

/// True when the graph has a Conv node (`tpuw train` then takes the CNN path).
bool has_conv(const Graph& g);

}  // namespace tpuw::compiler
