// Reference data-movement kernels: Flatten and Reshape (the output is the
// input reinterpreted, same row-major data: NCHW only) and Concat (any
// layouts).
#include <algorithm>
#include <vector>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

// Copies the region's elements from the same flat index of the input.
void reinterpret_tile(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& out_shape = *args.output.shape;
  if (graph::shape_numel(*args.inputs[0].shape) != graph::shape_numel(out_shape))
    fail(args, "input " + graph::shape_to_string(*args.inputs[0].shape) + " and output " +
                   graph::shape_to_string(out_shape) + " differ in element count");
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  // The memory plan aliases the output to the input (graph/memory_plan.hpp):
  // the bytes are already there. Only true for plain row-major operands.
  if (in == out) {
    if (args.inputs[0].layout != graph::Layout::NCHW || args.output.layout != graph::Layout::NCHW)
      fail(args, "an aliased reshape needs NCHW input and output");
    return;
  }
  const std::vector<int64_t> strides = graph::shape_strides(out_shape);
  for_each_row<1>(*args.region, {strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 1>& offsets, int64_t length) {
                    std::copy(in + offsets[0], in + offsets[0] + length, out + offsets[0]);
                  });
}

}  // namespace

void flatten(const TileArgs& args) {
  reinterpret_tile(args);
}

void reshape(const TileArgs& args) {
  reinterpret_tile(args);
}

void concat(const TileArgs& args) {
  check_tile_args(args, 1, SIZE_MAX);
  const graph::Shape& out_shape = *args.output.shape;
  const size_t rank = out_shape.size();
  const int64_t axis = args.op->attrs.axis;
  if (axis < 0 || static_cast<size_t>(axis) >= rank)
    fail(args,
         "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  // starts[i]: where input i begins along the axis of the output.
  std::vector<int64_t> starts(args.input_count + 1, 0);
  for (size_t i = 0; i < args.input_count; ++i) {
    const graph::Shape& s = *args.inputs[i].shape;
    bool ok = s.size() == rank;
    for (size_t d = 0; ok && d < rank; ++d)
      ok = static_cast<int64_t>(d) == axis || s[d] == out_shape[d];
    if (!ok)
      fail(args, "input " + std::to_string(i) + " " + graph::shape_to_string(s) +
                     " does not fit output " + graph::shape_to_string(out_shape));
    starts[i + 1] = starts[i] + s[axis];
  }
  if (starts.back() != out_shape[axis]) fail(args, "input sizes along the axis do not sum up");

  bool all_nchw = args.output.layout == graph::Layout::NCHW;
  for (size_t i = 0; i < args.input_count; ++i)
    all_nchw = all_nchw && args.inputs[i].layout == graph::Layout::NCHW;
  if (!all_nchw) {
    // Some operand is NHWC: walk the region's rows along the last logical
    // dim and address every operand through its own layout's strides.
    std::vector<std::vector<int64_t>> in_strides;
    for (size_t i = 0; i < args.input_count; ++i)
      in_strides.push_back(layout_strides_of(args.inputs[i]));
    const std::vector<int64_t> out_strides = layout_strides_of(args.output);
    const int64_t out_step = out_strides.back();
    for_each_row<1>(
        *args.region, {out_strides.data()},
        [&](const int64_t* index, const std::array<int64_t, 1>& offsets, int64_t length) {
          for (int64_t k = 0; k < length; ++k) {
            // Index of element k of the row, and the input holding it.
            const int64_t last = index[rank - 1] + k;
            const int64_t pos = static_cast<size_t>(axis) == rank - 1 ? last : index[axis];
            const size_t i =
                std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin() - 1;
            int64_t src = 0;
            for (size_t d = 0; d < rank; ++d) {
              int64_t coord = d == rank - 1 ? last : index[d];
              if (static_cast<int64_t>(d) == axis) coord -= starts[i];
              src += coord * in_strides[i][d];
            }
            args.output.data[offsets[0] + k * out_step] = args.inputs[i].data[src];
          }
        });
    return;
  }

  // Per input, element offset = outer * (size_axis * inner) + a * inner + rest.
  int64_t inner = 1;
  for (size_t d = axis + 1; d < rank; ++d) inner *= out_shape[d];
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const size_t last = rank - 1;
  float* out = args.output.data;
  for_each_row<1>(
      *args.region, {out_strides.data()},
      [&](const int64_t* index, const std::array<int64_t, 1>& offsets, int64_t length) {
        // Split the row at input boundaries (only when the axis is the last dim).
        int64_t pos = index[axis];
        const int64_t row_end = static_cast<size_t>(axis) == last ? pos + length : pos + 1;
        float* dst = out + offsets[0];
        size_t i = std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin() - 1;
        while (pos < row_end) {
          const int64_t seg_end = std::min(row_end, starts[i + 1]);
          const int64_t size_axis = starts[i + 1] - starts[i];
          // Offset in input i of the element at output index with axis pos.
          int64_t outer_offset = 0;
          for (size_t d = 0; d < static_cast<size_t>(axis); ++d)
            outer_offset = outer_offset * out_shape[d] + index[d];
          int64_t rest = 0;
          for (size_t d = axis + 1; d < rank; ++d) rest = rest * out_shape[d] + index[d];
          const float* src = args.inputs[i].data + outer_offset * size_axis * inner +
                             (pos - starts[i]) * inner + rest;
          const int64_t count = static_cast<size_t>(axis) == last ? seg_end - pos : length;
          std::copy(src, src + count, dst);
          dst += count;
          pos = seg_end;
          ++i;
        }
      });
}

}  // namespace tessera::kernels::reference
