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

// For every node, whether a worker that made it ready should run it next
// (ASPEN Algorithm 1's depth-first walk) rather than queue it behind the
// other ready tiles, which are mostly its own op's siblings. The walk keeps
// the activations just written in cache but loads the child op's weights
// once per tile; going op by op loads them once per op but reads the
// activations back later. Per op: walk into it when its weights, loaded
// (tiles - 1) extra times, are fewer bytes than the activations it reads.
// ResNet-50's late stages (7x7x2048 maps, 4 MB weights) and most of
// MobileNetV2 run faster op by op, its early stages depth-first.
std::vector<uint8_t> depth_first_nodes(const TileGraph& graph);

// For every node, whether a worker that makes it ready and runs another node
// next should share it through the ready pool at once (GraphView::
// shared_when_ready) rather than cache it until no worker is idle: nodes of
// at least kLongNodeWork multiply-adds (op_work over the tile's share of the
// output). Two workers finish an op's tiles together; the one that readies
// the next op's tiles, a moment before the other goes idle, kept them in its
// own cache while it ran one of them: GPT-2 at 2 threads left one worker
// idle for a whole Gemm tile (0.7-1.1 ms) 5-10 times per run (tessera run
// --trace).
inline constexpr int64_t kLongNodeWork = int64_t{4} << 20;
std::vector<uint8_t> long_nodes(const TileGraph& graph);

}  // namespace tessera::graph
