#pragma once
// A box-shaped part of a tensor: [begin[d], end[d]) in every dimension.
// Tiles are regions of an operator's output; dependency functions map an
// output region to the input regions it reads.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/shape.hpp"

namespace tessera::graph {

struct Region {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;

  size_t rank() const { return begin.size(); }
  int64_t extent(size_t d) const { return end[d] - begin[d]; }
  bool empty() const {
    for (size_t d = 0; d < rank(); ++d)
      if (end[d] <= begin[d]) return true;
    return false;
  }
  int64_t numel() const {
    if (empty()) return 0;
    int64_t n = 1;
    for (size_t d = 0; d < rank(); ++d) n *= extent(d);
    return n;
  }
  bool operator==(const Region&) const = default;

  static Region whole(const Shape& s) { return Region{std::vector<int64_t>(s.size(), 0), s}; }
};

inline Region region_intersection(const Region& a, const Region& b) {
  Region r = a;
  for (size_t d = 0; d < a.rank(); ++d) {
    r.begin[d] = std::max(a.begin[d], b.begin[d]);
    r.end[d] = std::min(a.end[d], b.end[d]);
  }
  return r;
}

inline bool regions_overlap(const Region& a, const Region& b) {
  return a.rank() == b.rank() && !region_intersection(a, b).empty();
}

// True when the region lies inside a tensor of this shape (and has its rank).
inline bool region_inside(const Region& r, const Shape& s) {
  if (r.begin.size() != s.size() || r.end.size() != s.size()) return false;
  for (size_t d = 0; d < s.size(); ++d)
    if (r.begin[d] < 0 || r.end[d] > s[d] || r.begin[d] > r.end[d]) return false;
  return true;
}

inline std::string region_to_string(const Region& r) {
  std::string out = "[";
  for (size_t d = 0; d < r.rank(); ++d) {
    if (d) out += ",";
    out += std::to_string(r.begin[d]) + ":" + std::to_string(r.end[d]);
  }
  return out + "]";
}

}  // namespace tessera::graph
