#pragma once
// The compiler's passes from operator graph to tile graph: BN folding, tiling
// (APU, ASPEN §3.1), tile edges, memory plan. Knows nothing of kernels.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/sparsity.hpp"
#include "graph/tile_graph.hpp"

namespace tessera::graph {

struct OpReport {
  std::string name;
  OpType type;
  std::string kernel;
  int32_t tiles = 0;
  std::string note;  // e.g. "BatchNormalization folded in"
};

struct CompileReport {
  std::vector<OpReport> ops;
  int64_t nodes = 0;
  int64_t edges = 0;
  uint64_t arena_bytes = 0;
  uint64_t arena_bytes_without_reuse = 0;
  // Edges the memory plan added to bound run-ahead (MemoryPlanOptions).
  int64_t ordering_edges = 0;
  int32_t reuse_distance = 0;  // the one the memory plan used (CompileOptions)
  uint64_t weight_bytes = 0;
  std::vector<std::string> notes;  // folded ops and other passes' decisions
  SparsityReport sparsity;         // TeSA before/after propagation (when enabled)
};

// Structural checks every pass relies on: tensor indices in range, one output
// per op, ops in topological order, each tensor produced once, weights' data
// sizes, and every output shape equal to infer_output_shape's. Throws
// tessera::Error naming the op or tensor.
void check_graph(const Graph& graph);

// Runs every pass; throws tessera::Error on a graph it cannot compile.
// `sparsity` (optional, enabled): TeSA annotations and propagation
// (graph/sparsity.hpp), which zero the weights no output depends on.
TileGraph compile_graph(Graph graph, const CompileOptions& options, CompileReport* report,
                        const SparsityConfig* sparsity = nullptr);

}  // namespace tessera::graph
