// Reference reductions: ReduceMean, ReduceSum, ReduceMax, ... over any set
// of axes, and LayerNormalization (opset 17) and RMSNormalization (opset 23)
// over the dims [axis, rank). Each output element's statistics are summed
// over its whole reduction box in a fixed order (in double), whatever part of
// the output the tile owns, so any tiling gives bitwise identical results.
#include <algorithm>
#include <cmath>
#include <span>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void cumsum(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& shape = *args.output.shape;
  if (*args.inputs[0].shape != shape) fail(args, "input and output shapes differ");
  const auto axis = static_cast<size_t>(args.op->attrs.axis);
  if (axis >= shape.size()) fail(args, "axis out of range");
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const int64_t step = strides[axis];
  // Each output element sums its line from index 0, in order (float, as ONNX
  // Runtime), whatever part of the line the tile owns.
  graph::Region lines = *args.region;
  const int64_t first = lines.begin[axis], last = lines.end[axis];
  lines.begin[axis] = 0;
  lines.end[axis] = 1;
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  for_each_row<1>(lines, {strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 1>& at, int64_t length) {
                    const int64_t columns = axis + 1 == shape.size() ? 1 : length;
                    for (int64_t c = 0; c < columns; ++c) {
                      float sum = 0.0f;
                      for (int64_t i = 0; i < last; ++i) {
                        const int64_t e = at[0] + c + i * step;
                        sum += in[e];
                        if (i >= first) out[e] = sum;
                      }
                    }
                  });
}

namespace {

// One output element of a reduction over the values fn visits; max and min
// propagate NaN (as numpy's and ONNX Runtime's do).
template <class ForEachValue>
double reduce_box(graph::OpType type, double count, ForEachValue&& for_each_value) {
  using graph::OpType;
  double r = 0.0;
  switch (type) {
    case OpType::ReduceMax:
    case OpType::ReduceMin: {
      const bool is_max = type == OpType::ReduceMax;
      bool first = true;
      for_each_value([&](double v) {
        if (first || (!std::isnan(r) && (std::isnan(v) || (is_max ? v > r : v < r)))) r = v;
        first = false;
      });
      return r;
    }
    case OpType::ReduceProd:
      r = 1.0;
      for_each_value([&](double v) { r *= v; });
      return r;
    case OpType::ReduceSumSquare:
    case OpType::ReduceL2:
      for_each_value([&](double v) { r += v * v; });
      return type == OpType::ReduceL2 ? std::sqrt(r) : r;
    case OpType::ReduceL1:
      for_each_value([&](double v) { r += std::abs(v); });
      return r;
    case OpType::ReduceLogSumExp: {
      // log Σ exp(v) = m + log Σ exp(v − m), m the largest: no overflow.
      double m = -INFINITY;
      for_each_value([&](double v) { m = std::max(m, v); });
      if (std::isinf(m)) return m;
      for_each_value([&](double v) { r += std::exp(v - m); });
      return m + std::log(r);
    }
    default:  // ReduceMean, ReduceSum, ReduceLogSum
      for_each_value([&](double v) { r += v; });
      if (type == OpType::ReduceMean) return r / count;
      return type == OpType::ReduceLogSum ? std::log(r) : r;
  }
}

}  // namespace

void reduce(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const std::vector<int64_t> in_dense = graph::shape_strides(in_shape);
  // The reduced box (begin 0) and, per output dim, its stride into the input.
  std::vector<int64_t> box_begin, box_end, box_strides, out_to_in;
  graph::Shape expected;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    const bool reduced = std::binary_search(a.axes.begin(), a.axes.end(), static_cast<int64_t>(d));
    if (reduced) {
      box_begin.push_back(0);
      box_end.push_back(in_shape[d]);
      box_strides.push_back(in_dense[d]);
      if (a.keepdims) {
        out_to_in.push_back(0);
        expected.push_back(1);
      }
    } else {
      out_to_in.push_back(in_dense[d]);
      expected.push_back(in_shape[d]);
    }
  }
  if (expected != out_shape)
    fail(args, "axes do not reduce input " + graph::shape_to_string(in_shape) + " to output " +
                   graph::shape_to_string(out_shape));
  const double count = static_cast<double>(graph::shape_numel(graph::Shape(box_end)));
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const int64_t in_step = out_to_in.empty() ? 0 : out_to_in.back();
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  for_each_row<2>(*args.region, {out_strides.data(), out_to_in.data()},
                  [&](const int64_t*, const std::array<int64_t, 2>& offsets, int64_t length) {
                    for (int64_t i = 0; i < length; ++i) {
                      const float* base = in + offsets[1] + i * in_step;
                      const double r = reduce_box(args.op->type, count, [&](auto&& fn) {
                        for_each_offset(box_begin, box_end, box_strides,
                                        [&](int64_t offset) { fn(base[offset]); });
                      });
                      out[offsets[0] + i] = static_cast<float>(r);
                    }
                  });
}

void layer_normalization(const TileArgs& args) {
  // RMSNormalization: the same with the mean taken as 0 and no B.
  const bool rms = args.op->type == graph::OpType::RMSNormalization;
  check_tile_args(args, 2, rms ? 2 : 3);
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& shape = *args.output.shape;
  if (*args.inputs[0].shape != shape)
    fail(args, "input shape " + graph::shape_to_string(*args.inputs[0].shape) +
                   " differs from output shape " + graph::shape_to_string(shape));
  if (a.axis < 0 || static_cast<size_t>(a.axis) >= shape.size())
    fail(args, "axis " + std::to_string(a.axis) + " is out of range for rank " +
                   std::to_string(shape.size()));
  const auto axis = static_cast<size_t>(a.axis);
  const graph::Shape normalized(shape.begin() + a.axis, shape.end());
  for (size_t i = 1; i < args.input_count; ++i)
    if (*args.inputs[i].shape != normalized)
      fail(args, "Scale and B must have shape " + graph::shape_to_string(normalized));
  const int64_t row_length = graph::shape_numel(normalized);
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const graph::Region& r = *args.region;
  const std::span<const int64_t> begin(r.begin), end(r.end), st(strides);
  const float* x = args.inputs[0].data;
  const float* scale = args.inputs[1].data;
  const float* bias = args.input_count == 3 ? args.inputs[2].data : nullptr;
  float* y = args.output.data;
  const auto epsilon = static_cast<double>(a.epsilon);
  // One normalisation row per index of the dims [0, axis); within it, the
  // offset from the row start is also the offset into Scale and B.
  for_each_offset(begin.first(axis), end.first(axis), st.first(axis), [&](int64_t row) {
    const float* xr = x + row;
    double sum = 0.0;
    for (int64_t i = 0; i < row_length; ++i) sum += xr[i];
    const double mean = rms ? 0.0 : sum / static_cast<double>(row_length);
    double squares = 0.0;
    for (int64_t i = 0; i < row_length; ++i) {
      const double centred = xr[i] - mean;
      squares += centred * centred;
    }
    const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(row_length) + epsilon);
    for_each_offset(begin.subspan(axis), end.subspan(axis), st.subspan(axis), [&](int64_t k) {
      const double normalised = (xr[k] - mean) * inv_std;
      const double value = normalised * scale[k] + (bias ? bias[k] : 0.0f);
      y[row + k] = static_cast<float>(value);
    });
  });
}

}  // namespace tessera::kernels::reference
