// "cpu.softmax", "cpu.layer_norm", "cpu.transpose", "cpu.slice" and "cpu.gather". Softmax and
// LayerNorm: the row statistics and the per-element pass over contiguous rows through the vector
// loops of vector_ops.hpp (per-ISA, chosen by gemm_isa()), and vector_ops() itself. Each row's
// statistics are computed over the whole row, in one fixed order, whatever part of it the tile owns
// (the tiler never cuts a row: graph/tiler.cpp), so results do not depend on the tiling, the thread
// count or the ISA. Transpose and Slice copy (bitwise exact): whole runs when the innermost dim
// stays, else cache blocks of a 2-D transpose.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/simple_ops.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::cpu {

const VectorOps& vector_ops() {
  switch (gemm_isa()) {
    case GemmIsa::kAvx512:
      return kVectorOpsAvx512;
    case GemmIsa::kAvx2:
      return kVectorOpsAvx2;
    case GemmIsa::kPortable:
      break;
  }
  return kVectorOpsPortable;
}

namespace {

[[noreturn]] void fail(const TileArgs& args, std::string_view variant, const std::string& what) {
  fail_op(variant, args.op, what);
}

void check_args(const TileArgs& args, std::string_view variant, size_t min_inputs,
                size_t max_inputs, bool same_shape = true) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape ||
      args.input_count < min_inputs || args.input_count > max_inputs)
    fail(args, variant, "missing operator, region, output or inputs");
  for (size_t i = 0; i < args.input_count; ++i)
    if (!args.inputs[i].data || !args.inputs[i].shape)
      fail(args, variant, "input " + std::to_string(i) + " has no data or shape");
  if (!graph::region_inside(*args.region, *args.output.shape))
    fail(args, variant,
         "region " + graph::region_to_string(*args.region) + " is not inside the output " +
             graph::shape_to_string(*args.output.shape));
  if (same_shape && *args.inputs[0].shape != *args.output.shape)
    fail(args, variant,
         "input shape " + graph::shape_to_string(*args.inputs[0].shape) +
             " differs from output shape " + graph::shape_to_string(*args.output.shape));
}

// Calls fn(row_start, offset, length) once per contiguous span of `region`
// in a dense tensor of `shape` that lies inside one row of the dims [axis,
// rank): row_start is that row's first element.
template <class Fn>
void for_each_row_span(const graph::Region& region, const graph::Shape& shape, size_t axis,
                       Fn&& fn) {
  const size_t rank = shape.size();
  if (region.empty()) return;
  size_t s = rank - 1;
  while (s > axis && region.begin[s] == 0 && region.end[s] == shape[s]) --s;
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const int64_t length = region.extent(s) * strides[s];
  std::vector<int64_t> index = region.begin;
  for (;;) {
    int64_t row_start = 0, offset = 0;
    for (size_t d = 0; d < axis; ++d) row_start += index[d] * strides[d];
    offset = row_start;
    for (size_t d = axis; d <= s; ++d) offset += index[d] * strides[d];
    fn(row_start, offset, length);
    size_t d = s;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < region.end[d]) break;
      index[d] = region.begin[d];
    }
  }
}

constexpr std::string_view kSoftmax = "cpu.softmax";

// softmax(alpha * x + mask) along the last axis (graph/fuse_softmax_input.hpp):
// each row's inputs are formed in a per-thread buffer, rounded as the
// reference rounds them, and their exps kept there; the scores are read
// once and the softmax written once.
void masked_softmax(const TileArgs& args) {
  const graph::Shape& shape = *args.output.shape;
  const size_t rank = shape.size();
  const float alpha = args.op->attrs.alpha;
  const float* x = args.inputs[0].data;
  const float* mask = args.input_count == 2 ? args.inputs[1].data : nullptr;
  float* y = args.output.data;
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const std::vector<int64_t> mask_strides =
      mask ? reference::broadcast_strides(*args.inputs[1].shape, shape)
           : std::vector<int64_t>(rank, 0);
  const int64_t n = shape[rank - 1];
  const graph::Region& region = *args.region;
  if (region.empty()) return;
  const int64_t b = region.begin[rank - 1], length = region.extent(rank - 1);
  thread_local std::vector<float> row;
  float* z = grown(row, n);
  const VectorOps& ops = vector_ops();
  graph::Region rows = region;  // whole rows: offsets of each row's first element
  rows.begin[rank - 1] = 0;
  rows.end[rank - 1] = n;
  const int64_t mask_step = mask_strides[rank - 1];  // 1, or 0 for a value per row
  reference::for_each_row<2>(rows, {strides.data(), mask_strides.data()},
                             [&](const int64_t*, const std::array<int64_t, 2>& at, int64_t) {
                               ops.scaled_masked_softmax_row(x + at[0], alpha,
                                                             mask ? mask + at[1] : nullptr,
                                                             mask_step, z, y + at[0], n, b, length);
                             });
}

constexpr std::string_view kLayerNorm = "cpu.layer_norm";
constexpr std::string_view kTranspose = "cpu.transpose";
constexpr std::string_view kSlice = "cpu.slice";
constexpr std::string_view kGather = "cpu.gather";

std::optional<std::string> axis_reason(const graph::Shape& shape, int64_t axis) {
  if (shape.empty()) return std::string("the input is a scalar: uses the reference");
  if (axis < 0 || static_cast<size_t>(axis) >= shape.size())
    return "axis " + std::to_string(axis) + " is out of range for rank " +
           std::to_string(shape.size()) + ": uses the reference";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> softmax_applies(const graph::Operator& op,
                                           std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Softmax) return std::string("cpu.softmax runs Softmax only");
  if (inputs.empty() || inputs.size() > 2 || !inputs[0].shape)
    return std::string("cpu.softmax needs X and an optional fused mask");
  if (std::optional<std::string> why = axis_reason(*inputs[0].shape, op.attrs.axis)) return why;
  const bool fused = inputs.size() == 2 || op.attrs.alpha != 1.0f;
  if (fused && (op.attrs.softmax_coerce_2d ||
                static_cast<size_t>(op.attrs.axis) + 1 != inputs[0].shape->size()))
    return std::string("a fused scale or mask off the last axis: uses the reference");
  if (inputs.size() == 2 && (!inputs[1].shape || inputs[1].layout != graph::Layout::NCHW))
    return std::string("the fused mask is not row-major: uses the reference");
  return std::nullopt;
}

void softmax(const TileArgs& args) {
  check_args(args, kSoftmax, 1, 2);
  const graph::Shape& shape = *args.output.shape;
  if (const std::optional<std::string> why = softmax_applies(
          *args.op, std::span<const ConstTensorView>(args.inputs, args.input_count)))
    fail(args, kSoftmax, *why);
  if (args.input_count == 2 || args.op->attrs.alpha != 1.0f) return masked_softmax(args);
  const auto axis = static_cast<size_t>(args.op->attrs.axis);
  const size_t rank = shape.size();
  const graph::Region& region = *args.region;
  if (region.empty()) return;
  const VectorOps& ops = vector_ops();
  const float* x = args.inputs[0].data;
  float* y = args.output.data;
  if (args.op->attrs.softmax_coerce_2d || axis + 1 == rank) {
    // Contiguous rows: the dims [axis, rank) (opset < 13), or the last dim.
    const int64_t row_length =
        graph::shape_numel(graph::Shape(shape.begin() + static_cast<ptrdiff_t>(axis), shape.end()));
    int64_t cached_row = -1;
    SoftmaxStats stats;
    for_each_row_span(region, shape, axis, [&](int64_t row_start, int64_t offset, int64_t length) {
      if (offset == row_start && length == row_length) {  // the tile holds the whole row
        ops.softmax_row(x + row_start, y + row_start, row_length);
        return;
      }
      if (row_start != cached_row) {
        stats = ops.softmax_stats(x + row_start, row_length);
        cached_row = row_start;
      }
      ops.softmax_scale(x + offset, y + offset, length, stats);
    });
    return;
  }
  // A strided axis: each row is gathered into a contiguous buffer, run
  // through the same loops, and its tile part scattered back.
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const int64_t n = shape[axis], step = strides[axis];
  std::vector<float> row(static_cast<size_t>(n)), result(static_cast<size_t>(n));
  graph::Region outer = region;  // one element along the axis: one row each
  outer.begin[axis] = 0;
  outer.end[axis] = 1;
  std::vector<int64_t> index = outer.begin;
  for (;;) {
    int64_t row_start = 0;
    for (size_t d = 0; d < rank; ++d) row_start += index[d] * strides[d];
    for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = x[row_start + i * step];
    const SoftmaxStats stats = ops.softmax_stats(row.data(), n);
    const int64_t b = region.begin[axis], e = region.end[axis];
    ops.softmax_scale(row.data() + b, result.data() + b, e - b, stats);
    for (int64_t i = b; i < e; ++i) y[row_start + i * step] = result[static_cast<size_t>(i)];
    size_t d = rank;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < outer.end[d]) break;
      index[d] = outer.begin[d];
    }
  }
}

std::optional<std::string> layer_norm_applies(const graph::Operator& op,
                                              std::span<const ConstTensorView> inputs) {
  const bool rms = op.type == graph::OpType::RMSNormalization;
  if (op.type != graph::OpType::LayerNormalization && !rms)
    return std::string("cpu.layer_norm runs LayerNormalization and RMSNormalization only");
  if (inputs.size() < 2 || inputs.size() > (rms ? 2u : 3u) || !inputs[0].shape)
    return std::string("cpu.layer_norm needs X, Scale and (LayerNormalization) an optional B");
  const graph::Shape& shape = *inputs[0].shape;
  if (std::optional<std::string> why = axis_reason(shape, op.attrs.axis)) return why;
  const graph::Shape normalized(shape.begin() + op.attrs.axis, shape.end());
  for (size_t i = 1; i < inputs.size(); ++i)
    if (!inputs[i].shape || *inputs[i].shape != normalized)
      return "Scale and B are not of the normalised shape " + graph::shape_to_string(normalized) +
             " (broadcast parameters): uses the reference";
  return std::nullopt;
}

void layer_norm(const TileArgs& args) {
  check_args(args, kLayerNorm, 2, 3);
  const graph::Shape& shape = *args.output.shape;
  const std::span<const ConstTensorView> inputs(args.inputs, args.input_count);
  if (const std::optional<std::string> why = layer_norm_applies(*args.op, inputs))
    fail(args, kLayerNorm, *why);
  const auto axis = static_cast<size_t>(args.op->attrs.axis);
  const int64_t row_length =
      graph::shape_numel(graph::Shape(shape.begin() + static_cast<ptrdiff_t>(axis), shape.end()));
  const VectorOps& ops = vector_ops();
  const float* x = args.inputs[0].data;
  const float* scale = args.inputs[1].data;
  const float* bias = args.input_count == 3 ? args.inputs[2].data : nullptr;
  float* y = args.output.data;
  const float epsilon = args.op->attrs.epsilon;
  const bool rms = args.op->type == graph::OpType::RMSNormalization;
  int64_t cached_row = -1;
  LayerNormStats stats;
  for_each_row_span(*args.region, shape, axis,
                    [&](int64_t row_start, int64_t offset, int64_t length) {
                      if (row_start != cached_row) {
                        stats = rms ? ops.rms_norm_stats(x + row_start, row_length, epsilon)
                                    : ops.layer_norm_stats(x + row_start, row_length, epsilon);
                        cached_row = row_start;
                      }
                      // Within a row, the offset from its start indexes Scale and B.
                      const int64_t k = offset - row_start;
                      ops.layer_norm_apply(x + offset, scale + k, bias ? bias + k : nullptr,
                                           y + offset, length, stats);
                    });
}

std::optional<std::string> transpose_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Transpose) return std::string("cpu.transpose runs Transpose only");
  if (inputs.size() != 1 || !inputs[0].shape) return std::string("cpu.transpose needs one input");
  const size_t rank = inputs[0].shape->size();
  std::vector<bool> seen(rank, false);
  if (op.attrs.perm.size() != rank)
    return std::string("perm does not match the input rank: uses the reference");
  for (int64_t p : op.attrs.perm) {
    if (p < 0 || static_cast<size_t>(p) >= rank || seen[static_cast<size_t>(p)])
      return std::string("perm is not a permutation: uses the reference");
    seen[static_cast<size_t>(p)] = true;
  }
  return std::nullopt;
}

namespace {

// Region r of a dense output whose element at index i is
// x[sum over d of i_d · in_strides[d]]: Transpose (strides of the permuted
// input dims) and Slice (the input's strides times the steps, x at the
// starts). Contiguous runs where the output's last dim walks the input with
// stride 1, 16 × 16 blocks of a 2-D transpose where another output dim q
// does, else a strided copy per row.
void copy_strided_view(const float* x, const std::vector<int64_t>& in_strides, float* y,
                       const graph::Shape& out_shape, const graph::Region& r) {
  if (r.empty()) return;
  const auto transpose = vector_ops().transpose;
  const size_t rank = out_shape.size();
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const size_t last = rank - 1;
  // The output dim that walks the input's contiguous memory, if any.
  size_t q = last;
  if (in_strides[last] != 1)
    for (size_t i = 0; i < rank; ++i)
      if (in_strides[i] == 1) q = i;
  // The odometer runs over every output dim but `last` and (when it moves) q.
  std::vector<int64_t> index = r.begin;
  auto walked = [&](size_t d) { return d != last && (q == last || d != q); };
  const int64_t cols = r.extent(last);
  const int64_t col_step = in_strides[last];
  for (;;) {
    int64_t in_off = 0, out_off = 0;
    for (size_t d = 0; d < rank; ++d)
      if (walked(d)) {
        in_off += index[d] * in_strides[d];
        out_off += index[d] * out_strides[d];
      }
    in_off += r.begin[last] * col_step;
    out_off += r.begin[last];
    if (q == last && col_step == 1) {
      // The innermost dim stays: one contiguous run.
      std::memcpy(y + out_off, x + in_off, static_cast<size_t>(cols) * sizeof(float));
    } else if (q == last) {
      for (int64_t j = 0; j < cols; ++j) y[out_off + j] = x[in_off + j * col_step];
    } else {
      // A 2-D transpose: rows along output dim q (contiguous in the input),
      // columns along the output's last dim, in the ISA's register blocks
      // (VectorOps::transpose: input row j holds output column j). Element
      // by element in 16 x 16 blocks, BERT's 12 K^T transposes ([128, 12,
      // 64] -> [12, 64, 128]) took 0.84 ms per run at 1 thread; in 4 x 4 SSE
      // blocks, BERT's K^T of [8, 128, 12, 64] (perm 0, 2, 3, 1) 0.38 ms, as
      // long as its two exported transposes took one after the other.
      const int64_t rows = r.extent(q), row_out = out_strides[q];
      in_off += r.begin[q];
      out_off += r.begin[q] * row_out;
      transpose(x + in_off, col_step, cols, rows, y + out_off, row_out);
    }
    size_t d = rank;
    for (;;) {
      if (d == 0) return;
      --d;
      if (!walked(d)) continue;
      if (++index[d] < r.end[d]) break;
      index[d] = r.begin[d];
    }
  }
}

}  // namespace

void transpose(const TileArgs& args) {
  check_args(args, kTranspose, 1, 1, /*same_shape=*/false);
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const std::vector<int64_t>& perm = args.op->attrs.perm;
  const size_t rank = out_shape.size();
  if (perm.size() != rank || in_shape.size() != rank)
    fail(args, kTranspose, "perm, input and output ranks differ");
  const std::vector<int64_t> in_dense = graph::shape_strides(in_shape);
  std::vector<int64_t> in_strides(rank);  // per output dim
  for (size_t i = 0; i < rank; ++i) {
    const auto p = static_cast<size_t>(perm[i]);
    if (perm[i] < 0 || p >= rank || in_shape[p] != out_shape[i])
      fail(args, kTranspose,
           "perm does not map input " + graph::shape_to_string(in_shape) + " onto output " +
               graph::shape_to_string(out_shape));
    in_strides[i] = in_dense[p];
  }
  copy_strided_view(args.inputs[0].data, in_strides, args.output.data, out_shape, *args.region);
}

std::optional<std::string> slice_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Slice) return std::string("cpu.slice runs Slice only");
  if (inputs.size() != 1 || !inputs[0].shape) return std::string("cpu.slice needs one input");
  const size_t rank = inputs[0].shape->size();
  if (op.attrs.starts.size() != rank || op.attrs.steps.size() != rank)
    return std::string("starts or steps do not match the input rank: uses the reference");
  return std::nullopt;
}

void slice(const TileArgs& args) {
  check_args(args, kSlice, 1, 1, /*same_shape=*/false);
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const std::vector<int64_t>& starts = args.op->attrs.starts;
  const std::vector<int64_t>& steps = args.op->attrs.steps;
  const size_t rank = in_shape.size();
  if (starts.size() != rank || steps.size() != rank || out_shape.size() != rank)
    fail(args, kSlice, "starts, steps, input and output ranks differ");
  const std::vector<int64_t> dense = graph::shape_strides(in_shape);
  std::vector<int64_t> strides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == 0) return;
    // The shape function proved start + (n - 1) * step inside the dim.
    const int64_t end = starts[d] + (out_shape[d] - 1) * steps[d];
    if (starts[d] < 0 || starts[d] >= in_shape[d] || end < 0 || end >= in_shape[d])
      fail(args, kSlice, "dim " + std::to_string(d) + " reads outside the input");
    strides[d] = dense[d] * steps[d];
    base += starts[d] * dense[d];
  }
  copy_strided_view(args.inputs[0].data + base, strides, args.output.data, out_shape, *args.region);
}

std::optional<std::string> gather_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Gather) return std::string("cpu.gather runs Gather only");
  if (inputs.empty() || inputs.size() > 2 || !inputs[0].shape)
    return std::string("cpu.gather needs data and optional run-time indices");
  if (op.attrs.axis < 0 || static_cast<size_t>(op.attrs.axis) + 1 >= inputs[0].shape->size())
    return std::string("gathers along the data's last dim (no rows to copy): uses the reference");
  return std::nullopt;
}

// The reference's index maps (reference::gather_maps), with one index per
// output row: the last output dim is a data dim after the
// axis, so a row is a contiguous run of the data, copied whole, its index
// checked once. The reference reloaded and checked the index and copied one
// float at a time: BERT's token embeddings ([8, 128] ids into [30522, 768])
// took 1.1 ms per run.
void gather(const TileArgs& args) {
  check_args(args, kGather, 1, 2, /*same_shape=*/false);
  if (const std::optional<std::string> why =
          gather_applies(*args.op, std::span<const ConstTensorView>(args.inputs, args.input_count)))
    fail(args, kGather, *why);
  reference::GatherMaps maps;
  if (const std::optional<std::string> why = reference::gather_maps(args, maps))
    fail(args, kGather, *why);
  const float* data = args.inputs[0].data;
  float* out = args.output.data;
  reference::for_each_row<3>(
      *args.region,
      {maps.out_strides.data(), maps.data_strides.data(), maps.indices_strides.data()},
      [&](const int64_t*, const std::array<int64_t, 3>& offsets, int64_t length) {
        int64_t index = maps.indices[offsets[2]];
        if (index < -maps.axis_size || index >= maps.axis_size)
          fail(args, kGather, maps.out_of_range(index, args.op->attrs.axis));
        if (index < 0) index += maps.axis_size;
        std::memcpy(out + offsets[0], data + offsets[1] + index * maps.axis_stride,
                    static_cast<size_t>(length) * sizeof(float));
      });
}

}  // namespace tessera::kernels::cpu
