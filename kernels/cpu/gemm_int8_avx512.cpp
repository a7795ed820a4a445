// The int8 GEMM's AVX-512 VNNI row kernel (compiled with -mavx512vnni; run
// only when the CPU has it: gemm_int8.cpp). Register block: MR = 6 rows ×
// NV ≤ 4 panels of 16 columns = 24 s32 accumulators; per group of 4 k, NV
// 64-byte B loads, MR 4-byte A broadcasts and MR·NV vpdpbusd (each 64
// multiply-adds).
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps(), a self-initialised
// variable, as the unused merge source; -Wmaybe-uninitialized then fires in
// the system header at every inlined call. Nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/gemm_int8_epilogue_impl.hpp"
#include "kernels/cpu/gemm_int8_impl.hpp"

namespace tessera::kernels::cpu::int8_detail {
namespace {

constexpr int kMr = 6;
constexpr int kNv = 4;
constexpr int kLanes = QuantizedMatrix::kPanel;

// Quantizes row a[0:k] into qa (zero point 128; padded with 128 to
// `padded`) and returns its scale: the same operations as quantize_scalar()
// (cvtps2dq rounds to nearest even; clamp; + 128). The scale comes from the
// whole row; only the spans [i·span, i·span + span) with needed[i] are
// written (needed empty: all): a tile of a block-sparse B reads A only at
// its strips' k blocks, and with few blocks quantizing the rest cost more
// than the products.
float quantize_row(const float* a, int64_t k, int64_t padded, uint8_t* qa,
                   const std::vector<char>& needed, int64_t span) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes)
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(a + i)));
  if (i < k) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (k - i)) - 1);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail, a + i)));
  }
  float scale = 0.0f, inv = 0.0f;
  row_scale(_mm512_reduce_max_ps(vmax), &scale, &inv);
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i zero_point = _mm512_set1_epi32(128);
  for (i = 0; i < padded; i += kLanes) {
    if (!needed.empty() && !needed[static_cast<size_t>(i / span)]) {
      i += span - kLanes;  // span is a multiple of kLanes
      continue;
    }
    const int64_t valid = k - i;
    const __mmask16 load = valid >= kLanes ? __mmask16(0xffff)
                           : valid > 0     ? static_cast<__mmask16>((1u << valid) - 1)
                                           : __mmask16(0);
    const __mmask16 store =
        padded - i >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (padded - i)) - 1);
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(load, a + i), vinv));
    q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), zero_point);
    _mm512_mask_cvtepi32_storeu_epi8(qa + i, store, q);
  }
  return scale;
}

// C for MR rows from `row` and NV panels from panel p: dense (one run over
// all k groups of the panels) or, for kBlocks32, strip p / 2's stored
// blocks. One function with the accumulators local and every MR/NV loop
// unrolled: passed by reference to helpers, GCC kept them in memory and
// copied all 24 through the stack on every k group.
template <int MR, int NV, bool kBlocks>
void tile_block(const RowBlock& blk, int64_t row, int64_t p) {
  const QuantizedMatrix& b = *blk.b;
  __m512i acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  const uint8_t* qa_rows = blk.qa + (row - blk.m0) * blk.qa_stride;
  int64_t i0 = 0, i1 = 1;
  if constexpr (kBlocks) {
    i0 = b.strip_blocks()[p / 2];
    i1 = b.strip_blocks()[p / 2 + 1];
  }
  for (int64_t i = i0; i < i1; ++i) {
    const int8_t* bp = kBlocks ? b.block(i) : b.panel(p);
    const int64_t groups = kBlocks ? 8 : b.k_groups();
    const int64_t panel_bytes = kBlocks ? 512 : groups * 64;
    const uint8_t* qa = qa_rows + (kBlocks ? int64_t{b.block_group()[i]} * 4 : 0);
    for (int64_t g = 0; g < groups; ++g) {
      __m512i bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(bp + v * panel_bytes + g * 64);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        int32_t four;
        std::memcpy(&four, qa + r * blk.qa_stride + g * 4, sizeof four);
        const __m512i av = _mm512_set1_epi32(four);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
      }
    }
  }
  // C = (acc − compensation) · sa · sb, only the tile's columns (a tile may
  // start or end inside a panel).
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const int64_t col = (p + v) * kLanes;
    const int64_t first = std::max<int64_t>(blk.n0 - col, 0);
    const int64_t last = std::min<int64_t>(blk.n1 - col, kLanes);
    if (first >= last) continue;
    const auto mask = static_cast<__mmask16>(((1u << last) - 1) & ~((1u << first) - 1));
    const __m512i comp = _mm512_loadu_si512(b.compensation() + col);
    const __m512 sb = _mm512_loadu_ps(b.scale() + col);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(blk.sa[row - blk.m0 + r]), sb);
      const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], comp)), scale);
      _mm512_mask_storeu_ps(blk.c + (row + r) * blk.ldc + col, mask, y);
    }
  }
}

template <int NV>
void dense_panels(const RowBlock& blk, int64_t p) {
  for_row_groups<kMr>(blk.m0, blk.m1, [&](auto mr, int64_t row) {
    tile_block<decltype(mr)::value, NV, false>(blk, row, p);
  });
}

}  // namespace

void rows_avx512_vnni(const RowBlock& blk) {
  const QuantizedMatrix& b = *blk.b;
  const int64_t padded = b.a_groups() * 4;
  thread_local std::vector<char> needed;
  needed_k_blocks(blk, needed);
  for (int64_t m = blk.m0; m < blk.m1; ++m)
    blk.sa[m - blk.m0] = quantize_row(blk.a + m * blk.lda, b.k(), padded,
                                      blk.qa + (m - blk.m0) * blk.qa_stride, needed, kInt8Block);
  // Columns outer, rows inner: one group of panels (K·256 bytes) or one
  // strip's blocks stays in L2 while every row group of the block reads it;
  // rows outer streamed all of B (2.4 MB for BERT's FFN) from L3 per 6 rows.
  if (b.layout() == Int8Layout::kBlocks32) {
    const int64_t s0 = blk.n0 / kInt8Block, s1 = (blk.n1 + kInt8Block - 1) / kInt8Block;
    for (int64_t s = s0; s < s1; ++s)
      for_row_groups<kMr>(blk.m0, blk.m1, [&](auto mr, int64_t row) {
        tile_block<decltype(mr)::value, 2, true>(blk, row, 2 * s);
      });
    return;
  }
  const int64_t p0 = blk.n0 / kLanes, p1 = (blk.n1 + kLanes - 1) / kLanes;
  int64_t p = p0;
  for (; p + kNv <= p1; p += kNv) dense_panels<kNv>(blk, p);
  switch (p1 - p) {
    case 3:
      return dense_panels<3>(blk, p);
    case 2:
      return dense_panels<2>(blk, p);
    case 1:
      return dense_panels<1>(blk, p);
    default:
      return;
  }
}

void epilogue_avx512(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                     const GemmEpilogue& ep) {
  epilogue_simd<xsimd::avx512f>(c, ldc, m0, m1, n0, n1, ep);
}

}  // namespace tessera::kernels::cpu::int8_detail
