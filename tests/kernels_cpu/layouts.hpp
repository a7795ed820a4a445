#pragma once
// Test helpers for physical layouts (graph/layout.hpp): logical NCHW data
// to a layout's order and back, and a physical index's logical one.
#include <cstdint>
#include <vector>

#include "graph/layout.hpp"
#include "graph/shape.hpp"

namespace tessera::test {

// The logical (row-major NCHW) flat index of physical index `p` of a tensor
// of logical `shape` stored in `layout`.
inline int64_t logical_index(const graph::Shape& shape, graph::Layout layout, int64_t p) {
  if (layout != graph::Layout::NHWC || shape.size() != 4) return p;
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  const int64_t ch = p % c, pixel = p / c;
  const int64_t x = pixel % w, y = (pixel / w) % h, n = pixel / (w * h);
  return ((n * c + ch) * h + y) * w + x;
}

// Logical data → physical order of `layout`.
inline std::vector<float> to_layout(const std::vector<float>& logical, const graph::Shape& shape,
                                    graph::Layout layout) {
  std::vector<float> out(logical.size());
  for (int64_t p = 0; p < static_cast<int64_t>(out.size()); ++p)
    out[static_cast<size_t>(p)] = logical[static_cast<size_t>(logical_index(shape, layout, p))];
  return out;
}

// Physical data in `layout` → logical order.
inline std::vector<float> from_layout(const std::vector<float>& physical, const graph::Shape& shape,
                                      graph::Layout layout) {
  std::vector<float> out(physical.size());
  for (int64_t p = 0; p < static_cast<int64_t>(out.size()); ++p)
    out[static_cast<size_t>(logical_index(shape, layout, p))] = physical[static_cast<size_t>(p)];
  return out;
}

}  // namespace tessera::test
