#pragma once
// Shared by the CPU variant tests: random tilings of an output and a
// membership test, to assemble outputs from tiles and check untouched bytes.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "graph/region.hpp"
#include "graph/shape.hpp"

namespace tessera::test {

// Splits the output into a random grid of tiles (cuts in every dim) in a
// random order.
inline std::vector<graph::Region> random_tiles(const graph::Shape& shape, std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> cuts(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    cuts[d] = {0, shape[d]};
    const int extra = static_cast<int>(rng() % 3);
    for (int i = 0; i < extra && shape[d] > 1; ++i)
      cuts[d].push_back(1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(shape[d] - 1)));
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
  }
  std::vector<graph::Region> tiles{graph::Region{}};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<graph::Region> next;
    for (const graph::Region& t : tiles)
      for (size_t i = 0; i + 1 < cuts[d].size(); ++i) {
        graph::Region r = t;
        r.begin.push_back(cuts[d][i]);
        r.end.push_back(cuts[d][i + 1]);
        next.push_back(r);
      }
    tiles = std::move(next);
  }
  std::shuffle(tiles.begin(), tiles.end(), rng);
  return tiles;
}

// Whether the element at row-major index `flat` of `shape` lies in `r`.
inline bool inside(const graph::Region& r, const graph::Shape& shape, int64_t flat) {
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t i = flat % shape[d];
    flat /= shape[d];
    if (i < r.begin[d] || i >= r.end[d]) return false;
  }
  return true;
}

}  // namespace tessera::test
