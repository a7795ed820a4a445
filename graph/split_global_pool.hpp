#pragma once
// Squeeze pools in two stages (issue 5: EfficientNet-B0). A
// GlobalAveragePool is a join: its one tile waits for every tile of the map
// it reads, then reads all of it while the other cores wait for the
// squeeze-and-excitation gate it feeds (at 2 threads, 52-96 us per block
// with one core idle; `tessera run --trace`). As an AveragePool over each
// row (kernel [1, W], stride [1, W]) and a GlobalAveragePool over the row
// means, the first stage is cut into runs of rows like the map's producer,
// each run reading its rows while they are still in cache, on whichever
// core made them; only the small second stage stays a join. The mean of
// the row means is the mean: every row has W pixels.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Splits every GlobalAveragePool whose input is an op's rank-4 [N, C, H, W]
// output with H >= 2 and W >= 2: an AveragePool "<name>_row_means" to [N,
// C, H, 1] is inserted before it, and it reads that instead.
std::vector<RewrittenPattern> split_global_pools(Graph& graph);

}  // namespace tessera::graph
