#pragma once
// A fused multiply-add on xsimd batches that is one instruction on every ISA
// that has one. xsimd 8's avx512f architecture derives from `generic`, not
// from fma3<avx2>, so xsimd::fma on AVX-512 batches is a separate multiply
// and add (two roundings, two instructions: half the FMA ports' peak). Here
// AVX-512 calls _mm512_fmadd_ps itself; other ISAs keep xsimd::fma (fused
// on fma3<avx2>, multiply-then-add on SSE2, which has no FMA).
// Include only from translation units compiled per ISA (kernels/cpu).
#include <xsimd/xsimd.hpp>

#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {
namespace {

template <class Arch>
inline xsimd::batch<float, Arch> fused_madd(const xsimd::batch<float, Arch>& a,
                                            const xsimd::batch<float, Arch>& b,
                                            const xsimd::batch<float, Arch>& c) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    return xsimd::batch<float, Arch>(_mm512_fmadd_ps(a, b, c));
#endif
  return xsimd::fma(a, b, c);
}

// c - a * b, fused where fused_madd is.
template <class Arch>
inline xsimd::batch<float, Arch> fused_nmadd(const xsimd::batch<float, Arch>& a,
                                             const xsimd::batch<float, Arch>& b,
                                             const xsimd::batch<float, Arch>& c) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512f>)
    return xsimd::batch<float, Arch>(_mm512_fnmadd_ps(a, b, c));
#endif
  return xsimd::fnma(a, b, c);
}

}  // namespace
}  // namespace tessera::kernels::cpu
