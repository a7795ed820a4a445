#pragma once
// Per-op dependency functions (ASPEN §3.1): which part of each input an output
// region reads. The tiler derives exact tile-to-tile edges from them.
#include <cstdint>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

struct InputDependency {
  int32_t operand = 0;  // position in Operator::inputs
  Region region;        // the part of that input read; never empty
};

// Regions of every input operand (weights included) that computing `out` of
// the op's output reads: receptive fields for conv/pool with stride, padding
// and dilation; whole rows where the op needs them (softmax, gemm's K).
std::vector<InputDependency> tile_dependencies(const Operator& op,
                                               const std::vector<Shape>& input_shapes,
                                               const Shape& output_shape, const Region& out);

}  // namespace tessera::graph
