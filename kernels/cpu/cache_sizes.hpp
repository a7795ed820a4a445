#pragma once
// The data caches of one core of this machine, read once from hwloc. The
// kernels' blocking (SGEMM's kc and nc, the CSR panel, SparDR's slices, the
// fused expansion's band) is sized from these rather than from one CPU's
// figures: a block sized for a 2 MiB L2 thrashes a 512 KiB one.
#include <cstdint>
#include <string>

namespace tessera::kernels::cpu {

struct CacheSizes {
  // Per core: a cache shared by several cores counts its share, and on a
  // machine with cores of several kinds the smallest share is kept.
  int64_t l1d = 0;
  int64_t l2 = 0;
  // Where the figures came from: "hwloc", or the fallback's reason.
  std::string source;
};

// Defaults where hwloc cannot tell (no topology, or no such cache level):
// the smallest of current x86 server cores, so blocks err on fitting.
inline constexpr int64_t kFallbackL1dBytes = 32 * 1024;
inline constexpr int64_t kFallbackL2Bytes = 1024 * 1024;

// Queried once; thread-safe.
const CacheSizes& cache_sizes();

}  // namespace tessera::kernels::cpu
