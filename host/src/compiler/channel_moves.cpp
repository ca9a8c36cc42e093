// Channel moves of a CNN as convolutions (tpuw/compiler/channel_moves.h).
#include "tpuw/compiler/channel_moves.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "pass_util.h"

namespace tpuw::compiler {
namespace {

using detail::attr_int;
using detail::batch_led;
using detail::input;

bool is_map(const Graph& g, ValueId v) {
  if (v == kNoValue || g.is_constant(v) || !g.value(v).shape) return false;
  const Dims& d = *g.value(v).shape;
  return d.size() == 4 && batch_led(d);
}

class Moves {
 public:
  explicit Moves(Graph& g) : g_(g), readers_(g.consumers()) {}

  size_t run() {
    std::vector<Node> out;
    out.reserve(g_.nodes.size());
    drop_.assign(g_.nodes.size(), false);
    size_t count = 0;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& n = g_.nodes[i];
      if (n.op == Op::kReduceMean && reduce_mean(n, extra_)) ++count;
      if (n.op == Op::kSlice && slice(n)) ++count;
      if (n.op == Op::kReshape && shuffle(i)) ++count;
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (drop_[i]) continue;
      out.push_back(std::move(g_.nodes[i]));
      for (auto& [after, node] : extra_) {
        if (after == i) out.push_back(std::move(node));
      }
    }
    g_.nodes = std::move(out);
    return count;
  }

 private:
  Graph& g_;
  std::vector<std::vector<size_t>> readers_;
  std::vector<bool> drop_;
  std::vector<std::pair<size_t, Node>> extra_;  // nodes to insert after node index `first`

  size_t index_of(const Node& n) const { return static_cast<size_t>(&n - g_.nodes.data()); }

  bool sole_reader(ValueId v) const { return readers_[static_cast<size_t>(v)].size() == 1 && !g_.is_graph_output(v); }

  // The node at `i` becomes a 1x1 Conv of map `x` whose output channel o reads input channel src[o].
  void make_selection(Node& n, ValueId x, const std::vector<int64_t>& src, const std::string& what) {
    const Dims& dx = *g_.value(x).shape;
    const int64_t C = dx[1], O = static_cast<int64_t>(src.size());
    TensorData w;
    w.f.assign(static_cast<size_t>(O * C), 0.0);
    for (int64_t o = 0; o < O; ++o) w.f[static_cast<size_t>(o * C + src[static_cast<size_t>(o)])] = 1.0;
    const ValueId wv = g_.add_constant(n.name + "." + what, DType::kFloat32, Dims{O, C, 1, 1}, std::move(w));
    n.op = Op::kConv;  // origin keeps the replaced nodes' labels; op_type too, for the reports
    n.inputs = {x, wv};
    n.attrs.clear();
  }

  bool reduce_mean(Node& n, std::vector<std::pair<size_t, Node>>& extra) {
    const ValueId x = n.inputs[0];
    if (!is_map(g_, x)) return false;
    const Attribute* a = n.attr("axes");
    if (a == nullptr || a->kind != Attribute::Kind::kInts) return false;
    std::vector<int64_t> ax;
    for (const int64_t v : a->ints) ax.push_back(v < 0 ? v + 4 : v);
    std::sort(ax.begin(), ax.end());
    if (ax != std::vector<int64_t>{2, 3}) return false;
    const bool keep = attr_int(g_, n, "keepdims", 1) != 0;
    n.op = Op::kGlobalAveragePool;
    n.attrs.clear();
    if (keep) return true;
    // [batch, C] = Flatten(GlobalAveragePool(x)): the pool writes a new [batch, C, 1, 1] value.
    const ValueId y = n.outputs[0];
    Value pooled;
    pooled.name = g_.value(y).name + ".pooled";
    pooled.dtype = g_.value(x).dtype;
    pooled.shape = Dims{kBatch, (*g_.value(x).shape)[1], 1, 1};
    const ValueId p = g_.add_value(std::move(pooled));
    Node& nn = g_.nodes[index_of(n)];  // add_value does not move nodes; stay explicit
    nn.outputs = {p};
    Node f;
    f.op = Op::kFlatten;
    f.op_type = "Flatten";
    f.name = nn.name + ".flatten";
    f.origin = nn.origin;
    f.inputs = {p};
    f.outputs = {y};
    extra.emplace_back(index_of(nn), std::move(f));
    return true;
  }

  bool slice(Node& n) {
    const ValueId x = n.inputs[0];
    if (!is_map(g_, x)) return false;
    const Dims& dx = *g_.value(x).shape;
    const Dims& dy = *g_.value(n.outputs[0]).shape;
    if (dy[2] != dx[2] || dy[3] != dx[3] || dy[0] != kBatch) return false;  // only the channels move
    // The channels it keeps: first + k * step (shape inference resolved and checked them).
    std::vector<int64_t> starts, axes, steps;
    auto ints = [&](size_t k) {
      std::vector<int64_t> v;
      const ValueId id = input(n, k);
      if (id != kNoValue) v = g_.value(id).data->i;
      return v;
    };
    if (n.attr("starts") != nullptr) {
      starts = n.attr("starts")->ints;
      if (n.attr("axes") != nullptr) axes = n.attr("axes")->ints;
    } else {
      starts = ints(1), axes = ints(3), steps = ints(4);
    }
    if (axes.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    int64_t first = 0, step = 1;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t a = axes[k] < 0 ? axes[k] + 4 : axes[k];
      if (a != 1) {
        if (a == 2 || a == 3) return false;  // a spatial slice: not a channel move (shape unchanged here)
        continue;
      }
      const int64_t len = dx[1];
      int64_t s0 = starts[k] < 0 ? starts[k] + len : starts[k];
      s0 = steps[k] > 0 ? std::clamp<int64_t>(s0, 0, len) : std::clamp<int64_t>(s0, 0, len - 1);
      first = s0;
      step = steps[k];
    }
    std::vector<int64_t> src;
    for (int64_t o = 0; o < dy[1]; ++o) src.push_back(first + o * step);
    make_selection(n, x, src, "select");
    return true;
  }

  // Reshape [B, C, H, W] -> [B, a, b, H, W] -> Transpose [0, 2, 1, 3, 4] -> Reshape [B, C, H, W]:
  // matched at the first Reshape; the last one becomes the Conv, the first two are dropped.
  bool shuffle(size_t i) {
    Node& r1 = g_.nodes[i];
    const ValueId x = r1.inputs[0];
    if (!is_map(g_, x) || drop_[i]) return false;
    const Dims& dx = *g_.value(x).shape;
    const ValueId v1 = r1.outputs[0];
    const Dims& d1 = *g_.value(v1).shape;
    if (d1.size() != 5 || d1[3] != dx[2] || d1[4] != dx[3] || d1[1] * d1[2] != dx[1] || !sole_reader(v1)) return false;
    const size_t ti = readers_[static_cast<size_t>(v1)][0];
    Node& t = g_.nodes[ti];
    const Attribute* perm = t.attr("perm");
    if (t.op != Op::kTranspose || perm == nullptr || perm->ints != std::vector<int64_t>{0, 2, 1, 3, 4}) return false;
    const ValueId v2 = t.outputs[0];
    if (!sole_reader(v2)) return false;
    const size_t r2i = readers_[static_cast<size_t>(v2)][0];
    Node& r2 = g_.nodes[r2i];
    if (r2.op != Op::kReshape || r2.inputs[0] != v2) return false;
    const Dims& d3 = *g_.value(r2.outputs[0]).shape;
    if (d3 != dx) return false;
    // Output channel j * a + k (transposed [b, a]) is input channel k * b + j.
    const int64_t a = d1[1], b = d1[2];
    std::vector<int64_t> src(static_cast<size_t>(a * b));
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t k = 0; k < a; ++k) src[static_cast<size_t>(j * a + k)] = k * b + j;
    }
    std::vector<std::string> origin = r1.origin;
    origin.insert(origin.end(), t.origin.begin(), t.origin.end());
    origin.insert(origin.end(), r2.origin.begin(), r2.origin.end());
    r2.origin = std::move(origin);
    make_selection(r2, x, src, "shuffle");
    drop_[i] = true;
    drop_[ti] = true;
    return true;
  }
};

}  // namespace

size_t lower_channel_moves(Graph& g) { return Moves(g).run(); }

}  // namespace tpuw::compiler
