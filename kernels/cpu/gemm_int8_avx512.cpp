// The int8 GEMM's AVX-512 VNNI row kernel (compiled with -mavx512vnni; run
// only when the CPU has it: gemm_int8.cpp). Register block: MR = 6 rows ×
// NV ≤ 4 panels of 16 columns = 24 s32 accumulators; per group of 4 k, NV
// 64-byte B loads, MR 4-byte A broadcasts and MR·NV vpdpbusd (each 64
// multiply-adds).
#include <immintrin.h>

#include <cstring>

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps(), a self-initialised
// variable, as the unused merge source; -Wmaybe-uninitialized then fires in
// the system header at every inlined call. Nothing here reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kernels/cpu/gemm_int8_impl.hpp"

namespace tessera::kernels::cpu::int8_detail {
namespace {

constexpr int kMr = 6;
constexpr int kNv = 4;
constexpr int kLanes = QuantizedMatrix::kPanel;

// Quantizes row a[0:k] into qa (zero point 128; padded with 128 to whole
// groups of 4) and returns its scale: the same operations as
// quantize_scalar() (cvtps2dq rounds to nearest even; clamp; + 128).
float quantize_row(const float* a, int64_t k, int64_t padded, uint8_t* qa) {
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

// acc[r][v] += Σ over `groups` groups: qa[r] at group0 + g times the
// 64-byte operand at b + v·panel_bytes + g·64.
template <int MR, int NV>
inline void multiply(const RowBlock& blk, int64_t row, const int8_t* b, int64_t panel_bytes,
                     int64_t group0, int64_t groups, __m512i (&acc)[MR][NV]) {
  const uint8_t* qa = blk.qa + (row - blk.m0) * blk.qa_stride + group0 * 4;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b + v * panel_bytes + g * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, qa + r * blk.qa_stride + g * 4, sizeof four);
      const __m512i av = _mm512_set1_epi32(four);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
    }
  }
}

// C = (acc − compensation) · sa · sb for MR rows and NV panels from panel p.
template <int MR, int NV>
inline void store(const RowBlock& blk, int64_t row, int64_t p, __m512i (&acc)[MR][NV]) {
  const QuantizedMatrix& b = *blk.b;
  for (int v = 0; v < NV; ++v) {
    const int64_t col = (p + v) * kLanes;
    // Only the tile's columns are written (a tile may start or end inside a panel).
    const int64_t first = std::max<int64_t>(blk.n0 - col, 0);
    const int64_t last = std::min<int64_t>(blk.n1 - col, kLanes);
    if (first >= last) continue;
    const auto mask = static_cast<__mmask16>(((1u << last) - 1) & ~((1u << first) - 1));
    const __m512i comp = _mm512_loadu_si512(b.compensation() + col);
    const __m512 sb = _mm512_loadu_ps(b.scale() + col);
    for (int r = 0; r < MR; ++r) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(blk.sa[row - blk.m0 + r]), sb);
      const __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], comp)), scale);
      _mm512_mask_storeu_ps(blk.c + (row + r) * blk.ldc + col, mask, y);
    }
  }
}

template <int MR, int NV>
void dense_block(const RowBlock& blk, int64_t row, int64_t p) {
  __m512i acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  const int64_t groups = blk.b->k_groups();
  multiply<MR, NV>(blk, row, blk.b->panel(p), groups * 64, 0, groups, acc);
  store<MR, NV>(blk, row, p, acc);
}

// One 32-column strip of a kBlocks32 matrix: its stored blocks only.
template <int MR>
void strip_block(const RowBlock& blk, int64_t row, int64_t s) {
  const QuantizedMatrix& b = *blk.b;
  __m512i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  for (int64_t i = b.strip_blocks()[s]; i < b.strip_blocks()[s + 1]; ++i)
    multiply<MR, 2>(blk, row, b.block(i), 512, b.block_group()[i], 8, acc);
  store<MR, 2>(blk, row, 2 * s, acc);
}

template <int MR>
void row_group(const RowBlock& blk, int64_t row) {
  if (blk.b->layout() == Int8Layout::kBlocks32) {
    for (int64_t s = blk.n0 / kInt8Block; s < (blk.n1 + kInt8Block - 1) / kInt8Block; ++s)
      strip_block<MR>(blk, row, s);
    return;
  }
  const int64_t p0 = blk.n0 / kLanes, p1 = (blk.n1 + kLanes - 1) / kLanes;
  int64_t p = p0;
  for (; p + kNv <= p1; p += kNv) dense_block<MR, kNv>(blk, row, p);
  switch (p1 - p) {
    case 3:
      dense_block<MR, 3>(blk, row, p);
      break;
    case 2:
      dense_block<MR, 2>(blk, row, p);
      break;
    case 1:
      dense_block<MR, 1>(blk, row, p);
      break;
    default:
      break;
  }
}

}  // namespace

void rows_avx512_vnni(const RowBlock& blk) {
  const QuantizedMatrix& b = *blk.b;
  const int64_t padded = b.a_groups() * 4;
  for (int64_t m = blk.m0; m < blk.m1; ++m)
    blk.sa[m - blk.m0] =
        quantize_row(blk.a + m * blk.lda, b.k(), padded, blk.qa + (m - blk.m0) * blk.qa_stride);
  int64_t m = blk.m0;
  for (; m + kMr <= blk.m1; m += kMr) row_group<kMr>(blk, m);
  switch (blk.m1 - m) {
    case 5:
      row_group<5>(blk, m);
      break;
    case 4:
      row_group<4>(blk, m);
      break;
    case 3:
      row_group<3>(blk, m);
      break;
    case 2:
      row_group<2>(blk, m);
      break;
    case 1:
      row_group<1>(blk, m);
      break;
    default:
      break;
  }
}

}  // namespace tessera::kernels::cpu::int8_detail
