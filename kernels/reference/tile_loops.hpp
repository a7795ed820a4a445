#pragma once
// Loop helpers shared by the reference kernels: argument checks, odometer
// walks over a region with precomputed strides, and broadcast strides. Kept
// header-only so the hot loops inline into each kernel.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "graph/layout.hpp"
#include "graph/op_type.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::reference {

[[noreturn]] inline void fail(const TileArgs& args, const std::string& what) {
  std::string name = args.op ? args.op->name : std::string("?");
  std::string type = args.op ? std::string(graph::op_type_name(args.op->type)) : std::string("?");
  throw Error("reference " + type + " kernel for operator '" + name + "': " + what);
}

// Cheap per-tile sanity checks: a wrong call is a bug upstream (tiler or
// executor), and a clear error beats silent memory corruption.
inline void check_tile_args(const TileArgs& args, size_t min_inputs, size_t max_inputs) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape)
    fail(args, "missing operator, region or output");
  if (args.input_count < min_inputs || args.input_count > max_inputs)
    fail(args, "expected " + std::to_string(min_inputs) + ".." + std::to_string(max_inputs) +
                   " inputs, got " + std::to_string(args.input_count));
  for (size_t i = 0; i < args.input_count; ++i)
    if (!args.inputs[i].data || !args.inputs[i].shape)
      fail(args, "input " + std::to_string(i) + " has no data or shape");
  if (!graph::region_inside(*args.region, *args.output.shape))
    fail(args, "region " + graph::region_to_string(*args.region) + " is not inside the output " +
                   graph::shape_to_string(*args.output.shape));
}

// Integer division rounding toward -inf / +inf; b > 0.
inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
inline int64_t ceil_div(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// The i-th entry of an attribute list, or `fallback` when the list is short
// (the importer normalises attributes; this only guards hand-built operators).
inline int64_t attr_at(const std::vector<int64_t>& values, size_t i, int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

using graph::broadcasts_to;

// Strides of `in` seen through numpy broadcasting to `out` (ranks
// right-aligned): 0 in every dim where `in` has size 1 or is missing.
inline std::vector<int64_t> broadcast_strides(const graph::Shape& in, const graph::Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> dense = graph::shape_strides(in);
  const size_t shift = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) strides[d + shift] = dense[d];
  return strides;
}

// Element strides of a view's tensor by logical dim, in its layout.
template <class View>
std::vector<int64_t> layout_strides_of(const View& view) {
  return graph::layout_strides(*view.shape, view.layout);
}

// broadcast_strides for an operand stored in `layout`: its own layout's
// strides, 0 where it is broadcast.
inline std::vector<int64_t> broadcast_strides(const graph::Shape& in, graph::Layout layout,
                                              const graph::Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> own = graph::layout_strides(in, layout);
  const size_t shift = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) strides[d + shift] = own[d];
  return strides;
}

// Calls fn(index, offsets, row_length) once per row of `region` along its
// last dim. `index` is the multi-index of the row's first element, and
// offsets[k] = sum_d index[d] * strides[k][d]. A rank-0 region is one row of
// one element with index == nullptr.
template <size_t K, class Fn>
void for_each_row(const graph::Region& region, const std::array<const int64_t*, K>& strides,
                  Fn&& fn) {
  const size_t rank = region.rank();
  std::array<int64_t, K> offsets{};
  if (rank == 0) {
    fn(static_cast<const int64_t*>(nullptr), offsets, int64_t{1});
    return;
  }
  if (region.empty()) return;
  std::vector<int64_t> index = region.begin;
  for (size_t k = 0; k < K; ++k)
    for (size_t d = 0; d < rank; ++d) offsets[k] += index[d] * strides[k][d];
  const int64_t row_length = region.extent(rank - 1);
  for (;;) {
    fn(static_cast<const int64_t*>(index.data()), offsets, row_length);
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      ++index[d];
      for (size_t k = 0; k < K; ++k) offsets[k] += strides[k][d];
      if (index[d] < region.end[d]) break;
      for (size_t k = 0; k < K; ++k) offsets[k] -= (index[d] - region.begin[d]) * strides[k][d];
      index[d] = region.begin[d];
    }
  }
}

// Calls fn(offset) for every index of the box [begin, end) (all dims), with
// offset = sum_d index[d] * strides[d]. Zero dims: one call with offset 0.
template <class Fn>
void for_each_offset(std::span<const int64_t> begin, std::span<const int64_t> end,
                     std::span<const int64_t> strides, Fn&& fn) {
  const size_t n = begin.size();
  for (size_t d = 0; d < n; ++d)
    if (end[d] <= begin[d]) return;
  std::vector<int64_t> index(begin.begin(), begin.end());
  int64_t offset = 0;
  for (size_t d = 0; d < n; ++d) offset += index[d] * strides[d];
  for (;;) {
    fn(offset);
    size_t d = n;
    for (;;) {
      if (d == 0) return;
      --d;
      ++index[d];
      offset += strides[d];
      if (index[d] < end[d]) break;
      offset -= (index[d] - begin[d]) * strides[d];
      index[d] = begin[d];
    }
  }
}

}  // namespace tessera::kernels::reference
