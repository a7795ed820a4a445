#pragma once
// Brute-force enumeration, straight from each op's definition, of the input
// elements that one output element reads. Tests compare dependency functions
// and tile edges with it.
#include <algorithm>
#include <functional>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"
#include "graph/source_index.hpp"

namespace tessera::graph::test {

using Coord = std::vector<int64_t>;
using ReadFn = std::function<void(int32_t operand, const Coord& at)>;

inline Coord unflatten(int64_t f, const Shape& s) {
  Coord c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = f % s[d];
    f /= s[d];
  }
  return c;
}

inline int64_t flatten(const Coord& c, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

// Visits every coordinate of a region.
inline void for_each_coord(const Region& r, const std::function<void(const Coord&)>& fn) {
  if (r.empty()) return;
  Coord c = r.begin;
  while (true) {
    fn(c);
    size_t d = c.size();
    while (d > 0) {
      --d;
      if (++c[d] < r.end[d]) break;
      c[d] = r.begin[d];
      if (d == 0) return;
    }
    if (c.empty()) return;
  }
}

// Right-aligned broadcast of an output coordinate onto an operand.
inline Coord broadcast_coord(const Coord& out, const Shape& in) {
  Coord c(in.size());
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) c[i] = in[i] == 1 ? 0 : out[off + i];
  return c;
}

inline void brute_force_reads(const Operator& op, const std::vector<Shape>& in, const Coord& o,
                              const ReadFn& read) {
  const OpAttributes& a = op.attrs;
  switch (op.type) {
    case OpType::Conv: {
      int64_t m = in[1][0], cg = in[1][1];
      int64_t g = o[1] / (m / a.group);
      for (int64_t c = g * cg; c < (g + 1) * cg; ++c)
        for (int64_t kh = 0; kh < in[1][2]; ++kh)
          for (int64_t kw = 0; kw < in[1][3]; ++kw) {
            int64_t ih = o[2] * a.strides[0] - a.pads[0] + kh * a.dilations[0];
            int64_t iw = o[3] * a.strides[1] - a.pads[1] + kw * a.dilations[1];
            if (ih < 0 || ih >= in[0][2] || iw < 0 || iw >= in[0][3]) continue;
            read(0, {o[0], c, ih, iw});
            read(1, {o[1], c - g * cg, kh, kw});
          }
      if (in.size() == 3) read(2, {o[1]});
      break;
    }
    case OpType::ConvTranspose: {
      // Input pixel i feeds output i * stride - pad + k * dilation.
      const int64_t cg = in[0][1] / a.group, mg = in[1][1], g = o[1] / mg;
      for (int64_t c = g * cg; c < (g + 1) * cg; ++c)
        for (int64_t kh = 0; kh < in[1][2]; ++kh)
          for (int64_t kw = 0; kw < in[1][3]; ++kw) {
            const int64_t th = o[2] + a.pads[0] - kh * a.dilations[0];
            const int64_t tw = o[3] + a.pads[1] - kw * a.dilations[1];
            if (th < 0 || tw < 0 || th % a.strides[0] || tw % a.strides[1]) continue;
            const int64_t ih = th / a.strides[0], iw = tw / a.strides[1];
            if (ih >= in[0][2] || iw >= in[0][3]) continue;
            read(0, {o[0], c, ih, iw});
            read(1, {c, o[1] - g * mg, kh, kw});
          }
      if (in.size() == 3) read(2, {o[1]});
      break;
    }
    case OpType::MaxPool:
    case OpType::AveragePool:
      for (int64_t kh = 0; kh < a.kernel_shape[0]; ++kh)
        for (int64_t kw = 0; kw < a.kernel_shape[1]; ++kw) {
          int64_t ih = o[2] * a.strides[0] - a.pads[0] + kh * a.dilations[0];
          int64_t iw = o[3] * a.strides[1] - a.pads[1] + kw * a.dilations[1];
          if (ih < 0 || ih >= in[0][2] || iw < 0 || iw >= in[0][3]) continue;
          read(0, {o[0], o[1], ih, iw});
        }
      break;
    case OpType::GlobalAveragePool:
      for (int64_t h = 0; h < in[0][2]; ++h)
        for (int64_t w = 0; w < in[0][3]; ++w) read(0, {o[0], o[1], h, w});
      break;
    case OpType::Gemm: {
      int64_t k = a.trans_a ? in[0][0] : in[0][1];
      for (int64_t i = 0; i < k; ++i) {
        read(0, a.trans_a ? Coord{i, o[0]} : Coord{o[0], i});
        read(1, a.trans_b ? Coord{o[1], i} : Coord{i, o[1]});
      }
      if (in.size() == 3) read(2, broadcast_coord(o, in[2]));
      break;
    }
    case OpType::MatMul: {
      Shape sa = in[0], sb = in[1];
      bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
      if (a_vec) sa.insert(sa.begin(), 1);
      if (b_vec) sb.push_back(1);
      size_t br = std::max(sa.size(), sb.size()) - 2;
      Coord full(o.begin(), o.begin() + static_cast<int64_t>(br));
      size_t pos = br;
      int64_t row = a_vec ? 0 : o[pos++];
      int64_t col = b_vec ? 0 : o[pos];
      Coord ba = broadcast_coord(full, Shape(sa.begin(), sa.end() - 2));
      Coord bb = broadcast_coord(full, Shape(sb.begin(), sb.end() - 2));
      for (int64_t k = 0; k < sa.back(); ++k) {
        Coord ca = ba, cb = bb;
        if (a_vec) {
          ca = {k};
        } else {
          ca.push_back(row);
          ca.push_back(k);
        }
        cb.push_back(k);
        if (!b_vec) cb.push_back(col);
        read(0, ca);
        read(1, cb);
      }
      break;
    }
    case OpType::FusedAttention: {
      // Output (..., i, n) reads row i of Q, all of KT, column n of V and
      // row i of the mask's scores (the softmax normalises the whole row).
      const size_t rank = o.size();
      const int64_t d = in[0][rank - 1], s = in[1][rank - 1];
      Coord batch(o.begin(), o.end() - 2);
      auto at = [&](int64_t r, int64_t c) {
        Coord x = batch;
        x.push_back(r);
        x.push_back(c);
        return x;
      };
      for (int64_t k = 0; k < d; ++k) read(0, at(o[rank - 2], k));
      for (int64_t k = 0; k < d; ++k)
        for (int64_t j = 0; j < s; ++j) read(1, at(k, j));
      for (int64_t j = 0; j < s; ++j) {
        read(2, at(j, o[rank - 1]));
        if (in.size() == 4) read(3, broadcast_coord(at(o[rank - 2], j), in[3]));
      }
      break;
    }
    case OpType::Relu:
    case OpType::Sigmoid:
    case OpType::Clip:
      read(0, o);
      break;
    case OpType::Add:
    case OpType::Mul:
      read(0, broadcast_coord(o, in[0]));
      read(1, broadcast_coord(o, in[1]));
      break;
    case OpType::Flatten:
    case OpType::Reshape:
      read(0, unflatten(flatten(o, a.new_shape), in[0]));
      break;
    case OpType::Concat: {
      int64_t off = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        int64_t x = o[static_cast<size_t>(a.axis)] - off;
        if (x >= 0 && x < in[i][static_cast<size_t>(a.axis)]) {
          Coord c = o;
          c[static_cast<size_t>(a.axis)] = x;
          read(static_cast<int32_t>(i), c);
        }
        off += in[i][static_cast<size_t>(a.axis)];
      }
      break;
    }
    case OpType::Softmax:
    case OpType::LogSoftmax: {
      Region r = Region{o, o};
      for (auto& e : r.end) ++e;
      size_t axis = static_cast<size_t>(a.axis);
      size_t last = a.softmax_coerce_2d ? o.size() : axis + 1;
      for (size_t d = axis; d < last; ++d) {
        r.begin[d] = 0;
        r.end[d] = in[0][d];
      }
      for_each_coord(r, [&](const Coord& c) { read(0, c); });
      break;
    }
    case OpType::BatchNormalization:
      read(0, o);
      for (int32_t i = 1; i < 5; ++i) read(i, {o[1]});
      break;
    case OpType::Transpose: {
      Coord c(o.size());
      for (size_t i = 0; i < o.size(); ++i) c[static_cast<size_t>(a.perm[i])] = o[i];
      read(0, c);
      break;
    }
    case OpType::Gather: {
      const auto axis = static_cast<size_t>(a.axis);
      const Shape ishape = in.size() == 2 ? in[1] : Shape(a.indices_shape);
      const size_t q = ishape.size();
      Coord idx(o.begin() + static_cast<int64_t>(axis), o.begin() + static_cast<int64_t>(axis + q));
      Coord c(o.begin(), o.begin() + static_cast<int64_t>(axis));
      c.push_back(0);
      c.insert(c.end(), o.begin() + static_cast<int64_t>(axis + q), o.end());
      if (in.size() == 2) {  // indices unknown: every row along the axis
        read(1, idx);
        for (int64_t k = 0; k < in[0][axis]; ++k) {
          c[axis] = k;
          read(0, c);
        }
      } else {
        int64_t v = a.indices[static_cast<size_t>(flatten(idx, ishape))];
        c[axis] = v < 0 ? v + in[0][axis] : v;
        read(0, c);
      }
      break;
    }
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
    case OpType::Where:
    case OpType::Expand:
      for (size_t i = 0; i < in.size(); ++i)
        read(static_cast<int32_t>(i), broadcast_coord(o, in[i]));
      break;
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
      read(0, o);
      break;
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSum:
    case OpType::ReduceLogSumExp: {
      // The input coordinates whose kept dims equal the output's.
      Region r = Region::whole(in[0]);
      size_t k = 0;
      for (size_t d = 0; d < in[0].size(); ++d) {
        const bool reduced =
            std::find(a.axes.begin(), a.axes.end(), static_cast<int64_t>(d)) != a.axes.end();
        if (!reduced) r.begin[d] = o[k], r.end[d] = o[k] + 1;
        if (!reduced || a.keepdims) ++k;
      }
      for_each_coord(r, [&](const Coord& c) { read(0, c); });
      break;
    }
    case OpType::LayerNormalization:
    case OpType::RMSNormalization: {
      const auto axis = static_cast<size_t>(a.axis);
      Region r{o, o};
      for (auto& e : r.end) ++e;
      for (size_t d = axis; d < o.size(); ++d) r.begin[d] = 0, r.end[d] = in[0][d];
      for_each_coord(r, [&](const Coord& c) { read(0, c); });
      const Coord p(o.begin() + static_cast<int64_t>(axis), o.end());
      for (size_t i = 1; i < in.size(); ++i) read(static_cast<int32_t>(i), p);
      break;
    }
    case OpType::Slice: {
      Coord c(o.size());
      for (size_t d = 0; d < o.size(); ++d) c[d] = a.starts[d] + o[d] * a.steps[d];
      read(0, c);
      break;
    }
    case OpType::LeakyRelu:
    case OpType::HardSigmoid:
    case OpType::HardSwish:
    case OpType::Neg:
    case OpType::Exp:
    case OpType::Log:
    case OpType::Reciprocal:
    case OpType::Abs:
    case OpType::Softplus:
    case OpType::Sin:
    case OpType::Cos:
    case OpType::Floor:
    case OpType::Ceil:
    case OpType::Round:
    case OpType::Sign:
    case OpType::IsNaN:
    case OpType::Cast:
    case OpType::ToIndex:
      read(0, o);
      break;
    case OpType::CumSum: {  // the line along the axis up to o
      Coord i = o;
      const auto axis = static_cast<size_t>(a.axis);
      for (i[axis] = 0; i[axis] <= o[axis]; ++i[axis]) read(0, i);
      break;
    } break;
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Max:
    case OpType::Min:
      read(0, broadcast_coord(o, in[0]));
      read(1, broadcast_coord(o, in[1]));
      break;
    case OpType::Pad: {
      // Straight from the definitions: constant padding reads nothing,
      // edge clamps, reflect mirrors about the first and last element.
      const size_t rank = o.size();
      Coord c(rank);
      for (size_t d = 0; d < rank; ++d) {
        const int64_t n = in[0][d];
        int64_t i = o[d] - a.pads[d];
        if (i < 0 || i >= n) {
          if (a.pad_mode == PadMode::Constant) return;
          if (a.pad_mode == PadMode::Edge) {
            i = i < 0 ? 0 : n - 1;
          } else {
            while (i < 0 || i >= n) {
              if (n == 1)
                i = 0;
              else if (i < 0)
                i = -i;
              else
                i = 2 * (n - 1) - i;
            }
          }
        }
        c[d] = i;
      }
      read(0, c);
      break;
    }
    case OpType::Resize: {
      // Every corner of the interpolation (one for nearest): the taps'
      // product, each dim's taps from its coordinate map.
      const size_t rank = o.size();
      std::vector<std::vector<int64_t>> taps(rank);
      for (size_t d = 0; d < rank; ++d) {
        const ResizeTaps t = resize_taps(a, d, o[d], in[0][d], a.new_shape[d]);
        taps[d].push_back(t.lo);
        if (t.hi_weight != 0.0f) taps[d].push_back(t.hi);
      }
      Region r{Coord(rank), Coord(rank)};
      for (size_t d = 0; d < rank; ++d) {
        r.begin[d] = *std::min_element(taps[d].begin(), taps[d].end());
        r.end[d] = *std::max_element(taps[d].begin(), taps[d].end()) + 1;
      }
      for_each_coord(r, [&](const Coord& c) { read(0, c); });
      break;
    }
  }
}

// Bounding boxes, per operand, of what the output region reads.
inline std::vector<Region> brute_force_boxes(const Operator& op, const std::vector<Shape>& in,
                                             const Region& out) {
  std::vector<Region> boxes(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    boxes[i].begin.assign(in[i].size(), INT64_MAX);
    boxes[i].end.assign(in[i].size(), INT64_MIN);
  }
  for_each_coord(out, [&](const Coord& o) {
    brute_force_reads(op, in, o, [&](int32_t operand, const Coord& at) {
      Region& b = boxes[static_cast<size_t>(operand)];
      for (size_t d = 0; d < at.size(); ++d) {
        b.begin[d] = std::min(b.begin[d], at[d]);
        b.end[d] = std::max(b.end[d], at[d] + 1);
      }
    });
  });
  return boxes;
}

}  // namespace tessera::graph::test
