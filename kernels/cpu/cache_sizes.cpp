#include "kernels/cpu/cache_sizes.hpp"

#include <hwloc.h>

#include <algorithm>
#include <limits>

namespace tessera::kernels::cpu {
namespace {

// The smallest per-core share of the caches of one level (hwloc's data or
// unified caches), 0 when the topology has none.
int64_t per_core_share(hwloc_topology_t topology, hwloc_obj_type_t level) {
  int64_t smallest = std::numeric_limits<int64_t>::max();
  const int count = hwloc_get_nbobjs_by_type(topology, level);
  for (int i = 0; i < count; ++i) {
    const hwloc_obj_t cache = hwloc_get_obj_by_type(topology, level, i);
    if (!cache->attr || cache->attr->cache.size == 0) continue;
    if (cache->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
    const int cores = std::max(
        1, hwloc_get_nbobjs_inside_cpuset_by_type(topology, cache->cpuset, HWLOC_OBJ_CORE));
    smallest = std::min(smallest, static_cast<int64_t>(cache->attr->cache.size) / cores);
  }
  return smallest == std::numeric_limits<int64_t>::max() ? 0 : smallest;
}

CacheSizes query() {
  CacheSizes sizes{.l1d = kFallbackL1dBytes, .l2 = kFallbackL2Bytes, .source = ""};
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) {
    sizes.source = "defaults (hwloc_topology_init failed)";
    return sizes;
  }
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    sizes.source = "defaults (hwloc_topology_load failed)";
    return sizes;
  }
  const int64_t l1d = per_core_share(topology, HWLOC_OBJ_L1CACHE);
  const int64_t l2 = per_core_share(topology, HWLOC_OBJ_L2CACHE);
  hwloc_topology_destroy(topology);
  if (l1d > 0) sizes.l1d = l1d;
  if (l2 > 0) sizes.l2 = l2;
  sizes.source = l1d > 0 && l2 > 0 ? "hwloc"
                 : l1d > 0         ? "hwloc (no L2 reported: L2 default)"
                 : l2 > 0          ? "hwloc (no L1d reported: L1d default)"
                                   : "defaults (hwloc reported no caches)";
  return sizes;
}

}  // namespace

const CacheSizes& cache_sizes() {
  static const CacheSizes sizes = query();
  return sizes;
}

}  // namespace tessera::kernels::cpu
