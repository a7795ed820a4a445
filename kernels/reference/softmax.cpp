// Reference Softmax and LogSoftmax, numerically stable (the maximum is
// subtracted first; LogSoftmax is x − max − log Σ exp(x − max), not the log
// of a softmax that may have underflowed to 0).
// Opset >= 13 normalises along `axis`; older opsets (softmax_coerce_2d)
// jointly over the dims [axis, rank). The statistics of each softmax row are
// computed over the whole row in a fixed order, whatever part the tile owns.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

// The maximum and the sum of exp(x - max) of one softmax row.
struct SoftmaxRow {
  float max;
  float sum;
};

// One output element of the row.
float softmax_value(float x, const SoftmaxRow& row, bool log) {
  return log ? (x - row.max) - std::log(row.sum) : std::exp(x - row.max) / row.sum;
}

SoftmaxRow row_statistics(const float* in, int64_t length, int64_t step) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < length; ++i) max = std::max(max, in[i * step]);
  float sum = 0.0f;
  for (int64_t i = 0; i < length; ++i) sum += std::exp(in[i * step] - max);
  return {max, sum};
}

// softmax(alpha * x + mask) along the last axis (a fused scale and mask,
// graph/fuse_softmax_input.hpp): each row's inputs are formed first, in
// float, rounded after the product and after the sum as the unfused Mul and
// Add would (a fused Div(x, c) multiplies by 1 / c instead).
void masked_softmax(const TileArgs& args) {
  const graph::Shape& shape = *args.output.shape;
  const size_t rank = shape.size();
  if (args.op->attrs.softmax_coerce_2d || static_cast<size_t>(args.op->attrs.axis) + 1 != rank)
    fail(args, "a fused scale or mask needs the last axis");
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const float alpha = args.op->attrs.alpha;
  const float* mask = args.input_count == 2 ? args.inputs[1].data : nullptr;
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const std::vector<int64_t> mask_strides =
      mask ? broadcast_strides(*args.inputs[1].shape, shape) : std::vector<int64_t>(rank, 0);
  const int64_t n = shape[rank - 1];
  std::vector<float> row(static_cast<size_t>(n));
  graph::Region rows = r;  // whole rows: offsets of each row's first element
  rows.begin[rank - 1] = 0;
  rows.end[rank - 1] = n;
  for_each_row<2>(rows, {strides.data(), mask_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 2>& at, int64_t) {
                    for (int64_t i = 0; i < n; ++i) {
                      float z = alpha * args.inputs[0].data[at[0] + i];
                      if (mask) z += mask[at[1] + i * mask_strides[rank - 1]];
                      row[static_cast<size_t>(i)] = z;
                    }
                    const SoftmaxRow stats = row_statistics(row.data(), n, 1);
                    for (int64_t i = r.begin[rank - 1]; i < r.end[rank - 1]; ++i)
                      args.output.data[at[0] + i] =
                          std::exp(row[static_cast<size_t>(i)] - stats.max) / stats.sum;
                  });
}

}  // namespace

void softmax(const TileArgs& args) {
  check_tile_args(args, 1, 2);
  const graph::Shape& shape = *args.output.shape;
  if (*args.inputs[0].shape != shape)
    fail(args, "input shape " + graph::shape_to_string(*args.inputs[0].shape) +
                   " differs from output shape " + graph::shape_to_string(shape));
  const size_t rank = shape.size();
  const int64_t axis = args.op->attrs.axis;
  if (rank == 0 || axis < 0 || static_cast<size_t>(axis) >= rank)
    fail(args,
         "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  const bool log = args.op->type == graph::OpType::LogSoftmax;
  if (args.input_count == 2 || args.op->attrs.alpha != 1.0f) {
    if (log) fail(args, "LogSoftmax has no fused scale or mask");
    return masked_softmax(args);
  }
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  const size_t a = static_cast<size_t>(axis);

  if (args.op->attrs.softmax_coerce_2d) {
    // One softmax row per index of the dims [0, axis): the contiguous block
    // of the dims [axis, rank).
    const int64_t row_length = graph::shape_numel(graph::Shape(shape.begin() + a, shape.end()));
    const std::span<const int64_t> begin(r.begin), end(r.end), st(strides);
    for_each_offset(begin.first(a), end.first(a), st.first(a), [&](int64_t row_offset) {
      const SoftmaxRow stats = row_statistics(in + row_offset, row_length, 1);
      for_each_offset(begin.subspan(a), end.subspan(a), st.subspan(a), [&](int64_t offset) {
        out[row_offset + offset] = softmax_value(in[row_offset + offset], stats, log);
      });
    });
    return;
  }

  // One softmax row per index of every dim but the axis.
  std::vector<int64_t> begin, end, st;
  for (size_t d = 0; d < rank; ++d) {
    if (d == a) continue;
    begin.push_back(r.begin[d]);
    end.push_back(r.end[d]);
    st.push_back(strides[d]);
  }
  const int64_t step = strides[a];
  for_each_offset(begin, end, st, [&](int64_t row_offset) {
    const SoftmaxRow stats = row_statistics(in + row_offset, shape[a], step);
    for (int64_t i = r.begin[a]; i < r.end[a]; ++i) {
      const int64_t offset = row_offset + i * step;
      out[offset] = softmax_value(in[offset], stats, log);
    }
  });
}

}  // namespace tessera::kernels::reference
