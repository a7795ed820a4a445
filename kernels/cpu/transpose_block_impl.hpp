#pragma once
// transpose_block: the register-block transpose of each ISA, shared by the
// CSR GEMM (A^T panels, Y^T back to rows: kernels/sparse/sparse_gemm_impl.hpp),
// SparDR's pixel-major epilogue (kernels/sparse/conv_spardr_impl.hpp) and
// cpu.transpose (VectorOps::transpose). Anonymous namespace: include only
// from the per-ISA kernel headers.
#include <xsimd/xsimd.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

#if defined(__AVX512F__)
// One 16×16 block: 16 row loads, 64 shuffles (in-lane unpack and shuffle,
// then two rounds of 128-bit lane shuffles), 16 column stores. An Edge
// block has only `rows` rows and `cols` columns: masked loads and stores,
// zeros for the rows past its end (in registers only). GCC 12's
// _mm512_undefined_ps() in these shuffles trips -Wuninitialized once inlined
// (GCC bug 105593, as in kernels/cpu/gemm_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <bool Edge>
inline void transpose_16x16(const float* s, int64_t ld_src, float* d, int64_t ld_dst, int rows = 16,
                            int cols = 16) {
  const auto row_mask = static_cast<__mmask16>((1u << rows) - 1u);
  const auto col_mask = static_cast<__mmask16>((1u << cols) - 1u);
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int x = 0; x < 16; ++x) {
    r[x] = !Edge      ? _mm512_loadu_ps(s + x * ld_src)
           : x < rows ? _mm512_maskz_loadu_ps(col_mask, s + x * ld_src)
                      : _mm512_setzero_ps();
  }
  // Rows 2i, 2i+1 interleaved within each 128-bit lane.
#pragma GCC unroll 8
  for (int x = 0; x < 16; x += 2) {
    t[x] = _mm512_unpacklo_ps(r[x], r[x + 1]);
    t[x + 1] = _mm512_unpackhi_ps(r[x], r[x + 1]);
  }
  // r[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3.
#pragma GCC unroll 4
  for (int x = 0; x < 16; x += 4) {
    r[x] = _mm512_shuffle_ps(t[x], t[x + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[x + 1] = _mm512_shuffle_ps(t[x], t[x + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[x + 2] = _mm512_shuffle_ps(t[x + 1], t[x + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[x + 3] = _mm512_shuffle_ps(t[x + 1], t[x + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // t[8h + c]: columns c, 8 + c of rows 8h .. 8h + 7 (lanes: rows 8h..+3 of
  // c, of 8 + c, rows 8h+4..+7 of c, of 8 + c); t[8h + 4 + c] the same for
  // columns 4 + c, 12 + c.
#pragma GCC unroll 2
  for (int h = 0; h < 16; h += 8)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      t[h + c] = _mm512_shuffle_f32x4(r[h + c], r[h + 4 + c], 0x88);
      t[h + 4 + c] = _mm512_shuffle_f32x4(r[h + c], r[h + 4 + c], 0xDD);
    }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
#pragma GCC unroll 2
    for (int half = 0; half < 8; half += 4) {
      const __m512 a = t[half + c], b = t[8 + half + c];
      const int lo = half + c, hi = 8 + half + c;
      if (!Edge) {
        _mm512_storeu_ps(d + lo * ld_dst, _mm512_shuffle_f32x4(a, b, 0x88));
        _mm512_storeu_ps(d + hi * ld_dst, _mm512_shuffle_f32x4(a, b, 0xDD));
        continue;
      }
      if (lo < cols)
        _mm512_mask_storeu_ps(d + lo * ld_dst, row_mask, _mm512_shuffle_f32x4(a, b, 0x88));
      if (hi < cols)
        _mm512_mask_storeu_ps(d + hi * ld_dst, row_mask, _mm512_shuffle_f32x4(a, b, 0xDD));
    }
}
#pragma GCC diagnostic pop
#endif

// dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols. With
// AVX-512, 16×16 blocks in registers, the edges masked (through the 8×8
// path, a 44-wide edge had 4 columns moved one float at a time). With AVX2,
// 8×8 blocks: 8 row loads, 24 shuffles, 8 column stores, twice the elements
// per store of transpose_panel's 4×4 SSE blocks (bench_spmm at 99%
// sparsity, all transposes: 1.73 → 1.23 ms).
template <class Arch>
inline void transpose_block(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                            float* dst, int64_t ld_dst) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    for (int64_t i = 0; i < rows; i += 16) {
      const int rr = static_cast<int>(std::min<int64_t>(16, rows - i));
      for (int64_t j = 0; j < cols; j += 16) {
        const int cc = static_cast<int>(std::min<int64_t>(16, cols - j));
        if (rr == 16 && cc == 16)
          transpose_16x16<false>(src + i * ld_src + j, ld_src, dst + j * ld_dst + i, ld_dst);
        else
          transpose_16x16<true>(src + i * ld_src + j, ld_src, dst + j * ld_dst + i, ld_dst, rr, cc);
      }
    }
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (!std::is_same_v<Arch, xsimd::sse2>) {
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
      const float* s = src + i * ld_src;
      int64_t j = 0;
      for (; j + 8 <= cols; j += 8) {
        __m256 r[8], t[8];
#pragma GCC unroll 8
        for (int x = 0; x < 8; ++x) r[x] = _mm256_loadu_ps(s + x * ld_src + j);
#pragma GCC unroll 4
        for (int x = 0; x < 8; x += 2) {
          t[x] = _mm256_unpacklo_ps(r[x], r[x + 1]);
          t[x + 1] = _mm256_unpackhi_ps(r[x], r[x + 1]);
        }
#pragma GCC unroll 2
        for (int x = 0; x < 8; x += 4) {
          r[x] = _mm256_shuffle_ps(t[x], t[x + 2], _MM_SHUFFLE(1, 0, 1, 0));
          r[x + 1] = _mm256_shuffle_ps(t[x], t[x + 2], _MM_SHUFFLE(3, 2, 3, 2));
          r[x + 2] = _mm256_shuffle_ps(t[x + 1], t[x + 3], _MM_SHUFFLE(1, 0, 1, 0));
          r[x + 3] = _mm256_shuffle_ps(t[x + 1], t[x + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        float* d = dst + j * ld_dst + i;
#pragma GCC unroll 4
        for (int x = 0; x < 4; ++x) {
          _mm256_storeu_ps(d + x * ld_dst, _mm256_permute2f128_ps(r[x], r[x + 4], 0x20));
          _mm256_storeu_ps(d + (x + 4) * ld_dst, _mm256_permute2f128_ps(r[x], r[x + 4], 0x31));
        }
      }
      for (; j < cols; ++j)
        for (int64_t x = 0; x < 8; ++x) dst[j * ld_dst + i + x] = s[x * ld_src + j];
    }
    if (i < rows) transpose_panel(src + i * ld_src, ld_src, rows - i, cols, dst + i, ld_dst);
    return;
  }
#endif
  transpose_panel(src, ld_src, rows, cols, dst, ld_dst);
}

}  // namespace
}  // namespace tessera::kernels::cpu
