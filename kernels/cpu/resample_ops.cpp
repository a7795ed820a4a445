// "cpu.pad" and "cpu.resize" (nearest): gathers by per-dim source indices
// in any uniform layout (kernels/cpu/simple_ops.hpp).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/layout.hpp"
#include "graph/source_index.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/simple_ops.hpp"

namespace tessera::kernels::cpu {

namespace {

// Output element (i_0, …, i_r) of the tile = x[Σ_d sources[d][i_d − begin_d]],
// or `value` where any source is negative (constant padding). The tile is
// walked in runs along the output's innermost dim in memory; a run whose
// sources are consecutive elements of x (the channels of an NHWC pixel, an
// unpadded stretch of a row) is one memcpy.
void gather_by_dim(const TileArgs& args, const std::vector<std::vector<int64_t>>& sources,
                   float value) {
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Region& r = *args.region;
  const size_t rank = out_shape.size();
  const std::vector<int64_t> out_strides = graph::layout_strides(out_shape, args.output.layout);
  const std::vector<size_t> order = graph::physical_dims(rank, args.output.layout);
  const size_t inner = order[0];
  const std::vector<int64_t>& run_sources = sources[inner];
  const int64_t run = r.extent(inner);
  bool consecutive = run_sources[0] >= 0;
  for (int64_t j = 1; consecutive && j < run; ++j)
    consecutive = run_sources[static_cast<size_t>(j)] == run_sources[0] + j;
  const float* x = args.inputs[0].data;
  std::vector<int64_t> index = r.begin;
  for (;;) {
    int64_t base = 0, out_off = index[inner] * out_strides[inner];
    bool padding = false;
    for (size_t k = 1; k < rank; ++k) {
      const size_t d = order[k];
      const int64_t s = sources[d][static_cast<size_t>(index[d] - r.begin[d])];
      padding = padding || s < 0;
      base += s;
      out_off += index[d] * out_strides[d];
    }
    float* dst = args.output.data + out_off;
    if (padding)
      std::fill_n(dst, run, value);
    else if (consecutive)
      std::memcpy(dst, x + base + run_sources[0], static_cast<size_t>(run) * sizeof(float));
    else
      for (int64_t j = 0; j < run; ++j) {
        const int64_t s = run_sources[static_cast<size_t>(j)];
        dst[j] = s < 0 ? value : x[base + s];
      }
    size_t k = 1;  // the odometer over the other dims, innermost first
    for (; k < rank; ++k) {
      const size_t d = order[k];
      if (++index[d] < r.end[d]) break;
      index[d] = r.begin[d];
    }
    if (k == rank) return;
  }
}

// The checks both variants share: one input of the output's rank, a region
// inside the output, the same layout in and out. False: nothing to write.
bool check_resample_args(const TileArgs& args, std::string_view variant) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape ||
      args.input_count != 1 || !args.inputs[0].data || !args.inputs[0].shape)
    fail_op(variant, args.op, "missing operator, region, output or input");
  const graph::Shape& out_shape = *args.output.shape;
  if (args.inputs[0].shape->size() != out_shape.size())
    fail_op(variant, args.op,
            "input " + graph::shape_to_string(*args.inputs[0].shape) + " and output " +
                graph::shape_to_string(out_shape) + " differ in rank");
  if (!graph::region_inside(*args.region, out_shape))
    fail_op(variant, args.op,
            "region " + graph::region_to_string(*args.region) + " is not inside the output " +
                graph::shape_to_string(out_shape));
  if (args.inputs[0].layout != args.output.layout && !graph::layout_immaterial(out_shape))
    fail_op(variant, args.op, "input and output layouts differ");
  return !args.region->empty() && !out_shape.empty();
}

constexpr std::string_view kPad = "cpu.pad";
constexpr std::string_view kResize = "cpu.resize";

}  // namespace

std::optional<std::string> pad_applies(const graph::Operator& op,
                                       std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Pad) return std::string("cpu.pad runs Pad only");
  if (inputs.size() != 1 || !inputs[0].shape || inputs[0].shape->empty())
    return std::string("cpu.pad needs one input of rank >= 1: uses the reference");
  return std::nullopt;
}

void pad(const TileArgs& args) {
  if (!check_resample_args(args, kPad)) {
    if (args.output.shape->empty() && !args.region->empty())
      args.output.data[0] = args.inputs[0].data[0];
    return;
  }
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const size_t rank = out_shape.size();
  if (a.pads.size() != 2 * rank) fail_op(kPad, args.op, "pads must have 2 entries per dim");
  for (size_t d = 0; d < rank; ++d)
    if (in_shape[d] + a.pads[d] + a.pads[d + rank] != out_shape[d])
      fail_op(kPad, args.op, "pads do not map the input onto the output");
  const std::vector<int64_t> in_strides = graph::layout_strides(in_shape, args.inputs[0].layout);
  const graph::Region& r = *args.region;
  std::vector<std::vector<int64_t>> sources(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t o = r.begin[d]; o < r.end[d]; ++o) {
      const int64_t i = graph::pad_source_index(o, a.pads[d], in_shape[d], a.pad_mode);
      sources[d].push_back(i < 0 ? -1 : i * in_strides[d]);
    }
  gather_by_dim(args, sources, a.pad_value);
}

std::optional<std::string> resize_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Resize) return std::string("cpu.resize runs Resize only");
  if (op.attrs.resize_mode != graph::ResizeMode::Nearest)
    return std::string("linear interpolation: uses the reference");
  if (inputs.size() != 1 || !inputs[0].shape || inputs[0].shape->empty() ||
      op.attrs.scales.size() != inputs[0].shape->size())
    return std::string("cpu.resize needs one input with a scale per dim: uses the reference");
  return std::nullopt;
}

void resize(const TileArgs& args) {
  if (!check_resample_args(args, kResize)) return;
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const size_t rank = out_shape.size();
  if (a.resize_mode != graph::ResizeMode::Nearest)
    fail_op(kResize, args.op, "only nearest resizing runs here");
  if (a.scales.size() != rank) fail_op(kResize, args.op, "scales must have one entry per dim");
  const std::vector<int64_t> in_strides = graph::layout_strides(in_shape, args.inputs[0].layout);
  const graph::Region& r = *args.region;
  std::vector<std::vector<int64_t>> sources(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t o = r.begin[d]; o < r.end[d]; ++o)
      sources[d].push_back(graph::resize_taps(a, d, o, in_shape[d], out_shape[d]).lo *
                           in_strides[d]);
  gather_by_dim(args, sources, 0.0f);
}

}  // namespace tessera::kernels::cpu
