// Average pools with a per-pixel divisor and constant-value Pads (pool_groups.h).
#include "pool_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "pass_util.h"
#include "tpuw/nn/quantize.h"

namespace tpuw::compiler::detail {
namespace {

/// Window positions o*stride + j*dilation - pad_begin (j < kernel) inside [lo, hi).
uint32_t count_axis(int64_t o, int64_t stride, int64_t dilation, int64_t kernel, int64_t pad_begin, int64_t lo, int64_t hi) {
  uint32_t n = 0;
  for (int64_t j = 0; j < kernel; ++j) {
    const int64_t p = o * stride + j * dilation - pad_begin;
    if (p >= lo && p < hi) ++n;
  }
  return n;
}

}  // namespace

bool PoolCounts::uniform(uint64_t taps) const {
  return std::all_of(rows.begin(), rows.end(), [&](uint32_t r) {
    return std::all_of(cols.begin(), cols.end(), [&](uint32_t c) { return uint64_t{r} * c == taps; });
  });
}

PoolCounts avgpool_counts(const Graph& g, const Node& n, const nn::ConvGeometry& geo) {
  PoolCounts c;
  const uint64_t ho = geo.out_h(), wo = geo.out_w();
  if (n.op != Op::kAveragePool) {
    c.rows.assign(ho, geo.kernel_h);
    c.cols.assign(wo, geo.kernel_w);
    return c;
  }
  // The declared end pads (before ceil_mode's extension): the attribute, or auto_pad's.
  std::vector<int64_t> pads(4, 0);
  if (const Attribute* a = n.attr("pads"); a != nullptr && a->kind == Attribute::Kind::kInts && a->ints.size() == 4) {
    pads = a->ints;
  }
  const Attribute* ap = n.attr("auto_pad");
  const std::string mode = ap != nullptr && ap->kind == Attribute::Kind::kString ? ap->s : "NOTSET";
  if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    pads = {geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right};  // SAME never needs ceil_mode's extension
  } else if (mode == "VALID") {
    pads.assign(4, 0);
  }
  const bool include = attr_int(g, n, "count_include_pad", 0) != 0;
  const int64_t in_h = geo.in_h, in_w = geo.in_w;
  for (uint64_t oy = 0; oy < ho; ++oy) {
    c.rows.push_back(count_axis(static_cast<int64_t>(oy), geo.stride_h, geo.dilation_h, geo.kernel_h, geo.pad_top,
                                include ? -int64_t{geo.pad_top} : 0, include ? in_h + pads[2] : in_h));
  }
  for (uint64_t ox = 0; ox < wo; ++ox) {
    c.cols.push_back(count_axis(static_cast<int64_t>(ox), geo.stride_w, geo.dilation_w, geo.kernel_w, geo.pad_left,
                                include ? -int64_t{geo.pad_left} : 0, include ? in_w + pads[3] : in_w));
  }
  const bool empty = std::any_of(c.rows.begin(), c.rows.end(), [](uint32_t v) { return v == 0; }) ||
                     std::any_of(c.cols.begin(), c.cols.end(), [](uint32_t v) { return v == 0; });
  if (empty) {
    g.fail(ErrorKind::kUnsupported, n, "a pooling window lies entirely in the padding (nothing to average)");
  }
  return c;
}

float pool_pad_value(const Graph& g, const Node& n) { return n.op == Op::kAveragePool ? attr_float(g, n, "pad_value", 0.0f) : 0.0f; }

double pad_constant(const Graph& g, const Node& n) {
  if (const Attribute* v = n.attr("value"); v != nullptr) {
    if (v->kind != Attribute::Kind::kFloat) g.fail(ErrorKind::kBadFile, n, "attribute 'value' is not a float");
    return v->f;
  }
  const ValueId cv = input(n, 2);
  if (cv == kNoValue) return 0.0;
  if (!g.is_constant(cv)) g.fail(ErrorKind::kUnsupported, n, "the constant_value input must be a constant");
  const TensorData& d = *g.value(cv).data;
  return d.size() == 0 ? 0.0 : static_cast<double>(static_cast<float>(d.as_double(0)));
}

double avgpool_divisor(const PoolCounts& c, uint64_t oy, uint64_t ox) {
  return static_cast<double>(c.rows[oy]) * static_cast<double>(c.cols[ox]);
}

void add_pool_groups(const Graph& g, const Node& n, nn::QConv2d& q, float in_scale, float out_scale) {
  const nn::ConvGeometry& geo = q.geom;
  const uint64_t taps = uint64_t{geo.kernel_h} * geo.kernel_w, O = geo.out_c;
  const uint64_t ho = geo.out_h(), wo = geo.out_w();
  const PoolCounts c = avgpool_counts(g, n, geo);
  const float pv = pool_pad_value(g, n);
  if (c.uniform(taps) && pv == 0.0f) return;
  std::vector<uint16_t> group(ho * wo, 0);
  std::map<uint64_t, uint16_t> by_divisor;  // divisor -> group (the full window is group 0)
  auto add_group = [&](int32_t bias, double real) {
    nn::Requant rq{};
    try {
      rq = nn::quantize_multiplier(real);
    } catch (const Error& e) {
      g.fail(ErrorKind::kUnsupported, n, e.what());
    }
    q.group_bias.insert(q.group_bias.end(), O, bias);
    q.group_mult.insert(q.group_mult.end(), O, rq.mult);
    q.group_shift.insert(q.group_shift.end(), O, rq.shift);
    if (q.extra_groups() > 0xFFFE) g.fail(ErrorKind::kUnsupported, n, "more than 65534 requantization groups");
    return static_cast<uint16_t>(q.extra_groups());
  };
  const double in = static_cast<double>(in_scale), out = static_cast<double>(out_scale);
  for (uint64_t oy = 0; oy < ho; ++oy) {
    for (uint64_t ox = 0; ox < wo; ++ox) {
      const uint64_t d = uint64_t{c.rows[oy]} * c.cols[ox];
      if (d == taps) continue;
      auto it = by_divisor.find(d);
      if (it == by_divisor.end()) it = by_divisor.emplace(d, add_group(0, in / (static_cast<double>(d) * out))).first;
      group[oy * wo + ox] = it->second;
    }
  }
  if (pv != 0.0f) {
    // A Pad's constant border (a 1x1 pool, stride 1): the border pixels read the zero padding, so
    // their ACC is 0 and the bias alone makes the value: round(pv / in_scale) in ACC units.
    if (taps != 1 || geo.stride_h != 1 || geo.stride_w != 1) {
      g.fail(ErrorKind::kInternal, n, "a pad_value pool must be 1x1 with stride 1");
    }
    const double b = std::round(static_cast<double>(pv) / in);
    const auto bias = static_cast<int32_t>(std::clamp(b, static_cast<double>(std::numeric_limits<int32_t>::min()),
                                                       static_cast<double>(std::numeric_limits<int32_t>::max())));
    const uint16_t k = add_group(bias, in / out);
    for (uint64_t oy = 0; oy < ho; ++oy) {
      for (uint64_t ox = 0; ox < wo; ++ox) {
        const bool inside = oy >= geo.pad_top && oy < geo.pad_top + uint64_t{geo.in_h} && ox >= geo.pad_left &&
                            ox < geo.pad_left + uint64_t{geo.in_w};
        if (!inside) group[oy * wo + ox] = k;
      }
    }
  }
  q.pixel_group = std::move(group);
}

}  // namespace tpuw::compiler::detail
