#pragma once
// Random valid operator configurations for property tests.
#include <algorithm>
#include <random>
#include <vector>

#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "graph_builder.hpp"

namespace tessera::graph::test {

struct OpCase {
  Operator op;
  std::vector<Shape> in;
  Shape out;
};

inline int64_t rnd(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

inline Region random_region(std::mt19937& rng, const Shape& s) {
  Region r{Shape(s.size()), Shape(s.size())};
  for (size_t d = 0; d < s.size(); ++d) {
    int64_t a = rnd(rng, 0, s[d] - 1), b = rnd(rng, 0, s[d] - 1);
    r.begin[d] = std::min(a, b);
    r.end[d] = std::max(a, b) + 1;
  }
  return r;
}

inline Shape random_shape(std::mt19937& rng, size_t rank_lo, size_t rank_hi, int64_t dim_hi) {
  Shape s(
      static_cast<size_t>(rnd(rng, static_cast<int64_t>(rank_lo), static_cast<int64_t>(rank_hi))));
  for (auto& d : s) d = rnd(rng, 1, dim_hi);
  return s;
}

// A random factorisation of n into a shape of rank 1..4.
inline Shape random_factorisation(std::mt19937& rng, int64_t n) {
  Shape s;
  size_t rank = static_cast<size_t>(rnd(rng, 1, 4));
  for (size_t i = 0; i + 1 < rank; ++i) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= n; ++d)
      if (n % d == 0) divisors.push_back(d);
    int64_t d =
        divisors[static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(divisors.size()) - 1))];
    s.push_back(d);
    n /= d;
  }
  s.push_back(n);
  return s;
}

// One random op of `type` whose shapes check; retries until they do.
inline OpCase random_op(std::mt19937& rng, OpType type) {
  while (true) {
    OpCase c;
    c.op = make_op(type, {}, "rand");
    OpAttributes& a = c.op.attrs;
    switch (type) {
      case OpType::Conv: {
        a.group = rnd(rng, 1, 3);
        int64_t cg = rnd(rng, 1, 3), mg = rnd(rng, 1, 3);
        a = spatial_attrs({rnd(rng, 1, 4), rnd(rng, 1, 4)}, {rnd(rng, 1, 3), rnd(rng, 1, 3)},
                          {rnd(rng, 0, 3), rnd(rng, 0, 3), rnd(rng, 0, 3), rnd(rng, 0, 3)},
                          {rnd(rng, 1, 3), rnd(rng, 1, 3)});
        a.group = rnd(rng, 1, 3);
        c.in = {{rnd(rng, 1, 3), cg * a.group, rnd(rng, 1, 12), rnd(rng, 1, 12)},
                {mg * a.group, cg, a.kernel_shape[0], a.kernel_shape[1]}};
        if (rnd(rng, 0, 1)) c.in.push_back({mg * a.group});
        break;
      }
      case OpType::ConvTranspose: {
        // End pads down to -(stride - 1): output_padding (rows only the bias reaches).
        const int64_t sh = rnd(rng, 1, 3), sw = rnd(rng, 1, 3);
        a = spatial_attrs(
            {rnd(rng, 1, 4), rnd(rng, 1, 4)}, {sh, sw},
            {rnd(rng, 0, 2), rnd(rng, 0, 2), rnd(rng, 1 - sh, 2), rnd(rng, 1 - sw, 2)},
            {rnd(rng, 1, 3), rnd(rng, 1, 3)});
        a.group = rnd(rng, 1, 3);
        const int64_t cg = rnd(rng, 1, 3), mg = rnd(rng, 1, 3);
        c.in = {{rnd(rng, 1, 3), cg * a.group, rnd(rng, 1, 7), rnd(rng, 1, 7)},
                {cg * a.group, mg, a.kernel_shape[0], a.kernel_shape[1]}};
        if (rnd(rng, 0, 1)) c.in.push_back({mg * a.group});
        break;
      }
      case OpType::MaxPool:
      case OpType::AveragePool:
        a = spatial_attrs({rnd(rng, 1, 4), rnd(rng, 1, 4)}, {rnd(rng, 1, 3), rnd(rng, 1, 3)},
                          {rnd(rng, 0, 2), rnd(rng, 0, 2), rnd(rng, 0, 2), rnd(rng, 0, 2)},
                          {rnd(rng, 1, 2), rnd(rng, 1, 2)});
        a.ceil_mode = rnd(rng, 0, 1);
        c.in = {{rnd(rng, 1, 3), rnd(rng, 1, 4), rnd(rng, 1, 12), rnd(rng, 1, 12)}};
        break;
      case OpType::GlobalAveragePool:
        c.in = {random_shape(rng, 4, 4, 6)};
        break;
      case OpType::Gemm: {
        int64_t m = rnd(rng, 1, 7), k = rnd(rng, 1, 7), n = rnd(rng, 1, 7);
        a.trans_a = rnd(rng, 0, 1);
        a.trans_b = rnd(rng, 0, 1);
        c.in = {a.trans_a ? Shape{k, m} : Shape{m, k}, a.trans_b ? Shape{n, k} : Shape{k, n}};
        std::vector<Shape> cs = {{n}, {1}, {m, 1}, {1, n}, {m, n}, {}};
        int64_t pick = rnd(rng, 0, 6);
        if (pick < 6) c.in.push_back(cs[static_cast<size_t>(pick)]);
        break;
      }
      case OpType::MatMul: {
        Shape batch = random_shape(rng, 0, 2, 3);
        int64_t m = rnd(rng, 1, 5), k = rnd(rng, 1, 5), n = rnd(rng, 1, 5);
        auto side = [&](Shape tail) {
          Shape s;
          size_t drop = static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(batch.size())));
          for (size_t i = drop; i < batch.size(); ++i) s.push_back(rnd(rng, 0, 2) ? batch[i] : 1);
          s.insert(s.end(), tail.begin(), tail.end());
          return s;
        };
        c.in = {rnd(rng, 0, 4) ? side({m, k}) : Shape{k}, rnd(rng, 0, 4) ? side({k, n}) : Shape{k}};
        break;
      }
      case OpType::FusedAttention: {
        Shape batch = random_shape(rng, 0, 2, 3);
        const int64_t m = rnd(rng, 1, 5), d = rnd(rng, 1, 4), s = rnd(rng, 1, 5),
                      dv = rnd(rng, 1, 4);
        auto with = [&](int64_t rows, int64_t cols) {
          Shape x = batch;
          x.push_back(rows);
          x.push_back(cols);
          return x;
        };
        c.in = {with(m, d), with(d, s), with(s, dv)};
        if (rnd(rng, 0, 1)) {  // a mask broadcasting to the scores
          Shape scores = with(m, s), mask;
          size_t drop = static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(scores.size()) - 1));
          for (size_t i = drop; i < scores.size(); ++i)
            mask.push_back(rnd(rng, 0, 2) ? scores[i] : 1);
          c.in.push_back(mask);
        }
        a.alpha = 0.125f;
        break;
      }
      case OpType::Relu:
      case OpType::Sigmoid:
      case OpType::Clip:
        c.in = {random_shape(rng, 1, 4, 5)};
        break;
      case OpType::Add:
      case OpType::Mul: {
        Shape base = random_shape(rng, 1, 4, 5);
        for (int i = 0; i < 2; ++i) {
          Shape s;
          size_t drop = static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(base.size()) - 1));
          for (size_t d = drop; d < base.size(); ++d) s.push_back(rnd(rng, 0, 2) ? base[d] : 1);
          c.in.push_back(s);
        }
        break;
      }
      case OpType::Flatten: {
        c.in = {random_shape(rng, 1, 4, 5)};
        a.axis = rnd(rng, 0, static_cast<int64_t>(c.in[0].size()));
        int64_t outer = 1;
        for (int64_t i = 0; i < a.axis; ++i) outer *= c.in[0][static_cast<size_t>(i)];
        a.new_shape = {outer, shape_numel(c.in[0]) / outer};
        break;
      }
      case OpType::Reshape:
        c.in = {random_shape(rng, 1, 4, 6)};
        a.new_shape = random_factorisation(rng, shape_numel(c.in[0]));
        break;
      case OpType::Concat: {
        Shape base = random_shape(rng, 1, 4, 4);
        a.axis = rnd(rng, 0, static_cast<int64_t>(base.size()) - 1);
        int64_t count = rnd(rng, 1, 4);
        for (int64_t i = 0; i < count; ++i) {
          base[static_cast<size_t>(a.axis)] = rnd(rng, 1, 4);
          c.in.push_back(base);
        }
        break;
      }
      case OpType::Softmax:
      case OpType::LogSoftmax:
        c.in = {random_shape(rng, 1, 4, 5)};
        a.axis = rnd(rng, 0, static_cast<int64_t>(c.in[0].size()) - 1);
        a.softmax_coerce_2d = rnd(rng, 0, 1);
        break;
      case OpType::BatchNormalization: {
        c.in = {random_shape(rng, 2, 4, 5)};
        Shape p = {c.in[0][1]};
        c.in.insert(c.in.end(), {p, p, p, p});
        break;
      }
      case OpType::Transpose: {
        c.in = {random_shape(rng, 1, 4, 5)};
        a.perm.resize(c.in[0].size());
        for (size_t i = 0; i < a.perm.size(); ++i) a.perm[i] = static_cast<int64_t>(i);
        std::shuffle(a.perm.begin(), a.perm.end(), rng);
        break;
      }
      case OpType::Gather: {
        c.in = {random_shape(rng, 1, 3, 6)};
        a.axis = rnd(rng, 0, static_cast<int64_t>(c.in[0].size()) - 1);
        Shape indices = random_shape(rng, 0, 2, 4);
        if (rnd(rng, 0, 1)) {
          c.in.push_back(indices);  // run-time indices
        } else {
          const int64_t n = c.in[0][static_cast<size_t>(a.axis)];
          a.indices_shape = indices;
          for (int64_t i = 0; i < shape_numel(indices); ++i)
            a.indices.push_back(rnd(rng, -n, n - 1));
        }
        break;
      }
      case OpType::Sub:
      case OpType::Div:
      case OpType::Pow:
      case OpType::Where:
      case OpType::Expand: {
        Shape base = random_shape(rng, 1, 4, 5);
        const int operands = type == OpType::Where ? 3 : type == OpType::Expand ? 1 : 2;
        for (int i = 0; i < operands; ++i) {
          Shape s;
          size_t drop = static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(base.size()) - 1));
          for (size_t d = drop; d < base.size(); ++d) s.push_back(rnd(rng, 0, 2) ? base[d] : 1);
          c.in.push_back(s);
        }
        if (type == OpType::Expand) a.new_shape = base;
        break;
      }
      case OpType::Sqrt:
      case OpType::Erf:
      case OpType::Tanh:
      case OpType::Gelu:
        c.in = {random_shape(rng, 1, 4, 5)};
        a.gelu_tanh = rnd(rng, 0, 1);
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
        c.in = {random_shape(rng, 1, 4, 5)};
        for (int64_t d = 0; d < static_cast<int64_t>(c.in[0].size()); ++d)
          if (rnd(rng, 0, 1)) a.axes.push_back(d);
        // Empty axes (noop_with_empty_axes) now and then.
        if (a.axes.empty() && rnd(rng, 0, 3) != 0)
          a.axes.push_back(rnd(rng, 0, static_cast<int64_t>(c.in[0].size()) - 1));
        a.keepdims = rnd(rng, 0, 1);
        break;
      }
      case OpType::LayerNormalization:
      case OpType::RMSNormalization: {
        c.in = {random_shape(rng, 1, 4, 5)};
        a.axis = rnd(rng, 0, static_cast<int64_t>(c.in[0].size()) - 1);
        Shape p(c.in[0].begin() + a.axis, c.in[0].end());
        c.in.push_back(p);
        if (type == OpType::LayerNormalization && rnd(rng, 0, 1)) c.in.push_back(p);
        break;
      }
      case OpType::Slice: {
        c.in = {random_shape(rng, 1, 4, 7)};
        for (int64_t dim : c.in[0]) {
          int64_t step = rnd(rng, 1, 3) * (rnd(rng, 0, 2) ? 1 : -1);
          int64_t start = rnd(rng, 0, dim - 1);
          int64_t room = step > 0 ? (dim - 1 - start) / step : start / -step;
          a.starts.push_back(start);
          a.steps.push_back(step);
          a.new_shape.push_back(rnd(rng, 1, room + 1));
        }
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
        c.in = {random_shape(rng, 1, 4, 5)};
        break;
      case OpType::ToIndex:  // an int64 output
        c.in = {random_shape(rng, 1, 4, 5)};
        break;
      case OpType::CumSum:
        c.in = {random_shape(rng, 1, 4, 5)};
        a.axis = rnd(rng, 0, static_cast<int64_t>(c.in[0].size()) - 1);
        break;
      case OpType::Cast:  // an int64 operand
        c.in = {random_shape(rng, 1, 4, 5)};
        a.cast_to_bool = rnd(rng, 0, 1);
        break;
      case OpType::Equal:
      case OpType::Less:
      case OpType::LessOrEqual:
      case OpType::Greater:
      case OpType::GreaterOrEqual:
      case OpType::Max:
      case OpType::Min: {
        Shape base = random_shape(rng, 1, 4, 5);
        for (int i = 0; i < 2; ++i) {
          Shape s;
          size_t drop = static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(base.size()) - 1));
          for (size_t d = drop; d < base.size(); ++d) s.push_back(rnd(rng, 0, 2) ? base[d] : 1);
          c.in.push_back(s);
        }
        break;
      }
      case OpType::Pad: {
        // Pads wider than the dim (reflect repeats), negative ones (crops).
        c.in = {random_shape(rng, 1, 4, 5)};
        a.pad_mode = static_cast<PadMode>(rnd(rng, 0, 2));
        a.pads.resize(2 * c.in[0].size());
        for (auto& p : a.pads) p = rnd(rng, -2, 6);
        break;
      }
      case OpType::Resize: {
        c.in = {random_shape(rng, 1, 4, 6)};
        a.resize_mode = static_cast<ResizeMode>(rnd(rng, 0, 1));
        a.coordinate_mode = static_cast<CoordinateMode>(rnd(rng, 0, 4));
        a.nearest_mode = static_cast<NearestMode>(rnd(rng, 0, 3));
        for (int64_t dim : c.in[0]) {
          if (rnd(rng, 0, 1)) {  // from sizes: scale = out / in
            const int64_t out = rnd(rng, 1, 13);
            a.new_shape.push_back(out);
            a.scales.push_back(static_cast<float>(out) / static_cast<float>(dim));
          } else {  // from scales: out = floor(in * scale)
            const float scale = static_cast<float>(rnd(rng, 1, 16)) / 4.0f;
            a.scales.push_back(scale);
            a.new_shape.push_back(static_cast<int64_t>(scale * static_cast<float>(dim)));
          }
        }
        break;
      }
    }
    try {
      c.out = infer_output_shape(c.op, c.in);
      return c;
    } catch (const tessera::Error&) {
      // invalid combination: draw again
    }
  }
}

inline const std::vector<OpType>& all_op_types() {
  static const std::vector<OpType> types = {OpType::Conv,
                                            OpType::Gemm,
                                            OpType::MatMul,
                                            OpType::Relu,
                                            OpType::Clip,
                                            OpType::Sigmoid,
                                            OpType::Add,
                                            OpType::Mul,
                                            OpType::MaxPool,
                                            OpType::AveragePool,
                                            OpType::GlobalAveragePool,
                                            OpType::Flatten,
                                            OpType::Reshape,
                                            OpType::Concat,
                                            OpType::Softmax,
                                            OpType::BatchNormalization,
                                            OpType::Transpose,
                                            OpType::Gather,
                                            OpType::Sub,
                                            OpType::Div,
                                            OpType::Pow,
                                            OpType::Sqrt,
                                            OpType::Erf,
                                            OpType::Tanh,
                                            OpType::Where,
                                            OpType::Expand,
                                            OpType::ReduceMean,
                                            OpType::LayerNormalization,
                                            OpType::Slice,
                                            OpType::Gelu,
                                            OpType::LeakyRelu,
                                            OpType::HardSigmoid,
                                            OpType::HardSwish,
                                            OpType::Neg,
                                            OpType::Exp,
                                            OpType::Log,
                                            OpType::Reciprocal,
                                            OpType::Abs,
                                            OpType::Softplus,
                                            OpType::Max,
                                            OpType::Min,
                                            OpType::Pad,
                                            OpType::Resize,
                                            OpType::FusedAttention,
                                            OpType::ReduceSum,
                                            OpType::ReduceMax,
                                            OpType::ReduceMin,
                                            OpType::ReduceProd,
                                            OpType::ReduceSumSquare,
                                            OpType::ReduceL1,
                                            OpType::ReduceL2,
                                            OpType::ReduceLogSum,
                                            OpType::ReduceLogSumExp,
                                            OpType::LogSoftmax,
                                            OpType::RMSNormalization,
                                            OpType::ConvTranspose,
                                            OpType::IsNaN,
                                            OpType::Cast,
                                            OpType::Equal,
                                            OpType::Less,
                                            OpType::LessOrEqual,
                                            OpType::Greater,
                                            OpType::GreaterOrEqual,
                                            OpType::Sin,
                                            OpType::Cos,
                                            OpType::Floor,
                                            OpType::Ceil,
                                            OpType::Round,
                                            OpType::Sign,
                                            OpType::CumSum,
                                            OpType::ToIndex};
  return types;
}

}  // namespace tessera::graph::test
