#pragma once
// Data affinity between tiles (ASPEN §3.3: a DSE's own row first, for data
// reuse). A tile reads most of its input from one parent as a rule: the tile
// of the previous layer over the same rows. Running the two on one core
// finds that input in the core's cache; on another core every line of it is
// a transfer between caches.
#include <cstdint>
#include <vector>

#include "graph/tile_graph.hpp"

namespace tessera::graph {

// For every node, the parent whose output region it reads the most elements
// of (by the dependency functions), or -1 for a node with no parent. Ties go
// to the lower-numbered parent.
std::vector<int32_t> main_parents(const TileGraph& graph);

}  // namespace tessera::graph
