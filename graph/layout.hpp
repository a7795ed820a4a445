#pragma once
// The physical order of a tensor's elements in memory. Shapes, regions and
// dependency functions stay in ONNX's logical NCHW index space everywhere;
// only where an element of a rank-4 arena tensor lives changes (NHWC keeps
// a pixel's channels contiguous, so convolution as GEMM reads and writes
// pixel-major panels in place, as ASPEN's kernels do).
#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/shape.hpp"

namespace tessera::graph {

// Values are stored in `.tess` files: append, never renumber.
enum class Layout : uint8_t { NCHW = 0, NHWC = 1 };
inline constexpr Layout kLastLayout = Layout::NHWC;

constexpr std::string_view layout_name(Layout layout) {
  return layout == Layout::NHWC ? "NHWC" : "NCHW";
}

// Element strides of a tensor of logical shape `shape` stored in `layout`,
// indexed by LOGICAL dim: offset = sum_d index[d] * strides[d]. NHWC applies
// to rank 4 only; any other rank is dense row-major whatever `layout` says.
inline std::vector<int64_t> layout_strides(const Shape& shape, Layout layout) {
  if (layout != Layout::NHWC || shape.size() != 4) return shape_strides(shape);
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  return {h * w * c, 1, w * c, c};
}

// The logical dims of a rank-`rank` tensor stored in `layout`, from the
// innermost in memory outwards (NHWC: C, W, H, N).
inline std::vector<size_t> physical_dims(size_t rank, Layout layout) {
  if (layout == Layout::NHWC && rank == 4) return {1, 3, 2, 0};
  std::vector<size_t> order(rank);
  for (size_t i = 0; i < rank; ++i) order[i] = rank - 1 - i;
  return order;
}

// Whether NHWC and NCHW put every element of `shape` at the same offset
// (rank 4 with H·W == 1, or not rank 4): then the layout is immaterial.
inline bool layout_immaterial(const Shape& shape) {
  return shape.size() != 4 || shape[2] * shape[3] == 1;
}

}  // namespace tessera::graph
