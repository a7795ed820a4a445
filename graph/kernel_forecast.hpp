#pragma once
// What the tiler may ask about the kernels the compiler will choose. The
// tiler runs before the kernel choice, and graph/ knows nothing of kernels
// (DESIGN.md), so the caller that does the choosing supplies the answers,
// as it would a cost model (kernels/kernel_forecast.hpp implements it with
// the kernel choice's own rules).
#include <cstdint>

#include "graph/graph.hpp"

namespace tessera::graph {

class KernelForecast {
 public:
  virtual ~KernelForecast() = default;
  // Whether op `op_index` of `graph`, a 3×3 stride-1 conv, will run as
  // Winograd F(4×4, 3×3): its tiles are then cut along the kernel's 4×4
  // blocks (tiler.cpp, winograd_tiling). A sparse weight's conv that runs
  // the sparse kernel instead wants plain runs of rows.
  virtual bool runs_winograd(const Graph& graph, int32_t op_index) const = 0;
  // Whether op `op_index`, a Conv with a fused residual, may write its
  // output over that residual (graph/memory_plan.cpp): its kernel reads
  // each residual element, in the output's layout, before writing the same
  // element of the output, and no other.
  virtual bool writes_over_residual(const Graph& graph, int32_t op_index) const {
    (void)graph;
    (void)op_index;
    return false;
  }
};

}  // namespace tessera::graph
