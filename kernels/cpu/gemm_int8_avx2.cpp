// The int8 GEMM's AVX2 row kernel, for CPUs without AVX-512 VNNI (compiled
// with -mavx2; run only when the CPU has it: gemm_int8.cpp). It reads the
// same B (16 columns × 4 k per 64-byte group) and computes the same exact
// s32 sums as the VNNI kernel, so every path gives the same bits.
//
// AVX2 has no u8 × s8 dot product that cannot overflow: vpmaddubsw adds two
// u8·s8 products into a saturating s16 (255·127·2 > 32767). So A is
// quantized to u8 as everywhere and widened to s16, B's bytes are widened
// with vpmovsxbw as they are loaded, and vpmaddwd adds pairs of s16
// products into s32 exactly: per 16 bytes of a group (4 columns × 4 k), one
// vpmaddwd against the row's 4 k broadcast gives each column's two pair
// sums in adjacent lanes, added at the end (vphaddd). Register block: MR
// rows × 8 columns (2 widened 16-byte pieces), 2·MR s32 accumulators.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm_int8_epilogue_impl.hpp"
#include "kernels/cpu/gemm_int8_impl.hpp"

namespace tessera::kernels::cpu::int8_detail {
namespace {

// 12 accumulators, the two widened B pieces, a broadcast and a product: all
// 16 registers. bench_int8, BERT's 128x768x3072 (1 thread, AVX2 Zen 4
// guest): MR 4 4.82-4.89 ms, 5 4.75-4.76, 6 4.60-4.66, 7 (spills) 6.01-6.06.
constexpr int kMr = 6;
constexpr int kColumns = 8;  // per register block: half a 16-column group
constexpr int kLanes = 8;    // floats per vector

// Quantizes row a[0:k] as quantize_scalar() does (cvtps2dq rounds to
// nearest even like cvtss2si; clamp; + 128), widened to s16 into q (padded
// with the zero point to `padded`), and returns its scale. Only the spans
// [i·span, i·span + span) with needed[i] are written (needed empty: all).
float quantize_row(const float* a, int64_t k, int64_t padded, int16_t* q,
                   const std::vector<char>& needed, int64_t span) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes)
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(a + i)));
  float amax = 0.0f;
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, vmax);
  for (float v : lanes) amax = std::max(amax, v);
  for (; i < k; ++i) amax = std::max(amax, std::fabs(a[i]));
  float scale = 0.0f, inv = 0.0f;
  row_scale(amax, &scale, &inv);
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i zero_point = _mm256_set1_epi32(128);
  for (i = 0; i < padded;) {
    if (!needed.empty() && !needed[static_cast<size_t>(i / span)]) {
      i += span;
      continue;
    }
    const int64_t end = needed.empty() ? padded : std::min(padded, i + span);
    for (; i + kLanes <= std::min(end, k); i += kLanes) {
      __m256i x = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + i), vinv));
      x = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(x, lo), hi), zero_point);
      // s32 in [1, 255] to s16, in order: the two 128-bit halves packed.
      const __m128i packed =
          _mm_packs_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), packed);
    }
    for (; i < std::min(end, k); ++i) q[i] = quantize_scalar(a[i], inv);
    for (; i < end; ++i) q[i] = 128;
  }
  return scale;
}

// The 8 columns' sums of two accumulators, each holding 4 columns as pairs
// of adjacent lanes: vphaddd adds the pairs within 128-bit halves
// ([c0 c1 c4 c5 | c2 c3 c6 c7]) and vpermq puts the columns in order.
inline __m256i column_sums(__m256i lo4, __m256i hi4) {
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo4, hi4), 0xD8);
}

// C for MR rows from `row` and the 8 columns of group half `half` (0: the
// group's first 8 columns, 1: the last 8) of panel p: dense (one run over
// all k groups of the panel) or, for kBlocks32, the stored blocks of strip
// p / 2. One function with the accumulators local and the MR loops
// unrolled (see gemm_int8_avx512.cpp).
template <int MR, bool kBlocks>
void tile_block(const RowBlock& blk, const int16_t* q, int64_t q_stride, int64_t row, int64_t p,
                int half) {
  const QuantizedMatrix& b = *blk.b;
  __m256i acc[MR][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const int16_t* q_rows = q + (row - blk.m0) * q_stride;
  int64_t i0 = 0, i1 = 1;
  if constexpr (kBlocks) {
    i0 = b.strip_blocks()[p / 2];
    i1 = b.strip_blocks()[p / 2 + 1];
  }
  for (int64_t i = i0; i < i1; ++i) {
    const int8_t* bp = (kBlocks ? b.block(i) + (p % 2) * 512 : b.panel(p)) + half * 32;
    const int64_t groups = kBlocks ? 8 : b.k_groups();
    const int16_t* qa = q_rows + (kBlocks ? int64_t{b.block_group()[i]} * 4 : 0);
    for (int64_t g = 0; g < groups; ++g) {
      const __m256i b0 =
          _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + g * 64)));
      const __m256i b1 =
          _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + g * 64 + 16)));
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        int64_t four;
        std::memcpy(&four, qa + r * q_stride + g * 4, sizeof four);
        const __m256i av = _mm256_set1_epi64x(four);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(b0, av));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(b1, av));
      }
    }
  }
  // C = (sums − compensation) · sa · sb, in the other paths' operations and
  // order; only the tile's columns (a tile may start or end inside a group).
  const int64_t col = p * QuantizedMatrix::kPanel + half * kColumns;
  const int64_t first = std::max<int64_t>(blk.n0 - col, 0);
  const int64_t last = std::min<int64_t>(blk.n1 - col, kColumns);
  if (first >= last) return;
  const __m256i comp = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.compensation() + col));
  const __m256 sb = _mm256_loadu_ps(b.scale() + col);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(blk.sa[row - blk.m0 + r]), sb);
    const __m256i sums = _mm256_sub_epi32(column_sums(acc[r][0], acc[r][1]), comp);
    const __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale);
    float* c = blk.c + (row + r) * blk.ldc + col;
    if (first == 0 && last == kColumns) {
      _mm256_storeu_ps(c, y);
    } else {
      alignas(32) float lanes[kColumns];
      _mm256_store_ps(lanes, y);
      std::copy(lanes + first, lanes + last, c + first);
    }
  }
}

struct WideRows {
  std::vector<int16_t> q;
  std::vector<char> needed;
};

}  // namespace

void rows_avx2(const RowBlock& blk) {
  const QuantizedMatrix& b = *blk.b;
  const int64_t padded = b.a_groups() * 4;
  thread_local WideRows wide;
  std::vector<char>& needed = wide.needed;
  needed_k_blocks(blk, needed);
  // Rows 64 bytes apart at least, each starting cache-aligned.
  const int64_t q_stride = (padded + 31) / 32 * 32;
  const size_t count = static_cast<size_t>((blk.m1 - blk.m0) * q_stride + 32);
  if (wide.q.size() < count) wide.q.resize(count);
  const auto address = reinterpret_cast<uintptr_t>(wide.q.data());
  int16_t* q = wide.q.data() + ((64 - address % 64) % 64) / sizeof(int16_t);
  for (int64_t m = blk.m0; m < blk.m1; ++m)
    blk.sa[m - blk.m0] = quantize_row(blk.a + m * blk.lda, b.k(), padded,
                                      q + (m - blk.m0) * q_stride, needed, kInt8Block);
  // Columns outer, rows inner, as the VNNI kernel: a panel (or a strip's
  // blocks) stays in L2 while every row group reads it.
  const int64_t c0 = blk.n0 / kColumns, c1 = (blk.n1 + kColumns - 1) / kColumns;
  for (int64_t h = c0; h < c1; ++h) {
    const int64_t p = h / 2;
    const int half = static_cast<int>(h % 2);
    for_row_groups<kMr>(blk.m0, blk.m1, [&](auto mr, int64_t row) {
      if (b.layout() == Int8Layout::kBlocks32)
        tile_block<decltype(mr)::value, true>(blk, q, q_stride, row, p, half);
      else
        tile_block<decltype(mr)::value, false>(blk, q, q_stride, row, p, half);
    });
  }
}

void epilogue_avx2(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                   const GemmEpilogue& ep) {
  epilogue_simd<xsimd::fma3<xsimd::avx2>>(c, ldc, m0, m1, n0, n1, ep);
}

}  // namespace tessera::kernels::cpu::int8_detail
