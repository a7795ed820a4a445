#pragma once
// transpose_block: the sparse kernels' transpose, shared by the CSR GEMM
// (A^T panels, Y^T back to rows: sparse_gemm_impl.hpp) and SparDR's
// pixel-major epilogue (conv_spardr_impl.hpp). Anonymous namespace: include
// only from the per-ISA kernel headers.
#include <xsimd/xsimd.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::sparse {
namespace {

// dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols. With AVX
// (the AVX2 and AVX-512 kernels), 8×8 blocks in registers: 8 row loads, 24
// shuffles, 8 column stores, twice the elements per store of
// cpu::transpose_panel's 4×4 SSE blocks (bench_spmm at 99% sparsity, all
// transposes: 1.73 → 1.23 ms).
template <class Arch>
inline void transpose_block(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                            float* dst, int64_t ld_dst) {
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
    if (i < rows) cpu::transpose_panel(src + i * ld_src, ld_src, rows - i, cols, dst + i, ld_dst);
    return;
  }
#endif
  cpu::transpose_panel(src, ld_src, rows, cols, dst, ld_dst);
}

}  // namespace
}  // namespace tessera::kernels::sparse
