// The training pass for CNNs (tpuw/compiler/cnn_training.h).
#include "tpuw/compiler/cnn_training.h"

#include <fmt/format.h>

#include "pass_util.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/error.h"

namespace tpuw::compiler {

using detail::attr_float;
using detail::attr_int;
using detail::input;
using detail::output;

int64_t CnnTrainModel::classes() const {
  if (!net.head.layers.empty()) return net.head.layers.back().n;
  return static_cast<int64_t>(net.head.input_features);
}

bool has_conv(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (n.op == Op::kConv) return true;
  }
  return false;
}

CnnTrainModel build_cnn_training_model(Graph g) {
  // The names, from the graph before fusion (the passes build_training_model runs first).
  Graph raw = g;
  verify(raw);
  legalize(raw);
  for (;;) {
    infer_shapes(raw, /*strict=*/false);
    if (!fold_constants(raw)) break;
    verify(raw);
  }
  remove_identities(raw);
  remove_dead_code(raw);
  verify(raw);
  infer_shapes(raw, /*strict=*/true);
  CnnTrainModel m;
  std::vector<std::string> convs;
  const auto consumers = raw.consumers();
  for (const Node& n : raw.nodes) {
    switch (n.op) {
      case Op::kConv: {
        if (attr_int(raw, n, "group", 1) != 1) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: a grouped or depthwise Conv (group != 1)");
        }
        if (!raw.is_constant(input(n, 1))) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight must be a constant initializer");
        }
        m.conv_weight.push_back(raw.value(input(n, 1)).name);
        const ValueId b = input(n, 2);
        m.conv_bias.push_back(b == kNoValue ? std::string() : raw.value(b).name);
        break;
      }
      case Op::kGemm:
      case Op::kMatMul: {
        if (!raw.is_constant(input(n, 1))) {
          raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: the weight must be a constant initializer read as "
                                               "the second input");
        }
        bool out_in = false;
        std::string bias;
        if (n.op == Op::kGemm) {
          if (attr_int(raw, n, "transA", 0) != 0 || attr_float(raw, n, "alpha", 1.0f) != 1.0f ||
              attr_float(raw, n, "beta", 1.0f) != 1.0f) {
            raw.fail(ErrorKind::kUnsupported, n, "cannot be trained: transA, alpha or beta other than 0, 1, 1");
          }
          out_in = attr_int(raw, n, "transB", 0) == 1;
          if (input(n, 2) != kNoValue) bias = raw.value(input(n, 2)).name;
        } else {
          const auto& readers = consumers[static_cast<size_t>(output(n, 0))];
          if (readers.size() == 1 && raw.nodes[readers[0]].op == Op::kAdd) {
            const Node& add = raw.nodes[readers[0]];
            const ValueId other = input(add, 0) == output(n, 0) ? input(add, 1) : input(add, 0);
            if (raw.is_constant(other)) bias = raw.value(other).name;
          }
        }
        m.dense_weight.push_back(raw.value(input(n, 1)).name);
        m.dense_bias.push_back(bias);
        m.dense_out_in.push_back(out_in ? 1 : 0);
        break;
      }
      case Op::kRelu:
      case Op::kMaxPool:
      case Op::kAveragePool:
      case Op::kGlobalAveragePool:
      case Op::kFlatten:
      case Op::kReshape:
      case Op::kSoftmax:
      case Op::kAdd:  // a dense bias (checked by compile_bf16_cnn's fusion: anything else fails there)
      case Op::kPad:
        break;
      default:
        raw.fail(ErrorKind::kUnsupported, n,
                 "cannot be trained: CNN training supports Conv, Relu, MaxPool, AveragePool, GlobalAveragePool, "
                 "Flatten/Reshape, Gemm, MatMul (+Add) and a trailing Softmax");
    }
  }
  m.net = compile_bf16_cnn(std::move(g));
  for (const Bf16ConvLayer& l : m.net.convs) {  // inference joins branches; training does not yet
    if (!l.sources.empty() || !l.act.none()) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("{}: layer '{}' cannot be trained: CNN training supports a chain of layers (no residual "
                              "Add, Concat, branch or activation function)",
                              m.net.head.source, l.name));
    }
  }
  // Pools carry no names; the Convs come in graph order.
  std::vector<std::string> w, b;
  size_t next = 0;
  for (const Bf16ConvLayer& l : m.net.convs) {
    if (l.kind != Bf16ConvLayer::Kind::kConv) {
      w.emplace_back();
      b.emplace_back();
      continue;
    }
    if (next >= m.conv_weight.size()) {
      throw Error(ErrorKind::kInternal, fmt::format("{}: more convolution layers than Conv nodes", m.net.head.source));
    }
    w.push_back(m.conv_weight[next]);
    b.push_back(m.conv_bias[next]);
    ++next;
  }
  if (next != m.conv_weight.size() || m.dense_weight.size() != m.net.head.layers.size()) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} Conv and {} Gemm/MatMul nodes became {} convolutions and {} dense layers; training "
                            "needs them one to one (no folding)",
                            m.net.head.source, m.conv_weight.size(), m.dense_weight.size(), next,
                            m.net.head.layers.size()));
  }
  m.conv_weight = std::move(w);
  m.conv_bias = std::move(b);
  return m;
}

}  // namespace tpuw::compiler
