#pragma once
// Loads and stores of lanes [lo, hi) of an xsimd batch, touching no memory
// outside them: the GEMM microkernel's block edges (N not a multiple of the
// vector width, a tile starting inside a B panel) go straight to C with
// these instead of through a scratch block and a scalar epilogue. AVX-512
// and AVX2 use masked moves (masked-off lanes never fault); SSE2 copies
// through a small buffer. Lanes outside [lo, hi) load as zero.
// Include only from translation units compiled per ISA (kernels/cpu).
#include <xsimd/xsimd.hpp>

#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {
namespace {

#if defined(__AVX2__)
// AVX2's maskload/maskstore take a lane mask as the sign bits of a vector.
inline __m256i avx2_lane_mask(int lo, int hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i from = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), lane);  // lane < lo
  const __m256i to = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane);    // lane < hi
  return _mm256_andnot_si256(from, to);
}
#endif

template <class Arch>
inline xsimd::batch<float, Arch> load_lanes(const float* p, int lo, int hi) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
#if defined(__AVX512F__)
  if constexpr (W == 16) {
    const auto mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    return Batch(_mm512_maskz_loadu_ps(mask, p));
  }
#endif
#if defined(__AVX2__)
  if constexpr (W == 8) return Batch(_mm256_maskload_ps(p, avx2_lane_mask(lo, hi)));
#endif
  alignas(64) float lanes[W] = {};
  for (int l = lo; l < hi; ++l) lanes[l] = p[l];
  return Batch::load_aligned(lanes);
}

template <class Arch>
inline void store_lanes(float* p, const xsimd::batch<float, Arch>& x, int lo, int hi) {
  constexpr int W = static_cast<int>(xsimd::batch<float, Arch>::size);
#if defined(__AVX512F__)
  if constexpr (W == 16) {
    const auto mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    _mm512_mask_storeu_ps(p, mask, x);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (W == 8) {
    _mm256_maskstore_ps(p, avx2_lane_mask(lo, hi), x);
    return;
  }
#endif
  alignas(64) float lanes[W];
  x.store_aligned(lanes);
  for (int l = lo; l < hi; ++l) p[l] = lanes[l];
}

}  // namespace
}  // namespace tessera::kernels::cpu
