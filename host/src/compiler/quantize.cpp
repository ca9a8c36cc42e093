// The int8 post-training quantization pass, its lowering to nn::QNetwork, and the IR of a
// FloatNetwork (tpuw/compiler/quantize.h). The arithmetic is nn::quantize's, step for step
// (docs/quantization.md): the same float/double conversions in the same order, so the QNetwork is
// bit-identical to the one the quantizer built before it became a pass.
#include "tpuw/compiler/quantize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string_view>

#include "pass_util.h"
#include "tpuw/compiler/activations.h"
#include "tpuw/compiler/passes.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::features;

Attribute int_attr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

int32_t sat32(double v) {
  return static_cast<int32_t>(std::clamp(v, static_cast<double>(std::numeric_limits<int32_t>::min()),
                                         static_cast<double>(std::numeric_limits<int32_t>::max())));
}

/// How reports name a (Q)Dense layer: the labels of the model nodes merged into it.
std::string layer_name(const Node& n) { return fmt::format("{}", fmt::join(n.origin, " + ")); }

// Issue 14, class 6: every float entering the quantizer is checked, and the message names the
// tensor and the index ([row, column] of its [rows, row_len] view). std::max would drop a NaN and
// casting one to int8 is undefined, so nothing below may see one.
std::string not_finite(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"); }

void require_finite(const Graph& g, std::span<const float> x, const std::string& what, uint64_t row_len,
                    ErrorKind kind, std::string_view reader = "the int8 quantizer") {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      throw Error(kind, fmt::format("{}: {} element [{}, {}] is {} (every value {} reads must be finite)", g.source,
                                    what, i / row_len, i % row_len, not_finite(x[i]), reader));
    }
  }
}

// The per-tensor int8 scale of a calibrated activation: max |x| / 127, 1 for an all-zero tensor.
// A tensor whose largest magnitude is below 127 x the smallest normal float would get a
// subnormal (or zero) scale and a meaningless requantization: refused, with the value.
float activation_scale(const Graph& g, std::span<const float> x, const std::string& what, uint64_t row_len) {
  require_finite(g, x, what + " (calibration)", row_len, ErrorKind::kUnsupported);
  float m = 0;
  for (const float v : x) m = std::max(m, std::fabs(v));
  if (m > 0 && m < 127.0f * std::numeric_limits<float>::min()) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{}: {} has largest magnitude {:g} over the calibration rows: too small for an int8 "
                            "scale (it must be at least 127 x {:g}, the smallest normal float); scale the data",
                            g.source, what, m, std::numeric_limits<float>::min()));
  }
  return m > 0 ? m / 127.0f : 1.0f;
}

Node make_node(Op op, std::string name, std::vector<ValueId> inputs, std::vector<ValueId> outputs) {
  Node n;
  n.op = op;
  n.op_type = std::string(op_name(op));
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

ValueId activation_like(Graph& g, ValueId like, std::string suffix, DType t, std::vector<float> scale) {
  Value v;
  v.name = g.value(like).name + suffix;
  v.dtype = t;
  v.shape = g.value(like).shape;
  v.scale = std::move(scale);
  return g.add_value(std::move(v));
}

TensorData ints(std::vector<int64_t> i) {
  TensorData d;
  d.i = std::move(i);
  return d;
}

}  // namespace

void quantize(Graph& g, std::span<const float> calib, uint64_t rows) {
  // A function on the last Dense is a lookup table, which needs an int8 output: an identity layer
  // with the int32 output follows it.
  add_int8_output_layer(g);
  size_t dense_count = 0;
  for (const Node& n : g.nodes) {
    switch (n.op) {
      case Op::kDense: ++dense_count; break;
      case Op::kReshape:
      case Op::kFlatten:
      case Op::kSoftmax: break;
      default: g.fail(ErrorKind::kUnsupported, n, "cannot be quantized (quantization runs on Dense, Reshape, Flatten, Softmax)");
    }
  }
  if (dense_count == 0) g.fail(ErrorKind::kUnsupported, "the network has no dense layer to run on the device");
  if (rows == 0) throw Error(ErrorKind::kInvalidArgument, "calibration data has no rows");
  if (g.inputs.size() != 1 || !g.value(g.inputs[0].value).shape) {
    g.fail(ErrorKind::kUnsupported, "quantization needs exactly one graph input of known shape");
  }
  const ValueId input = g.inputs[0].value;
  const uint64_t features_in = static_cast<uint64_t>(*checked_elements(features(*g.value(input).shape)));
  if (calib.size() != rows * features_in) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("calibration data has {} values, expected {} rows x {} features", calib.size(), rows,
                            features_in));
  }
  // Calibration: every activation's float tensor over the calibration rows.
  const std::vector<std::vector<float>> acts = interpret_float(g, calib, rows);
  // A Dense with a function (a lookup table on the device) requantizes into the table's input
  // scale: the calibrated range of its pre-activation (after the ReLU, if any), computed here from
  // its float input as the interpreter computes the layer.
  std::vector<float> pre_scale(g.nodes.size(), 0.0f);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != Op::kDense || dense_activation(g, n).none()) continue;
    const Value& wv = g.value(n.inputs[1]);
    const auto k = static_cast<uint32_t>((*wv.shape)[0]);
    const auto cols = static_cast<uint32_t>((*wv.shape)[1]);
    const std::vector<double>& w = wv.data->f;
    const std::vector<double>& b = g.value(n.inputs[2]).data->f;
    const std::vector<float>& x = acts[static_cast<size_t>(n.inputs[0])];
    const bool relu = attr_int(g, n, "relu", 0) != 0;
    std::vector<float> pre(rows * cols);
    std::vector<double> acc(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint32_t j = 0; j < cols; ++j) acc[j] = static_cast<float>(b[j]);
      for (uint32_t kk = 0; kk < k; ++kk) {
        const double xv = x[r * k + kk];
        for (uint32_t j = 0; j < cols; ++j) acc[j] += xv * static_cast<float>(w[size_t{kk} * cols + j]);
      }
      for (uint32_t j = 0; j < cols; ++j) pre[r * cols + j] = static_cast<float>(relu ? std::max(acc[j], 0.0) : acc[j]);
    }
    pre_scale[i] = activation_scale(g, pre, fmt::format("layer '{}' input of {}", layer_name(n),
                                                        nn::act_name(dense_activation(g, n))), cols);
  }

  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + 2);
  // Several graph inputs (merge_graph_inputs): one scale per part of the row, each calibrated on
  // its own columns; the Quantize's output then carries one scale per part (not per column).
  std::vector<float> in_scales;
  if (g.input_parts.size() > 1) {
    uint64_t off = 0;
    for (const Graph::InputPart& p : g.input_parts) {
      const auto f = static_cast<uint64_t>(p.features);
      std::vector<float> part(rows * f);
      for (uint64_t r = 0; r < rows; ++r) {
        std::copy_n(calib.begin() + static_cast<std::ptrdiff_t>(r * features_in + off), f, part.begin() + static_cast<std::ptrdiff_t>(r * f));
      }
      in_scales.push_back(activation_scale(g, part, fmt::format("input '{}'", p.name), f));
      off += f;
    }
    if (off != features_in) g.fail(ErrorKind::kInternal, "the input parts do not cover the input row");
  } else {
    in_scales = {activation_scale(g, calib, fmt::format("input '{}'", g.value(input).name), features_in)};
  }
  const ValueId xq = activation_like(g, input, ".q", DType::kInt8, in_scales);
  nodes.push_back(make_node(Op::kQuantize, "quantize", {input}, {xq}));
  g.replace_uses(input, xq);

  size_t dense_seen = 0;
  const std::vector<std::vector<size_t>> readers = g.consumers();
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& n = g.nodes[ni];
    if (n.op == Op::kReshape || n.op == Op::kFlatten) {
      Value& out = g.value(n.outputs[0]);
      out.dtype = g.value(n.inputs[0]).dtype;
      out.scale = g.value(n.inputs[0]).scale;
      nodes.push_back(std::move(n));
      continue;
    }
    if (n.op != Op::kDense) {
      nodes.push_back(std::move(n));
      continue;
    }
    const bool last = ++dense_seen == dense_count;
    const std::string name = layer_name(n);
    const std::vector<float>& in_sc = g.value(n.inputs[0]).scale;
    const bool parts = dense_seen == 1 && in_sc.size() > 1 && in_sc.size() == g.input_parts.size();
    if (g.value(n.inputs[0]).dtype != DType::kInt8 || (in_sc.size() != 1 && !parts)) {
      g.fail(ErrorKind::kInternal, n, "Dense input is not a quantized int8 tensor");
    }
    const float in_scale = in_sc[0];
    // Several inputs: the scale of every weight row (its part's input scale).
    std::vector<float> row_scale;
    for (size_t p = 0; parts && p < in_sc.size(); ++p) row_scale.insert(row_scale.end(), static_cast<size_t>(g.input_parts[p].features), in_sc[p]);
    // Copies: add_constant below may move the values these would point into.
    const Value& wv = g.value(n.inputs[1]);
    const Value& bv = g.value(n.inputs[2]);
    const auto k = static_cast<uint32_t>((*wv.shape)[0]);
    const auto cols = static_cast<uint32_t>((*wv.shape)[1]);
    const std::string w_name = wv.name, b_name = bv.name;
    const std::vector<float> w(wv.data->f.begin(), wv.data->f.end());  // float32, as lowering stores them
    const std::vector<float> b(bv.data->f.begin(), bv.data->f.end());
    // Free the fp32 data this node alone reads now, not at the end: a large model's peak memory
    // then holds each weight once as fp32 (the float network), once in the graph (double, then
    // int8 kept as int64), not twice in the graph.
    for (const ValueId c : {n.inputs[1], n.inputs[2]}) {
      if (readers[static_cast<size_t>(c)].size() == 1 && !g.is_graph_output(c)) g.value(c).data.reset();
    }
    require_finite(g, w, fmt::format("layer '{}' weight '{}' (as [inputs, outputs])", name, w_name), cols,
                   ErrorKind::kBadFile);
    require_finite(g, b, fmt::format("layer '{}' bias '{}'", name, b_name), cols, ErrorKind::kBadFile);
    std::vector<int64_t> w_q(size_t{k} * cols), bias_q(cols);
    std::vector<float> w_scale(cols);
    // acc_scale[j]: the scale of column j's int32 sums (input scale x weight scale).
    std::vector<double> acc_scale(cols);
    if (parts && row_scale.size() != k) g.fail(ErrorKind::kInternal, n, "the input parts do not match the weight rows");
    for (uint32_t j = 0; parts && j < cols; ++j) {
      // Several input scales s_r meet in one column: the product scale p = max_r |W[r, j]| s_r / 127,
      // each row block quantized to it (w_q = round(W s_r / p)); the input with the largest
      // contribution gets the full int8 range, the others proportionally fewer levels.
      double m = 0;
      for (uint32_t r = 0; r < k; ++r) m = std::max(m, std::fabs(static_cast<double>(w[size_t{r} * cols + j])) * row_scale[r]);
      const double p = m > 0 ? m / 127.0 : static_cast<double>(row_scale[0]);
      for (uint32_t r = 0; r < k; ++r) {
        const double v = std::round(static_cast<double>(w[size_t{r} * cols + j]) * row_scale[r] / p);
        w_q[size_t{r} * cols + j] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
      }
      acc_scale[j] = p;
      w_scale[j] = static_cast<float>(p / static_cast<double>(in_scale));  // so that in_scale * w_scale ~= p
      bias_q[j] = sat32(std::round(static_cast<double>(b[j]) / p));
    }
    for (uint32_t j = 0; !parts && j < cols; ++j) {
      float m = 0;
      for (uint32_t r = 0; r < k; ++r) m = std::max(m, std::fabs(w[size_t{r} * cols + j]));
      w_scale[j] = m > 0 ? m / 127.0f : 1.0f;
      if (!(w_scale[j] > 0)) {
        throw Error(ErrorKind::kUnsupported,
                    fmt::format("{}: layer '{}' weight '{}' column {} has largest magnitude {:g}: too small for an "
                                "int8 scale",
                                g.source, name, w_name, j, m));
      }
      for (uint32_t r = 0; r < k; ++r) {
        const double v = std::round(static_cast<double>(w[size_t{r} * cols + j]) / static_cast<double>(w_scale[j]));
        w_q[size_t{r} * cols + j] = static_cast<int8_t>(std::clamp(v, -127.0, 127.0));
      }
      acc_scale[j] = static_cast<double>(in_scale) * static_cast<double>(w_scale[j]);
      const double bq = std::round(static_cast<double>(b[j]) / acc_scale[j]);
      bias_q[j] = sat32(bq);
    }
    const bool relu = attr_int(g, n, "relu", 0) != 0;
    const nn::Activation act = dense_activation(g, n);
    if (!act.none() && last) {
      g.fail(ErrorKind::kInternal, n, "the last dense layer has a function (add_int8_output_layer puts a layer after it)");
    }
    const ValueId wq_id = g.add_constant(w_name + ".q", DType::kInt8, Dims{k, cols}, ints(std::move(w_q)));
    const ValueId bq_id = g.add_constant(b_name + ".q", DType::kInt32, Dims{cols}, ints(std::move(bias_q)));
    Node q = make_node(Op::kQDense, n.name, {n.inputs[0], wq_id, bq_id}, {});
    q.origin = n.origin;
    q.set_attr("relu", int_attr(relu ? 1 : 0));
    q.set_attr("int32_output", int_attr(last ? 1 : 0));
    const ValueId out = n.outputs[0];
    if (last) {
      // int32 acc + bias_q with per-column scales; the Dequantize defines the original fp32 value.
      std::vector<float> out_scale(cols);
      for (uint32_t j = 0; j < cols; ++j) out_scale[j] = parts ? static_cast<float>(acc_scale[j]) : in_scale * w_scale[j];
      const ValueId acc = activation_like(g, out, ".acc", DType::kInt32, std::move(out_scale));
      q.outputs = {acc};
      nodes.push_back(std::move(q));
      Node dq = make_node(Op::kDequantize, n.name + ".dequantize", {acc}, {out});
      dq.origin = n.origin;
      dq.set_attr("relu", int_attr(relu ? 1 : 0));
      nodes.push_back(std::move(dq));
      continue;
    }
    const float out_scale = activation_scale(g, acts[static_cast<size_t>(out)],
                                             fmt::format("layer '{}' output", name), cols);
    // With a function the requantization targets the table's input scale.
    const float req_scale = act.none() ? out_scale : pre_scale[ni];
    std::vector<int64_t> mult(cols), shift(cols);
    for (uint32_t j = 0; j < cols; ++j) {
      const double real = (parts ? acc_scale[j] : static_cast<double>(in_scale) * static_cast<double>(w_scale[j])) /
                          static_cast<double>(req_scale);
      try {
        const nn::Requant r = nn::quantize_multiplier(real);
        mult[j] = r.mult;
        shift[j] = r.shift;
      } catch (const Error& e) {
        throw Error(ErrorKind::kUnsupported, fmt::format("{}: layer '{}' column {}: {}", g.source, name, j, e.what()));
      }
    }
    q.inputs.push_back(g.add_constant(n.name + ".mult", DType::kInt32, Dims{cols}, ints(std::move(mult))));
    q.inputs.push_back(g.add_constant(n.name + ".shift", DType::kInt32, Dims{cols}, ints(std::move(shift))));
    if (!act.none()) {  // input 5: the int8 lookup table (ACTIVATE `lut`)
      const std::vector<int8_t> t = nn::act_table(act, pre_scale[ni], out_scale);
      q.inputs.push_back(g.add_constant(n.name + ".lut", DType::kInt8, Dims{256}, ints({t.begin(), t.end()})));
    }
    Value& ov = g.value(out);
    ov.dtype = DType::kInt8;
    ov.scale = {out_scale};
    q.outputs = {out};
    nodes.push_back(std::move(q));
  }
  g.nodes = std::move(nodes);
  remove_dead_code(g);  // the fp32 weights and biases nothing reads any more
  verify(g);
}

nn::QNetwork lower_to_qnetwork(const Graph& g) {
  nn::QNetwork q;
  if (g.inputs.size() != 1 || g.outputs.size() != 1) {
    g.fail(ErrorKind::kUnsupported, "a quantized network has exactly one input and one output");
  }
  ValueId act = g.inputs[0].value;
  q.input_features = static_cast<uint32_t>(*checked_elements(features(*g.value(act).shape)));
  bool quantized = false;
  for (const Node& n : g.nodes) {
    if (n.inputs.empty() || n.inputs[0] != act) {
      g.fail(ErrorKind::kUnsupported, n, "does not read the activation of the layer chain (only chains are supported)");
    }
    if (q.host_op != nn::HostOp::kNone) {
      g.fail(ErrorKind::kUnsupported, n, "follows Softmax; Softmax runs on the host and must be the last operator");
    }
    act = n.outputs[0];
    switch (n.op) {
      case Op::kQuantize:
        q.input_scale = g.value(act).scale.at(0);
        if (g.input_parts.size() > 1) {
          for (const Graph::InputPart& p : g.input_parts) q.input_part_features.push_back(static_cast<uint32_t>(p.features));
          q.input_part_scales = g.value(act).scale;
        }
        quantized = true;
        break;
      case Op::kQDense: {
        if (!quantized) g.fail(ErrorKind::kInternal, n, "QDense before the input's Quantize");
        const Value& w = g.value(n.inputs[1]);
        nn::QLayer l;
        l.name = layer_name(n);
        l.k = static_cast<uint32_t>((*w.shape)[0]);
        l.n = static_cast<uint32_t>((*w.shape)[1]);
        l.w_q.assign(w.data->i.begin(), w.data->i.end());
        const std::vector<int64_t>& bq = g.value(n.inputs[2]).data->i;
        l.bias_q.assign(bq.begin(), bq.end());
        l.relu = attr_int(g, n, "relu", 0) != 0;
        l.int32_output = attr_int(g, n, "int32_output", 0) != 0;
        if (!l.int32_output) {
          const std::vector<int64_t>& m = g.value(n.inputs[3]).data->i;
          const std::vector<int64_t>& s = g.value(n.inputs[4]).data->i;
          l.mult.assign(m.begin(), m.end());
          l.shift.assign(s.begin(), s.end());
          if (n.inputs.size() > 5) {
            const std::vector<int64_t>& t = g.value(n.inputs[5]).data->i;
            l.lut.assign(t.begin(), t.end());
          }
        }
        l.out_scale = g.value(act).scale;
        if (!q.layers.empty() && q.layers.back().int32_output) {
          g.fail(ErrorKind::kInternal, n, "a QDense follows the int32-output layer");
        }
        q.layers.push_back(std::move(l));
        break;
      }
      case Op::kReshape:
      case Op::kFlatten:
      case Op::kDequantize: break;
      case Op::kSoftmax: q.host_op = nn::HostOp::kSoftmax; break;
      default: g.fail(ErrorKind::kUnsupported, n, "is not an operator of a quantized network");
    }
  }
  if (q.layers.empty() || !q.layers.back().int32_output) {
    g.fail(ErrorKind::kInternal, "the graph is not quantized (no int32-output QDense); run quantize() first");
  }
  if (g.outputs[0].value != act) g.fail(ErrorKind::kUnsupported, "the graph output is not the end of the layer chain");
  return q;
}

void require_finite_weights(const Graph& g, std::string_view reader) {
  for (const Node& n : g.nodes) {
    if (n.op != Op::kDense) continue;
    const Value& wv = g.value(n.inputs[1]);
    const Value& bv = g.value(n.inputs[2]);
    if (!wv.data || !bv.data || !wv.shape || wv.shape->size() != 2) continue;
    const auto cols = static_cast<uint64_t>((*wv.shape)[1]);
    const std::vector<float> w(wv.data->f.begin(), wv.data->f.end());  // float32, as quantize() reads them
    const std::vector<float> b(bv.data->f.begin(), bv.data->f.end());
    require_finite(g, w, fmt::format("layer '{}' weight '{}' (as [inputs, outputs])", layer_name(n), wv.name),
                   cols, ErrorKind::kBadFile, reader);
    require_finite(g, b, fmt::format("layer '{}' bias '{}'", layer_name(n), bv.name), cols, ErrorKind::kBadFile,
                   reader);
  }
}

Graph graph_of_float_network(const nn::FloatNetwork& net) {
  Graph g;
  g.source = net.source;
  Value in;
  in.name = net.input_name;
  in.dtype = DType::kFloat32;
  in.shape = Dims{kBatch, int64_t{net.input_features}};
  GraphInput gi;
  gi.value = g.add_value(std::move(in));
  gi.has_shape = true;
  gi.declared = {-1, int64_t{net.input_features}};
  gi.dim_params = {"batch", ""};
  g.inputs.push_back(gi);
  for (const nn::InputPart& p : net.input_parts) g.input_parts.push_back({p.name, p.shape, int64_t{p.features}});
  ValueId act = gi.value;
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const nn::DenseLayer& l = net.layers[li];
    const std::string base = fmt::format("layer{}", li);
    TensorData w, b;
    w.f.assign(l.w.begin(), l.w.end());
    b.f.assign(l.b.begin(), l.b.end());
    const ValueId wid = g.add_constant(base + ".w", DType::kFloat32, Dims{l.k, l.n}, std::move(w));
    const ValueId bid = g.add_constant(base + ".b", DType::kFloat32, Dims{l.n}, std::move(b));
    Value y;
    y.name = base + ".y";
    y.shape = Dims{kBatch, int64_t{l.n}};
    const ValueId yid = g.add_value(std::move(y));
    Node d = make_node(Op::kDense, l.name.empty() ? base : l.name, {act, wid, bid}, {yid});
    d.origin = {l.name};
    d.set_attr("relu", int_attr(l.relu ? 1 : 0));
    set_dense_activation(d, l.act);
    g.nodes.push_back(std::move(d));
    act = yid;
  }
  if (net.host_op == nn::HostOp::kSoftmax) {
    Value y;
    y.name = "softmax.y";
    y.shape = g.value(act).shape;
    const ValueId yid = g.add_value(std::move(y));
    Node s = make_node(Op::kSoftmax, "softmax", {act}, {yid});
    s.origin = {s.label()};
    s.set_attr("axis", int_attr(-1));
    g.nodes.push_back(std::move(s));
    act = yid;
  }
  g.outputs.push_back(GraphOutput{net.output_name, act});
  verify(g);
  return g;
}

nn::QNetwork compile_quantized(Graph g, std::span<const float> calib, uint64_t rows) {
  Graph o = optimize(std::move(g));
  quantize(o, calib, rows);
  return lower_to_qnetwork(o);
}

}  // namespace tpuw::compiler
