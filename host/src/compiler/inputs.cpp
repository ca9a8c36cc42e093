// Several graph inputs in the dense (MLP) path: merge_graph_inputs (tpuw/compiler/passes.h;
// docs/network_compiler.md "Several graph inputs").
//
// The device program reads one input row per batch row. A model with several graph inputs
// [batch, F_k] runs with their rows side by side in one DMA buffer (a layout: nothing is added or
// rescaled on the host; in int8 each part keeps its own calibrated scale, nn::QNetwork::
// input_part_scales). Where the inputs meet the device does the join:
//   - Concat(x_1, ..., x_n) along the features read by a Gemm: the Concat is that layout, the
//     Gemm's MATMULs accumulate every input's row block of the weight into the same ACC;
//   - Add(Gemm_1(x_1), Gemm_2(x_2)): one Dense over [x_1, x_2] with the weights stacked
//     [W_1; W_2] and the biases summed (constants, at compile time): the two products are
//     accumulations of their row blocks into the same ACC, the Add is free.
// In int8 the scales meet in the first layer's weight (compiler quantize: a product scale per
// column, each row block quantized to it).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;

std::string input_names(const Graph& g) {
  std::vector<std::string> names;
  for (const GraphInput& in : g.inputs) names.push_back("'" + g.value(in.value).name + "'");
  return fmt::format("{}", fmt::join(names, ", "));
}

// The graph input index of value v, or -1.
int input_index(const Graph& g, ValueId v) {
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    if (g.inputs[k].value == v) return static_cast<int>(k);
  }
  return -1;
}

}  // namespace

bool merge_graph_inputs(Graph& g) {
  if (g.inputs.size() < 2) return false;
  const std::string all = input_names(g);
  for (const GraphInput& in : g.inputs) {
    const Value& v = g.value(in.value);
    if (v.dtype != DType::kFloat32) {
      g.fail(ErrorKind::kUnsupported, fmt::format("graph input '{}': has element type {}; only float32 inputs are "
                                                  "supported", v.name, dtype_name(v.dtype)));
    }
    if (!v.shape || v.shape->size() != 2) {
      g.fail(ErrorKind::kUnsupported,
             fmt::format("graph input '{}' has shape {}; a model with several inputs ({}) takes each as [batch, "
                         "features] (image inputs run in a CNN: a model with a Conv or pooling layer)",
                         v.name, v.shape ? dims_string(*v.shape) : "unknown", all));
    }
  }
  const std::vector<std::vector<size_t>> readers = g.consumers();
  auto only_reader = [&](ValueId v, size_t node) {
    return readers[static_cast<size_t>(v)].size() == 1 && readers[static_cast<size_t>(v)][0] == node && !g.is_graph_output(v);
  };
  std::vector<int> order;      // graph input indices in row order
  std::vector<size_t> drop;    // nodes the merge removes
  ValueId merged = kNoValue;   // the merged input value
  for (size_t i = 0; i < g.nodes.size() && merged == kNoValue; ++i) {
    const Node& n = g.nodes[i];
    if (n.op == Op::kConcat && n.inputs.size() == g.inputs.size()) {
      // Concat of every graph input, each once, along the features.
      int64_t axis = attr_int(g, n, "axis", 0);
      if (axis < 0) axis += 2;
      std::vector<int> idx;
      for (const ValueId v : n.inputs) idx.push_back(input_index(g, v));
      std::vector<int> sorted = idx;
      std::sort(sorted.begin(), sorted.end());
      bool every = sorted.front() == 0;
      for (size_t k = 0; k < sorted.size(); ++k) every = every && sorted[k] == static_cast<int>(k);
      if (!every) continue;
      if (axis != 1) g.fail(ErrorKind::kUnsupported, n, "joins the graph inputs along the batch axis; several inputs are joined along the features (axis 1)");
      for (const ValueId v : n.inputs) {
        if (!only_reader(v, i)) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("graph input '{}' is also read elsewhere; a Concat of the inputs must be their only reader", g.value(v).name));
        }
      }
      order = idx;
      merged = n.outputs[0];
      drop.push_back(i);
    } else if (n.op == Op::kAdd && n.inputs.size() == 2 && g.inputs.size() == 2) {
      // Add(Dense(x_a), Dense(x_b)): one Dense over [x_a, x_b].
      std::vector<size_t> dn;
      for (const ValueId v : n.inputs) {
        for (size_t j = 0; j < i; ++j) {
          if (g.nodes[j].op == Op::kDense && g.nodes[j].outputs[0] == v) dn.push_back(j);
        }
      }
      if (dn.size() != 2 || dn[0] == dn[1]) continue;
      const Node& a = g.nodes[dn[0]];
      const Node& b = g.nodes[dn[1]];
      const int ia = input_index(g, a.inputs[0]), ib = input_index(g, b.inputs[0]);
      if (ia < 0 || ib < 0 || ia == ib) continue;
      for (const Node* d : {&a, &b}) {
        if (attr_int(g, *d, "relu", 0) != 0 || !dense_activation(g, *d).none()) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("adds {}, which has its own activation; the Add of two "
                                                         "inputs' layers runs as one layer (their products accumulate) "
                                                         "only without one", d->label()));
        }
        if (!only_reader(d->inputs[0], static_cast<size_t>(d == &a ? dn[0] : dn[1])) || !only_reader(d->outputs[0], i)) {
          g.fail(ErrorKind::kUnsupported, n, fmt::format("adds {}, whose input or output is read elsewhere too", d->label()));
        }
      }
      const Value& wa = g.value(a.inputs[1]);
      const Value& wb = g.value(b.inputs[1]);
      const int64_t ka = (*wa.shape)[0], kb = (*wb.shape)[0], cols = (*wa.shape)[1];
      if ((*wb.shape)[1] != cols) g.fail(ErrorKind::kBadFile, n, "adds layers of different widths");
      TensorData w, bias;
      w.f = wa.data->f;
      w.f.insert(w.f.end(), wb.data->f.begin(), wb.data->f.end());
      const std::vector<double>& ba = g.value(a.inputs[2]).data->f;
      const std::vector<double>& bb = g.value(b.inputs[2]).data->f;
      bias.f.resize(static_cast<size_t>(cols));
      // The model adds two float32 results: the merged bias is their float32 sum.
      for (size_t c = 0; c < bias.f.size(); ++c) bias.f[c] = static_cast<float>(static_cast<float>(ba[c]) + static_cast<float>(bb[c]));
      Node d = a;
      d.name = n.name;
      d.origin = a.origin;
      d.origin.insert(d.origin.end(), b.origin.begin(), b.origin.end());
      d.origin.push_back(n.label());
      d.outputs = n.outputs;
      Value in;
      in.name = g.value(a.inputs[0]).name + "+" + g.value(b.inputs[0]).name;
      in.shape = Dims{kBatch, ka + kb};
      merged = g.add_value(std::move(in));
      d.inputs = {merged, g.add_constant(d.name + ".w", DType::kFloat32, Dims{ka + kb, cols}, std::move(w)),
                  g.add_constant(d.name + ".b", DType::kFloat32, Dims{cols}, std::move(bias))};
      order = {ia, ib};
      g.nodes[i] = std::move(d);
      drop = {dn[0], dn[1]};
    }
  }
  if (merged == kNoValue) {
    g.fail(ErrorKind::kUnsupported,
           fmt::format("the graph has {} inputs ({}); several inputs run when they meet in a Concat along the features "
                       "or in an Add of a Gemm/MatMul of each (two inputs), before any other operator reads them",
                       g.inputs.size(), all));
  }
  std::vector<Graph::InputPart> parts;
  int64_t total = 0;
  for (const int k : order) {
    const GraphInput& in = g.inputs[static_cast<size_t>(k)];
    const Value& v = g.value(in.value);
    parts.push_back({v.name, in.declared.empty() ? *v.shape : in.declared, (*v.shape)[1]});
    total += (*v.shape)[1];
  }
  g.value(merged).shape = Dims{kBatch, total};
  GraphInput gi;
  gi.value = merged;
  gi.has_shape = true;
  gi.declared = {-1, total};
  gi.dim_params = {"batch", ""};
  g.inputs = {gi};
  g.input_parts = std::move(parts);
  std::sort(drop.begin(), drop.end());
  for (size_t k = drop.size(); k-- > 0;) g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(drop[k]));
  remove_dead_code(g);
  verify(g);
  return true;
}

}  // namespace tpuw::compiler
