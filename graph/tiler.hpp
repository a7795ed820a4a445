#pragma once
// The tiler (APU, ASPEN §3.1): cuts every operator's output into tiles and
// derives exact tile-to-tile edges from the dependency functions.
#include <cstdint>
#include <vector>

#include "graph/graph.hpp"
#include "graph/kernel_forecast.hpp"
#include "graph/tile_graph.hpp"

namespace tessera::graph {

struct TilerOptions {
  int32_t tiles = 0;    // tiles per op (capped by the splittable extent); 0: the rule in tiler.cpp
  int32_t threads = 0;  // threads to expose parallelism for; 0: hardware_concurrency
  // The kernels the ops will run (graph/kernel_forecast.hpp), or null.
  const KernelForecast* kernel_forecast = nullptr;
};

// The output regions (tiles) of op `op_index`, in tile order. Exposed for
// tests and for passes that want the tiling without the edges.
std::vector<Region> tile_op_output(const Graph& graph, int32_t op_index,
                                   const TilerOptions& options);

// Rough cost of the whole op in multiply-adds (GEMMs and convs), window
// reads (pools) or output elements (the rest): the tile-count rule's
// measure of work, and the scheduler's for long nodes (tile_affinity.hpp).
int64_t op_work(const Operator& op, const std::vector<Shape>& in, const Shape& out);

// One node per tile; nodes numbered op by op (topological), tiles in order.
// TileNode::op indexes graph.ops. Throws tessera::Error when a tensor's shape
// differs from what its producer's shape function gives.
std::vector<TileNode> build_tile_nodes(const Graph& graph, const TilerOptions& options);

}  // namespace tessera::graph
