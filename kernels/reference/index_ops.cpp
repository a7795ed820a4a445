// Reference data-movement kernels whose output element reads one input
// element through an index map: Transpose, Gather, Expand, Slice. They copy
// values, so any tiling gives bitwise identical results.
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

int64_t last_or_zero(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : v.back();
}

// out[i] = in[offset(i)] over the region, with input offsets given per output
// dim by `in_strides` (plus `in_base`).
void strided_copy(const TileArgs& args, const std::vector<int64_t>& in_strides, int64_t in_base) {
  const std::vector<int64_t> out_strides = graph::shape_strides(*args.output.shape);
  const int64_t step = last_or_zero(in_strides);
  const float* in = args.inputs[0].data + in_base;
  float* out = args.output.data;
  for_each_row<2>(*args.region, {out_strides.data(), in_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 2>& offsets, int64_t length) {
                    float* dst = out + offsets[0];
                    const float* src = in + offsets[1];
                    for (int64_t i = 0; i < length; ++i) dst[i] = src[i * step];
                  });
}

}  // namespace

void transpose(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const auto& perm = args.op->attrs.perm;
  if (perm.size() != in_shape.size() || out_shape.size() != in_shape.size())
    fail(args, "perm, input and output ranks differ");
  const std::vector<int64_t> dense = graph::shape_strides(in_shape);
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    const auto p = static_cast<size_t>(perm[i]);
    if (p >= in_shape.size() || in_shape[p] != out_shape[i])
      fail(args, "perm does not map input " + graph::shape_to_string(in_shape) + " onto output " +
                     graph::shape_to_string(out_shape));
    strides[i] = dense[p];  // output dim i walks input dim perm[i]
  }
  strided_copy(args, strides, 0);
}

void expand(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  if (!broadcasts_to(in_shape, out_shape))
    fail(args, "input " + graph::shape_to_string(in_shape) + " does not broadcast to output " +
                   graph::shape_to_string(out_shape));
  strided_copy(args, broadcast_strides(in_shape, out_shape), 0);
}

void slice(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const auto& starts = args.op->attrs.starts;
  const auto& steps = args.op->attrs.steps;
  const size_t rank = in_shape.size();
  if (starts.size() != rank || steps.size() != rank || out_shape.size() != rank)
    fail(args, "starts, steps, input and output ranks differ");
  const std::vector<int64_t> dense = graph::shape_strides(in_shape);
  std::vector<int64_t> strides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    // The shape function proved start + (n - 1) * step inside the dim.
    const int64_t last = starts[d] + (out_shape[d] - 1) * steps[d];
    if (starts[d] < 0 || starts[d] >= in_shape[d] || last < 0 || last >= in_shape[d])
      fail(args, "dim " + std::to_string(d) + " reads outside the input");
    strides[d] = dense[d] * steps[d];
    base += starts[d] * dense[d];
  }
  strided_copy(args, strides, base);
}

std::optional<std::string> gather_maps(const TileArgs& args, GatherMaps& maps) {
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& data_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const bool runtime_indices = args.input_count == 2;
  const graph::Shape& indices_shape = runtime_indices ? *args.inputs[1].shape : a.indices_shape;
  // Runtime indices live in an int64 arena tensor (the ConstTensorView
  // points at its bytes); constant ones in the attributes.
  maps.indices =
      runtime_indices ? reinterpret_cast<const int64_t*>(args.inputs[1].data) : a.indices.data();
  if (!runtime_indices &&
      static_cast<int64_t>(a.indices.size()) != graph::shape_numel(indices_shape))
    return std::string("constant indices do not match indices_shape");
  const size_t q = indices_shape.size();
  if (a.axis < 0 || static_cast<size_t>(a.axis) >= data_shape.size() ||
      out_shape.size() != data_shape.size() - 1 + q)
    return std::string("axis, data, indices and output ranks do not fit");
  const auto axis = static_cast<size_t>(a.axis);
  const std::vector<int64_t> data_dense = graph::shape_strides(data_shape);
  const std::vector<int64_t> indices_dense = graph::shape_strides(indices_shape);
  const size_t rank = out_shape.size();
  maps.data_strides.assign(rank, 0);
  maps.indices_strides.assign(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    if (d < axis)
      maps.data_strides[d] = data_dense[d];
    else if (d < axis + q)
      maps.indices_strides[d] = indices_dense[d - axis];
    else
      maps.data_strides[d] = data_dense[d - q + 1];
    if (out_shape[d] != (d < axis       ? data_shape[d]
                         : d < axis + q ? indices_shape[d - axis]
                                        : data_shape[d - q + 1]))
      return "output " + graph::shape_to_string(out_shape) + " does not fit data " +
             graph::shape_to_string(data_shape) + " and indices " +
             graph::shape_to_string(indices_shape);
  }
  maps.out_strides = graph::shape_strides(out_shape);
  maps.axis_size = data_shape[axis];
  maps.axis_stride = data_dense[axis];
  return std::nullopt;
}

void gather(const TileArgs& args) {
  check_tile_args(args, 1, 2);
  GatherMaps maps;
  if (const std::optional<std::string> why = gather_maps(args, maps)) fail(args, *why);
  const int64_t data_step = last_or_zero(maps.data_strides);
  const int64_t indices_step = last_or_zero(maps.indices_strides);
  const float* data = args.inputs[0].data;
  float* out = args.output.data;
  for_each_row<3>(*args.region,
                  {maps.out_strides.data(), maps.data_strides.data(), maps.indices_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 3>& offsets, int64_t length) {
                    for (int64_t i = 0; i < length; ++i) {
                      int64_t index = maps.indices[offsets[2] + i * indices_step];
                      if (index < -maps.axis_size || index >= maps.axis_size)
                        fail(args, maps.out_of_range(index, args.op->attrs.axis));
                      if (index < 0) index += maps.axis_size;
                      out[offsets[0] + i] =
                          data[offsets[1] + i * data_step + index * maps.axis_stride];
                    }
                  });
}

}  // namespace tessera::kernels::reference
