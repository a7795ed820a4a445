// "cpu.concat": each input's share of the tile copied in runs (kernels/cpu/simple_ops.hpp).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/layout.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/simple_ops.hpp"

namespace tessera::kernels::cpu {

namespace {

constexpr std::string_view kConcat = "cpu.concat";

// Copies the box `r` of the output from input `x`, whose index along `axis`
// is the output's minus `shift`, in runs. Where the input is stored in the
// same order as the output, a run is a memcpy along the innermost dim in
// memory, merged with the next dims out while the box covers them whole (and
// they are not the axis, where the extents differ). Otherwise (an NCHW input
// of an NHWC concat) a run walks whichever side's innermost dim is longer in
// the box with unit stride and the other side with its stride: a pixel's
// few channels alone were runs of 3 floats in YOLO's stem.
void copy_box(const ConstTensorView& x, const TensorView& y, const graph::Region& r, size_t axis,
              int64_t shift) {
  const graph::Shape& out_shape = *y.shape;
  const size_t rank = out_shape.size();
  const std::vector<int64_t> out_strides = graph::layout_strides(out_shape, y.layout);
  const std::vector<int64_t> in_strides = graph::layout_strides(*x.shape, x.layout);
  const std::vector<size_t> order = graph::physical_dims(rank, y.layout);
  const std::vector<size_t> in_order = graph::physical_dims(rank, x.layout);
  const bool same_order = graph::layout_immaterial(out_shape) || order == in_order;
  size_t inner = order[0];
  if (!same_order && r.extent(in_order[0]) > r.extent(inner)) inner = in_order[0];
  int64_t run = r.extent(inner);
  std::vector<size_t> walk;  // the dims outside the run, innermost in the output first
  if (same_order) {
    size_t merged = 1;  // order[0 .. merged) are in the run
    while (merged < rank && order[merged - 1] != axis &&
           r.extent(order[merged - 1]) == out_shape[order[merged - 1]])
      run *= r.extent(order[merged++]);
    walk.assign(order.begin() + static_cast<std::ptrdiff_t>(merged), order.end());
  } else {
    for (size_t d : order)
      if (d != inner) walk.push_back(d);
  }
  const int64_t in_step = in_strides[inner], out_step = out_strides[inner];
  std::vector<int64_t> index = r.begin;
  for (;;) {
    int64_t in_off = 0, out_off = 0;
    for (size_t d = 0; d < rank; ++d) {
      out_off += index[d] * out_strides[d];
      in_off += (index[d] - (d == axis ? shift : 0)) * in_strides[d];
    }
    const float* from = x.data + in_off;
    float* to = y.data + out_off;
    if (same_order)
      std::memcpy(to, from, static_cast<size_t>(run) * sizeof(float));
    else
      for (int64_t j = 0; j < run; ++j) to[j * out_step] = from[j * in_step];
    size_t k = 0;  // the odometer
    for (; k < walk.size(); ++k) {
      const size_t d = walk[k];
      if (++index[d] < r.end[d]) break;
      index[d] = r.begin[d];
    }
    if (k == walk.size()) return;
  }
}

}  // namespace

std::optional<std::string> concat_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Concat) return std::string("cpu.concat runs Concat only");
  if (inputs.empty()) return std::string("cpu.concat needs an input");
  for (const ConstTensorView& in : inputs)
    if (!in.shape || in.shape->size() != inputs[0].shape->size())
      return std::string("inputs of different ranks: uses the reference");
  if (op.attrs.axis < 0 || static_cast<size_t>(op.attrs.axis) >= inputs[0].shape->size())
    return std::string("axis out of range: uses the reference");
  return std::nullopt;
}

void concat(const TileArgs& args) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape || args.input_count == 0)
    fail_op(kConcat, args.op, "missing operator, region, output or inputs");
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Region& r = *args.region;
  const size_t rank = out_shape.size();
  const int64_t axis_attr = args.op->attrs.axis;
  if (axis_attr < 0 || static_cast<size_t>(axis_attr) >= rank || rank == 0)
    fail_op(
        kConcat, args.op,
        "axis " + std::to_string(axis_attr) + " is out of range for rank " + std::to_string(rank));
  const auto axis = static_cast<size_t>(axis_attr);
  if (!graph::region_inside(r, out_shape))
    fail_op(kConcat, args.op,
            "region " + graph::region_to_string(r) + " is not inside the output " +
                graph::shape_to_string(out_shape));
  int64_t start = 0;  // where input i begins along the axis
  for (size_t i = 0; i < args.input_count; ++i) {
    const ConstTensorView& x = args.inputs[i];
    bool fits = x.data && x.shape && x.shape->size() == rank;
    for (size_t d = 0; fits && d < rank; ++d) fits = d == axis || (*x.shape)[d] == out_shape[d];
    if (!fits)
      fail_op(kConcat, args.op,
              "input " + std::to_string(i) + " " +
                  (x.shape ? graph::shape_to_string(*x.shape) : std::string("(none)")) +
                  " does not fit output " + graph::shape_to_string(out_shape));
    const int64_t end = start + (*x.shape)[axis];
    graph::Region part = r;
    part.begin[axis] = std::max(r.begin[axis], start);
    part.end[axis] = std::min(r.end[axis], end);
    if (!part.empty()) copy_box(x, args.output, part, axis, start);
    start = end;
  }
  if (start != out_shape[axis])
    fail_op(kConcat, args.op, "input sizes along the axis do not sum up");
}

}  // namespace tessera::kernels::cpu
