#pragma once
// The per-block transforms of Winograd F(4×4, 3×3) and F(2×2, 3×3) (Lavin &
// Gray 2016, §4, eqs. 6–8), vectorised over channels: every
// arithmetic line below is a loop over kLanes channels that the compiler
// turns into vector instructions of the ISA the including translation unit
// is built for (conv_winograd_{portable,avx2,avx512}.cpp). Internal to
// conv_winograd*.cpp.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/conv_winograd.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr int kLanes = 16;  // channels per step: one AVX-512 vector

// The 1-D transforms of F(Block, 3) on kLanes-wide values: B^T·d (Alpha
// values in, Alpha out) and A^T·m (Alpha in, Block out), Alpha = Block + 2.
template <int Block>
struct WinogradMath;

// F(4, 3): the points 0, ±1, ±2, ∞.
template <>
struct WinogradMath<4> {
  static constexpr int kAlpha = 6;
  static void input_1d(const float (&d)[6][kLanes], float (&r)[6][kLanes]) {
    for (int l = 0; l < kLanes; ++l) {
      const float d0 = d[0][l], d1 = d[1][l], d2 = d[2][l], d3 = d[3][l], d4 = d[4][l],
                  d5 = d[5][l];
      r[0][l] = 4.0f * d0 - 5.0f * d2 + d4;
      r[1][l] = -4.0f * (d1 + d2) + (d3 + d4);
      r[2][l] = 4.0f * (d1 - d2) + (d4 - d3);
      r[3][l] = 2.0f * (d3 - d1) + (d4 - d2);
      r[4][l] = 2.0f * (d1 - d3) + (d4 - d2);
      r[5][l] = 4.0f * d1 - 5.0f * d3 + d5;
    }
  }
  static void output_1d(const float (&m)[6][kLanes], float (&y)[4][kLanes]) {
    for (int l = 0; l < kLanes; ++l) {
      const float m0 = m[0][l], m1 = m[1][l], m2 = m[2][l], m3 = m[3][l], m4 = m[4][l],
                  m5 = m[5][l];
      const float s12 = m1 + m2, d12 = m1 - m2, s34 = m3 + m4, d34 = m3 - m4;
      y[0][l] = m0 + s12 + s34;
      y[1][l] = d12 + 2.0f * d34;
      y[2][l] = s12 + 4.0f * s34;
      y[3][l] = d12 + 8.0f * d34 + m5;
    }
  }
};

// F(2, 3): the points 0, ±1, ∞ (Lavin & Gray §4.1, eq. 6); additions only.
template <>
struct WinogradMath<2> {
  static constexpr int kAlpha = 4;
  static void input_1d(const float (&d)[4][kLanes], float (&r)[4][kLanes]) {
    for (int l = 0; l < kLanes; ++l) {
      const float d0 = d[0][l], d1 = d[1][l], d2 = d[2][l], d3 = d[3][l];
      r[0][l] = d0 - d2;
      r[1][l] = d1 + d2;
      r[2][l] = d2 - d1;
      r[3][l] = d1 - d3;
    }
  }
  static void output_1d(const float (&m)[4][kLanes], float (&y)[2][kLanes]) {
    for (int l = 0; l < kLanes; ++l) {
      y[0][l] = m[0][l] + m[1][l] + m[2][l];
      y[1][l] = m[1][l] - m[2][l] - m[3][l];
    }
  }
};

// V = B^T·d·B of one Alpha×Alpha patch, `count` ≤ kLanes channels from
// taps[i] + c0 (tap i = row·Alpha + column), element e stored at
// v[e·v_stride].
template <int Block>
inline void input_transform_lanes(const float* const* taps, int64_t c0, int64_t count, float* v,
                                  int64_t v_stride) {
  using Math = WinogradMath<Block>;
  constexpr int A = Math::kAlpha;
  float d[A][A][kLanes];  // [column][row][lane]: columns transformed first
  for (int i = 0; i < A; ++i)
    for (int j = 0; j < A; ++j) {
      const float* src = taps[i * A + j] + c0;
      if (count == kLanes) {
        for (int l = 0; l < kLanes; ++l) d[j][i][l] = src[l];
      } else {
        for (int l = 0; l < kLanes; ++l) d[j][i][l] = l < count ? src[l] : 0.0f;
      }
    }
  float t[A][A][kLanes];  // [row i of B^T·d][column][lane]
  for (int j = 0; j < A; ++j) {
    float column[A][kLanes];
    Math::input_1d(d[j], column);
    for (int i = 0; i < A; ++i)
      for (int l = 0; l < kLanes; ++l) t[i][j][l] = column[i][l];
  }
  for (int i = 0; i < A; ++i) {
    float row[A][kLanes];
    Math::input_1d(t[i], row);
    for (int j = 0; j < A; ++j) {
      float* dst = v + (i * A + j) * v_stride + c0;
      if (count == kLanes) {
        for (int l = 0; l < kLanes; ++l) dst[l] = row[j][l];
      } else {
        for (int64_t l = 0; l < count; ++l) dst[l] = row[j][l];
      }
    }
  }
}

// Y = A^T·M·A of one block, `count` ≤ kLanes channels from m + c0 (element
// e at m[e·m_stride]), output pixel p = row·Block + column stored at
// y[p·ld_y + c0].
template <int Block>
inline void output_transform_lanes(const float* m, int64_t m_stride, int64_t c0, int64_t count,
                                   float* y, int64_t ld_y) {
  using Math = WinogradMath<Block>;
  constexpr int A = Math::kAlpha;
  float a[A][A][kLanes];  // [column][row][lane]
  for (int i = 0; i < A; ++i)
    for (int j = 0; j < A; ++j) {
      const float* src = m + (i * A + j) * m_stride + c0;
      if (count == kLanes) {
        for (int l = 0; l < kLanes; ++l) a[j][i][l] = src[l];
      } else {
        for (int l = 0; l < kLanes; ++l) a[j][i][l] = l < count ? src[l] : 0.0f;
      }
    }
  float t[Block][A][kLanes];  // [row of A^T·M][column][lane]
  for (int j = 0; j < A; ++j) {
    float column[Block][kLanes];
    Math::output_1d(a[j], column);
    for (int i = 0; i < Block; ++i)
      for (int l = 0; l < kLanes; ++l) t[i][j][l] = column[i][l];
  }
  for (int i = 0; i < Block; ++i) {
    float row[Block][kLanes];
    Math::output_1d(t[i], row);
    for (int j = 0; j < Block; ++j) {
      float* dst = y + (i * Block + j) * ld_y + c0;
      if (count == kLanes) {
        for (int l = 0; l < kLanes; ++l) dst[l] = row[j][l];
      } else {
        for (int64_t l = 0; l < count; ++l) dst[l] = row[j][l];
      }
    }
  }
}

template <int Block>
void input_transform(const float* const* taps, int64_t channels, float* v, int64_t v_stride) {
  for (int64_t c0 = 0; c0 < channels; c0 += kLanes)
    input_transform_lanes<Block>(taps, c0, std::min<int64_t>(kLanes, channels - c0), v, v_stride);
}

template <int Block>
void output_transform(const float* m, int64_t m_stride, int64_t channels, float* y, int64_t ld_y) {
  for (int64_t c0 = 0; c0 < channels; c0 += kLanes)
    output_transform_lanes<Block>(m, m_stride, c0, std::min<int64_t>(kLanes, channels - c0), y,
                                  ld_y);
}

}  // namespace

// The ISA's entry point (declared in conv_winograd.hpp) is defined by the
// including file with this macro.
#define TESSERA_WINOGRAD_TRANSFORMS(suffix)                           \
  WinogradTransforms winograd_transforms_##suffix(int block) {        \
    if (block == 2) return {input_transform<2>, output_transform<2>}; \
    return {input_transform<4>, output_transform<4>};                 \
  }

}  // namespace tessera::kernels::cpu
