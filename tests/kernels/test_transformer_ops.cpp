// The transformer reference kernels (Sub, Div, Pow, Sqrt, Erf, Tanh, Gelu,
// Where, Transpose, Gather, Expand, Slice, ReduceMean, LayerNormalization)
// vs. naive whole-tensor formulas in double on random shapes (sizes 1 and
// primes included); every case also checks random tilings bitwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

// An int64 tensor carried in a Tensor's float storage (the kernel reads the bytes).
Tensor int64_tensor(const Shape& shape, const std::vector<int64_t>& values) {
  Tensor t{shape, std::vector<float>(values.size() * 2)};
  std::memcpy(t.data.data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

TEST_CASE("Sub, Div, Pow, Where reference: broadcasting vs naive; tiling") {
  const OpType types[] = {OpType::Sub, OpType::Div, OpType::Pow, OpType::Where};
  for (int trial = 0; trial < 160; ++trial) {
    const uint64_t seed = base_seed() + 11000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const OpType type = types[trial % 4];
    const Shape out = random_shape(rng, 1, 4);
    std::vector<Tensor> in;
    for (int i = 0; i < (type == OpType::Where ? 3 : 2); ++i)
      in.push_back(random_tensor(broadcastable(out, rng), rng));
    if (type == OpType::Pow || type == OpType::Div)  // positive base / divisor away from 0
      for (float& v : in[type == OpType::Pow ? 0 : 1].data) v = 0.25f + std::fabs(v) * 2;
    if (type == OpType::Pow)
      for (float& v : in[1].data) v *= 3;
    if (type == OpType::Where)
      for (float& v : in[0].data) v = v > 0 ? 1.0f : 0.0f;
    std::vector<double> expected(static_cast<size_t>(graph::shape_numel(out)));
    for (size_t f = 0; f < expected.size(); ++f) {
      const auto index = unravel(static_cast<int64_t>(f), out);
      std::vector<double> v;
      for (const Tensor& t : in) v.push_back(t.data[broadcast_flat(index, t.shape)]);
      expected[f] = type == OpType::Sub   ? v[0] - v[1]
                    : type == OpType::Div ? v[0] / v[1]
                    : type == OpType::Pow ? std::pow(v[0], v[1])
                                          : (v[0] != 0 ? v[1] : v[2]);
    }
    check_kernel(make_op(type), in, out, expected, rng);
  }
}

TEST_CASE("Sqrt, Erf, Tanh, Gelu (exact and tanh) reference vs naive; tiling") {
  const OpType types[] = {OpType::Sqrt, OpType::Erf, OpType::Tanh, OpType::Gelu};
  for (int trial = 0; trial < 120; ++trial) {
    const uint64_t seed = base_seed() + 12000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const OpType type = types[trial % 4];
    graph::Operator op = make_op(type);
    op.attrs.gelu_tanh = rng.coin();
    const Shape shape = random_shape(rng, 1, 4);
    Tensor x = random_tensor(shape, rng);
    for (float& v : x.data) v = type == OpType::Sqrt ? std::fabs(v) * 9 : v * 4;
    std::vector<double> expected;
    for (float f : x.data) {
      const double v = f;
      if (type == OpType::Sqrt) expected.push_back(std::sqrt(v));
      if (type == OpType::Erf) expected.push_back(std::erf(v));
      if (type == OpType::Tanh) expected.push_back(std::tanh(v));
      if (type == OpType::Gelu)
        expected.push_back(
            op.attrs.gelu_tanh
                ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    }
    check_kernel(op, {x}, shape, expected, rng);
  }
}

TEST_CASE("Transpose, Expand, Slice reference vs naive index maps; tiling") {
  for (int trial = 0; trial < 150; ++trial) {
    const uint64_t seed = base_seed() + 13000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const int kind = trial % 3;
    Shape in_shape = random_shape(rng, 1, 4, 8);
    graph::Operator op;
    Shape out;
    std::vector<int64_t> source;  // per output element, the flat input index
    if (kind == 0) {
      op = make_op(OpType::Transpose);
      op.attrs.perm.resize(in_shape.size());
      std::iota(op.attrs.perm.begin(), op.attrs.perm.end(), 0);
      std::shuffle(op.attrs.perm.begin(), op.attrs.perm.end(), rng.engine);
      for (int64_t p : op.attrs.perm) out.push_back(in_shape[static_cast<size_t>(p)]);
      for (int64_t f = 0; f < graph::shape_numel(out); ++f) {
        const auto o = unravel(f, out);
        std::vector<int64_t> i(o.size());
        for (size_t d = 0; d < o.size(); ++d) i[static_cast<size_t>(op.attrs.perm[d])] = o[d];
        source.push_back(ravel(i, in_shape));
      }
    } else if (kind == 1) {
      op = make_op(OpType::Expand);
      out = in_shape;
      in_shape = broadcastable(out, rng);
      op.attrs.new_shape = out;
      for (int64_t f = 0; f < graph::shape_numel(out); ++f)
        source.push_back(broadcast_flat(unravel(f, out), in_shape));
    } else {
      op = make_op(OpType::Slice);
      for (int64_t dim : in_shape) {
        const int64_t step = rng.uniform(1, 3) * (rng.coin() ? 1 : -1);
        const int64_t start = rng.uniform(0, dim - 1);
        const int64_t room = step > 0 ? (dim - 1 - start) / step : start / -step;
        op.attrs.starts.push_back(start);
        op.attrs.steps.push_back(step);
        out.push_back(rng.uniform(1, room + 1));
      }
      op.attrs.new_shape = out;
      for (int64_t f = 0; f < graph::shape_numel(out); ++f) {
        auto i = unravel(f, out);
        for (size_t d = 0; d < i.size(); ++d) i[d] = op.attrs.starts[d] + i[d] * op.attrs.steps[d];
        source.push_back(ravel(i, in_shape));
      }
    }
    const Tensor x = random_tensor(in_shape, rng);
    std::vector<double> expected;
    for (int64_t s : source) expected.push_back(x.data[static_cast<size_t>(s)]);
    check_kernel(op, {x}, out, expected, rng);
  }
}

TEST_CASE("Gather reference: int64 input or constant indices, negative indices; tiling") {
  for (int trial = 0; trial < 120; ++trial) {
    const uint64_t seed = base_seed() + 14000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const Shape data_shape = random_shape(rng, 1, 3, 11);
    graph::Operator op = make_op(OpType::Gather);
    op.attrs.axis = rng.uniform(0, static_cast<int64_t>(data_shape.size()) - 1);
    const auto axis = static_cast<size_t>(op.attrs.axis);
    const int64_t n = data_shape[axis];
    const Shape indices_shape = random_shape(rng, 0, 2, 5);
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < graph::shape_numel(indices_shape); ++i)
      indices.push_back(rng.uniform(-n, n - 1));
    const Tensor data = random_tensor(data_shape, rng);
    std::vector<Tensor> in{data};
    if (rng.coin()) {
      in.push_back(int64_tensor(indices_shape, indices));
    } else {
      op.attrs.indices = indices;
      op.attrs.indices_shape = indices_shape;
    }
    Shape out(data_shape.begin(), data_shape.begin() + op.attrs.axis);
    out.insert(out.end(), indices_shape.begin(), indices_shape.end());
    out.insert(out.end(), data_shape.begin() + op.attrs.axis + 1, data_shape.end());
    if (out.empty()) continue;  // rank-0 outputs exist only as folded constants
    std::vector<double> expected;
    const size_t q = indices_shape.size();
    for (int64_t f = 0; f < graph::shape_numel(out); ++f) {
      const auto o = unravel(f, out);
      const std::vector<int64_t> ii(o.begin() + op.attrs.axis, o.begin() + op.attrs.axis + q);
      int64_t k = indices[static_cast<size_t>(ravel(ii, indices_shape))];
      std::vector<int64_t> di(o.begin(), o.begin() + op.attrs.axis);
      di.push_back(k < 0 ? k + n : k);
      di.insert(di.end(), o.begin() + op.attrs.axis + q, o.end());
      expected.push_back(data.data[static_cast<size_t>(ravel(di, data_shape))]);
    }
    check_kernel(op, in, out, expected, rng);
  }
}

TEST_CASE("Gather reference: an out-of-range run-time index is a tessera::Error") {
  graph::Operator op = make_op(OpType::Gather);
  const std::vector<Tensor> in{{{3, 2}, {1, 2, 3, 4, 5, 6}}, int64_tensor({2}, {1, 3})};
  CHECK_THROWS_AS(run_whole(find_tile_kernel(OpType::Gather, "reference"), op, in, {2, 2}),
                  tessera::Error);
}

// A reduction of the values of one box, computed the textbook way.
double naive_reduction(OpType type, const std::vector<double>& v) {
  double r = 0;
  switch (type) {
    case OpType::ReduceMax:
      return *std::max_element(v.begin(), v.end());
    case OpType::ReduceMin:
      return *std::min_element(v.begin(), v.end());
    case OpType::ReduceProd:
      r = 1;
      for (double x : v) r *= x;
      return r;
    case OpType::ReduceSumSquare:
      for (double x : v) r += x * x;
      return r;
    case OpType::ReduceL1:
      for (double x : v) r += std::fabs(x);
      return r;
    case OpType::ReduceL2:
      for (double x : v) r += x * x;
      return std::sqrt(r);
    case OpType::ReduceLogSumExp:
      for (double x : v) r += std::exp(x);
      return std::log(r);
    default:
      for (double x : v) r += x;
      if (type == OpType::ReduceMean) return r / static_cast<double>(v.size());
      return type == OpType::ReduceLogSum ? std::log(r) : r;
  }
}

TEST_CASE("ReduceMax and ReduceMin propagate NaN wherever it is in the box") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Columns: NaN first, NaN last, no NaN.
  const Tensor x{{2, 3}, {nan, 1, 4, 3, nan, -2}};
  for (OpType type : {OpType::ReduceMax, OpType::ReduceMin}) {
    graph::Operator op = make_op(type);
    op.attrs.axes = {0};
    op.attrs.keepdims = false;
    const std::vector<float> y = run_whole(find_tile_kernel(type, "reference"), op, {x}, {3});
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    CHECK(y[2] == (type == OpType::ReduceMax ? 4.0f : -2.0f));
  }
}

TEST_CASE("Reductions, LayerNormalization and RMSNormalization reference vs naive double; tiling") {
  const std::vector<OpType> reductions = {
      OpType::ReduceMean,   OpType::ReduceSum,       OpType::ReduceMax, OpType::ReduceMin,
      OpType::ReduceProd,   OpType::ReduceSumSquare, OpType::ReduceL1,  OpType::ReduceL2,
      OpType::ReduceLogSum, OpType::ReduceLogSumExp};
  for (int trial = 0; trial < 240; ++trial) {
    const uint64_t seed = base_seed() + 15000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const Shape shape = random_shape(rng, 1, 4);
    const auto rank = static_cast<int64_t>(shape.size());
    Tensor x = random_tensor(shape, rng);
    if (trial % 4 != 3) {
      const OpType type = reductions[static_cast<size_t>(trial / 4) % reductions.size()];
      INFO(graph::op_type_name(type));
      graph::Operator op = make_op(type);
      // ReduceLogSum of positive sums only; ReduceProd of factors near 1
      // (a product of 100 values in [-1, 1) is denormal).
      if (type == OpType::ReduceLogSum)
        for (float& v : x.data) v = std::fabs(v) + 0.01f;
      if (type == OpType::ReduceProd)
        for (float& v : x.data) v = 1.0f + 0.1f * v;
      for (int64_t d = 0; d < rank; ++d)
        if (rng.coin()) op.attrs.axes.push_back(d);
      // No axes at all: noop_with_empty_axes, each element reduced alone.
      if (op.attrs.axes.empty() && rng.uniform(0, 3) != 0)
        op.attrs.axes.push_back(rng.uniform(0, rank - 1));
      op.attrs.keepdims = rng.coin() || static_cast<int64_t>(op.attrs.axes.size()) == rank;
      const auto reduced = [&](size_t d) {
        return std::count(op.attrs.axes.begin(), op.attrs.axes.end(), static_cast<int64_t>(d));
      };
      Shape out;
      for (size_t d = 0; d < shape.size(); ++d)
        if (!reduced(d) || op.attrs.keepdims) out.push_back(reduced(d) ? 1 : shape[d]);
      std::vector<std::vector<double>> boxes(static_cast<size_t>(graph::shape_numel(out)));
      for (int64_t f = 0; f < graph::shape_numel(shape); ++f) {
        const auto i = unravel(f, shape);
        std::vector<int64_t> o;
        for (size_t d = 0; d < shape.size(); ++d)
          if (!reduced(d) || op.attrs.keepdims) o.push_back(reduced(d) ? 0 : i[d]);
        boxes[static_cast<size_t>(ravel(o, out))].push_back(x.data[static_cast<size_t>(f)]);
      }
      std::vector<double> expected;
      for (const auto& box : boxes) expected.push_back(naive_reduction(type, box));
      check_kernel(op, {x}, out, expected, rng);
    } else {
      const bool rms = rng.coin();
      graph::Operator op = make_op(rms ? OpType::RMSNormalization : OpType::LayerNormalization);
      op.attrs.axis = rng.uniform(0, rank - 1);
      op.attrs.epsilon = rng.coin() ? 1e-5f : 0.1f;
      const Shape normalized(shape.begin() + op.attrs.axis, shape.end());
      std::vector<Tensor> in{x, random_tensor(normalized, rng)};
      if (!rms && rng.coin()) in.push_back(random_tensor(normalized, rng));
      const int64_t row = graph::shape_numel(normalized);
      std::vector<double> expected;
      for (int64_t r = 0; r < graph::shape_numel(shape) / row; ++r) {
        double mean = 0, var = 0;
        for (int64_t k = 0; k < row; ++k) mean += x.data[static_cast<size_t>(r * row + k)];
        mean = rms ? 0.0 : mean / static_cast<double>(row);  // RMS: x / sqrt(mean(x²) + eps)
        for (int64_t k = 0; k < row; ++k) {
          const double c = x.data[static_cast<size_t>(r * row + k)] - mean;
          var += c * c / static_cast<double>(row);
        }
        for (int64_t k = 0; k < row; ++k) {
          const double y = (x.data[static_cast<size_t>(r * row + k)] - mean) /
                           std::sqrt(var + static_cast<double>(op.attrs.epsilon));
          expected.push_back(y * in[1].data[static_cast<size_t>(k)] +
                             (in.size() == 3 ? in[2].data[static_cast<size_t>(k)] : 0.0));
        }
      }
      check_kernel(op, in, shape, expected, rng);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::test
