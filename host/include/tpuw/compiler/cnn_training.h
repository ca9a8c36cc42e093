// The training pass for CNNs (issue 13, docs/training.md "Training CNNs"): a chain of Conv (+Relu),
// MaxPool, AveragePool, GlobalAveragePool, then Flatten/Reshape and Gemm / MatMul(+Add) (+Relu)
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

struct CnnTrainModel {
  Bf16Cnn net;
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
/// branch, a Gemm with transA / alpha / beta), and whatever compile_bf16_cnn throws.
CnnTrainModel build_cnn_training_model(Graph g);

/// True when the graph has a Conv node (`tpuw train` then takes the CNN path).
bool has_conv(const Graph& g);

}  // namespace tpuw::compiler
