#pragma once
// The activation arena's layout: one offset per non-weight tensor, with space
// reused between tensors that can never be live at the same time under
// barrier-free (tile dataflow) execution.
#include <cstdint>
#include <vector>

#include "graph/graph.hpp"
#include "graph/tile_graph.hpp"

namespace tessera::graph {

inline constexpr uint64_t kArenaAlignment = 64;

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // per graph tensor; 0 for weights and unused tensors
  uint64_t arena_bytes = 0;
  uint64_t bytes_without_reuse = 0;  // sum of the aligned sizes of all arena tensors
  // Per graph tensor: the tensor whose bytes it shares (the root of a chain
  // of Reshape/Flatten outputs, which are the same row-major data as their
  // input), else -1. Both have the same offset.
  std::vector<int32_t> alias_of;
};

// Whether `op` may run as an alias of its input: a Reshape or Flatten whose
// input lives in the arena and has the output's element count and dtype.
bool is_alias_op(const Graph& graph, const Operator& op);

// `nodes` is build_tile_nodes(graph, ...)'s result (TileNode::op indexes graph.ops).
MemoryPlan plan_memory(const Graph& graph, const std::vector<TileNode>& nodes);

}  // namespace tessera::graph
