#pragma once
// Internal to gemm_int8*.cpp: what the per-ISA row-block kernels share, so
// every path rounds, clamps and scales with the same operations (the same
// bits; gemm_int8.hpp).
#include <xmmintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm_int8.hpp"

namespace tessera::kernels::cpu::int8_detail {

// Rows [m0, m1) of the tile quantized (qa, row stride qa_stride bytes, K
// padded to whole groups of 4 with the zero point) and multiplied into
// C[m, n0:n1] before the epilogue.
struct RowBlock {
  const float* a = nullptr;
  int64_t lda = 0;
  const QuantizedMatrix* b = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t m0 = 0, m1 = 0, n0 = 0, n1 = 0;
  uint8_t* qa = nullptr;  // scratch: (m1 - m0) rows × qa_stride bytes
  float* sa = nullptr;    // scratch: (m1 - m0) row scales
  int64_t qa_stride = 0;
};

// sa = amax / 127 and the factor a row is multiplied by before rounding; an
// all-zero row has scale 0 and quantizes to the zero point.
inline void row_scale(float amax, float* scale, float* inv) {
  *scale = amax / 127.0f;
  *inv = amax > 0.0f ? 127.0f / amax : 0.0f;
}

// Rounds to nearest even with cvtss2si, the scalar form of the vector
// path's cvtps2dq (both give 0x80000000 for NaN and out-of-range values),
// clamps to [−127, 127] and adds the zero point.
inline uint8_t quantize_scalar(float x, float inv) {
  const int32_t r = std::clamp(_mm_cvtss_si32(_mm_set_ss(x * inv)), -127, 127);
  return static_cast<uint8_t>(r + 128);
}

// The k blocks of 32 a tile of a kBlocks32 B reads (its strips' stored
// blocks): `needed` gets one flag per block of the padded row; cleared for
// the dense layout (every k is read).
void needed_k_blocks(const RowBlock& block, std::vector<char>& needed);

// Calls f(std::integral_constant<int, MR>, row) for rows [m0, m1) in groups
// of MaxMr rows and one shorter group at the end (each MR a kernel
// instance with its accumulators in registers).
template <int MaxMr, class F>
void for_row_groups(int64_t m0, int64_t m1, F&& f) {
  int64_t m = m0;
  for (; m + MaxMr <= m1; m += MaxMr) f(std::integral_constant<int, MaxMr>{}, m);
  [&]<int... R>(std::integer_sequence<int, R...>) {
    // Rows left: 1 .. MaxMr - 1, each its own instance.
    ((m1 - m == R + 1 ? (f(std::integral_constant<int, R + 1>{}, m), 0) : 0), ...);
  }
  (std::make_integer_sequence<int, MaxMr - 1>{});
}

void rows_portable(const RowBlock& block);
void rows_avx2(const RowBlock& block);
void rows_avx512_vnni(const RowBlock& block);

// The epilogue on C[m0:m1, n0:n1], in apply_epilogue_scalar()'s order and
// bits (the activations are gemm_activation.hpp's lane-independent ones).
void epilogue_portable(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                       const GemmEpilogue& ep);
void epilogue_avx2(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                   const GemmEpilogue& ep);
void epilogue_avx512(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                     const GemmEpilogue& ep);

}  // namespace tessera::kernels::cpu::int8_detail
