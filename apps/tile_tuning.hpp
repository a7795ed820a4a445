#pragma once
// `tessera compile --tune`: the tile count measured, not guessed. ASPEN §4.4
// (Fig. 10a) shows throughput as a concave function of tiles per layer: too
// few tiles starve the threads and leave no parallel paths, too many pay
// dispatch per node and shrink each kernel call below its efficient size. The
// peak moves with the model and the thread count, so the compiler runs the
// model at each candidate and keeps the fastest.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/tile_graph.hpp"

namespace tessera::apps {

struct TileCandidate {
  int32_t tiles = 0;  // CompileOptions::tiles (0: the compiler's own rule)
  double median_ms = 0;
};

struct TileTuning {
  int32_t best_tiles = 0;
  std::vector<TileCandidate> candidates;  // in the order measured
};

// The candidates for `threads` threads: the compiler's rule, then
// threads × {1, 2, 3, 4, 6, 8} (at most 256).
std::vector<int32_t> tile_candidates(int32_t threads);

// Builds each candidate's tile graph with `build(tiles)`, writes it to
// `scratch_path` (removed afterwards), loads it into an engine of `threads`
// threads and times `iterations` runs on random inputs after two warm-ups.
// Throws tessera::Error if a candidate cannot be built, loaded or run.
TileTuning tune_tiles(const std::function<graph::TileGraph(int32_t tiles)>& build, int32_t threads,
                      int32_t iterations, const std::string& scratch_path);

}  // namespace tessera::apps
