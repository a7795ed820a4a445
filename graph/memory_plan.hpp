#pragma once
// The activation arena's layout: one offset per non-weight tensor, with space
// reused between tensors that can never be live at the same time under
// barrier-free (tile dataflow) execution.
#include <cstdint>
#include <span>
#include <vector>

#include "graph/graph.hpp"
#include "graph/kernel_forecast.hpp"
#include "graph/tile_graph.hpp"

namespace tessera::graph {

inline constexpr uint64_t kArenaAlignment = 64;

struct MemoryPlan {
  std::vector<uint64_t> offsets;  // per graph tensor; 0 for weights and unused tensors
  uint64_t arena_bytes = 0;
  uint64_t bytes_without_reuse = 0;  // sum of the aligned sizes of all arena tensors
  // Per graph tensor: the tensor whose bytes it shares (the root of a chain
  // of Reshape/Flatten outputs, which are the same row-major data as their
  // input, of Softmax outputs written over their input,
  // writes_over_input(), and of Conv outputs written over their fused
  // residual, MemoryPlanOptions::forecast), else -1. Both have the same
  // offset.
  std::vector<int32_t> alias_of;
  // Ordering edges added for bounded run-ahead (MemoryPlanOptions).
  int64_t added_edges = 0;
};

// Whether `op` may run as an alias of its input: a Reshape or Flatten whose
// input lives in the arena and has the output's element count and dtype.
bool is_alias_op(const Graph& graph, const Operator& op);

// Whether `op`, given its tiles, may write its output over its input: a
// Softmax (any kernel: each reads a row whole before writing it) whose input
// is an activation of the output's shape and dtype, not also its mask, and
// whose tiles each hold whole rows along the normalised dims. plan_memory()
// does so only where nothing else reads the input and neither is a graph
// input or output.
bool writes_over_input(const Graph& graph, const Operator& op, std::span<const TileNode> tiles);

struct MemoryPlanOptions {
  // Bounded run-ahead. Paths with no join between them (the images of a
  // batch through a transformer: BERT at batch 8 and sequence 384) never
  // let the planner prove a buffer dead across paths, so it reuses almost
  // nothing (4.4 GiB of 4.9). With a distance D > 0, a tensor B may still
  // take the bytes of a tensor A when every op accessing A comes at least D
  // ops before the first op writing B: the planner then adds ordering edges
  // from A's accessor tiles to B's writer tiles, so no path runs more than
  // D ops ahead of another over those bytes. Edges only go from earlier to
  // later ops, so the graph stays acyclic. 0: reuse only what is provable.
  int32_t reuse_distance = 0;
  // The kernels' answers (graph/kernel_forecast.hpp), or null. A Conv with a
  // fused residual whose kernel writes over it (writes_over_residual())
  // gets the residual's bytes for its output where nothing reads the
  // residual afterwards: every other reader tile of a residual region is a
  // tile-graph ancestor of the tile that overwrites it, and the residual
  // is neither a graph input nor output. The output is then written into
  // the cache lines the residual was just read from, instead of lines
  // pulled in from memory for a buffer of its own (ResNet-50's 16
  // bottleneck outputs).
  const KernelForecast* forecast = nullptr;
};

// `nodes` is build_tile_nodes(graph, ...)'s result (TileNode::op indexes
// graph.ops); with options.reuse_distance > 0 edges may be added to it
// (MemoryPlan::added_edges), and its depths are then recomputed.
MemoryPlan plan_memory(const Graph& graph, std::vector<TileNode>& nodes,
                       const MemoryPlanOptions& options = {});

}  // namespace tessera::graph
