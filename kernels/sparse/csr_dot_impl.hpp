#pragma once
// The inner loop of both CSR kernels: sparse_gemm_impl.hpp's (columns of a
// sparse B over a transposed A panel) and conv_spardr_impl.hpp's (output
// channels over SparDR's reconstructed input, spardr.md §III-C):
//
//   out[0, MV·W) (+)= Σ values[p] · x[index[p]·Stride + (0 .. MV·W)], p in [begin, end)
//
// The GEMM's CSR stores 16-bit panel rows (Stride = the panel's width; a
// quarter less weight data to stream than 32-bit offsets), SparDR 32-bit
// offsets into its reconstructed input (Stride 1).
// Per nonzero: MV FMAs, each loading its vector of x, plus a quarter of a
// load for the value (ValueQuad) and a quarter (16-bit rows) or half (32-bit
// offsets) for the index. NC sets of sums rotate between nonzeros so
// consecutive FMAs do not wait on each other, and are added in order 0, 1, …
// at the end. The sums are local to this function (the lambda that updates
// them is inlined): passed by reference to a helper, GCC keeps such arrays in
// memory.
// Anonymous namespace: include only from the per-ISA kernel headers.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/simd_fma.hpp"

#if defined(__SSE2__) || defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera::kernels::sparse {
namespace {

// Sets of sums for csr_dot over UV vectors: enough that NC·UV >= 8 FMAs in a
// row touch distinct sums (FMA latency 4 × 2 ports), at least 2, and no
// more than the ISA's vector registers hold beside a broadcast and a
// loaded vector (AVX2's 16: 8 vectors take one set).
template <class Batch>
constexpr int csr_sum_sets(int uv) {
  constexpr int kRegisters = Batch::size >= 16 ? 32 : 16;
  const int wanted = std::max(2, (8 + uv - 1) / uv);
  return std::max(1, std::min(wanted, (kRegisters - 2) / uv));
}

// Four consecutive values, each in every lane of a batch: one 128-bit load
// (repeated in each 128-bit lane) and an in-lane shuffle per value
// (vpermilps: a shuffle port, not a load port) instead of a broadcast load
// per value. The loop is bound by load ports (MV vectors and the value per
// nonzero), so that is one load in MV + 1 fewer: bench_spmm 1024³ on AVX2
// (Zen 4), three alternating rounds, 50% 17.3-18.0 -> 16.4-16.7 ms, 90%
// 5.25-5.51 -> 4.99-5.05 ms; SparDR's layers 0-5% faster.
template <class Batch>
class ValueQuad {
 public:
  explicit ValueQuad(const float* v) {
#if defined(__AVX512F__)
    if constexpr (Batch::size == 16) quad_ = Batch(_mm512_broadcast_f32x4(_mm_loadu_ps(v)));
#endif
#if defined(__AVX__)
    if constexpr (Batch::size == 8)
      quad_ = Batch(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(v)));
#endif
#if defined(__SSE2__)
    if constexpr (Batch::size == 4) quad_ = Batch(_mm_loadu_ps(v));
#endif
    if constexpr (!kShuffled)
      for (int g = 0; g < 4; ++g) values_[g] = v[g];
  }

  template <int G>
  Batch get() const {
    constexpr int kImm = G * 0x55;  // lane G of each 128-bit lane, everywhere
#if defined(__AVX512F__)
    if constexpr (Batch::size == 16) return Batch(_mm512_permute_ps(quad_, kImm));
#endif
#if defined(__AVX__)
    if constexpr (Batch::size == 8) return Batch(_mm256_permute_ps(quad_, kImm));
#endif
#if defined(__SSE2__)
    if constexpr (Batch::size == 4) return Batch(_mm_shuffle_ps(quad_, quad_, kImm));
#endif
    if constexpr (!kShuffled) return Batch(values_[G]);
  }

 private:
  static constexpr bool kShuffled =
#if defined(__AVX512F__)
      Batch::size == 16 ||
#endif
#if defined(__AVX__)
      Batch::size == 8 ||
#endif
#if defined(__SSE2__)
      Batch::size == 4 ||
#endif
      false;
  Batch quad_{};  // the four values in each 128-bit lane
  float values_[kShuffled ? 1 : 4] = {};
};

// Nonzeros per step of csr_dot's main loop: whole quads of values, and a
// multiple of NC so that each step starts again at set 0.
constexpr int csr_step(int nc) {
  int step = 4;
  while (step % nc != 0) step += 4;
  return step;
}

template <class Batch, int MV, int NC, int64_t Stride = 1, class Index>
inline void csr_dot(const float* x, const Index* index, const float* values, int64_t begin,
                    int64_t end, bool accumulate, float* out) {
  constexpr int W = static_cast<int>(Batch::size);
  Batch acc[NC][MV];
#pragma GCC unroll 8
  for (int v = 0; v < MV; ++v) {
    acc[0][v] = accumulate ? Batch::load_unaligned(out + v * W) : Batch(0.0f);
#pragma GCC unroll 8
    for (int c = 1; c < NC; ++c) acc[c][v] = Batch(0.0f);
  }
  auto fma_row = [&](int c, const Batch& w, int64_t row_index) {
    const float* row = x + row_index * Stride;
#pragma GCC unroll 8
    for (int v = 0; v < MV; ++v)
      acc[c][v] = cpu::fused_madd(w, Batch::load_unaligned(row + v * W), acc[c][v]);
  };
  // Indexes by 64-bit loads taken apart with shifts (ALU ops): four 16-bit
  // rows or two 32-bit offsets per load instead of one. For the 16-bit rows,
  // bench_spmm 1024³, alternating binaries: 50% 7.0-7.1 -> 6.4-6.6 ms, 90%
  // 1.91-1.97 -> 1.81-1.88 ms.
  static_assert(sizeof(Index) == 2 || sizeof(Index) == 4);
  static_assert(std::endian::native == std::endian::little, "indexes unpacked little-endian");
  constexpr int S = csr_step(NC);
  int64_t p = begin;
  for (; p + S <= end; p += S) {
#pragma GCC unroll 4
    for (int q = 0; q < S; q += 4) {
      const ValueQuad<Batch> quad(values + p + q);
      uint64_t packed[sizeof(Index) / 2] = {};
      std::memcpy(packed, index + p + q, sizeof packed);
      auto row_of = [&](int g) -> int64_t {
        if constexpr (sizeof(Index) == 2)
          return static_cast<int64_t>((packed[0] >> (16 * g)) & 0xffff);
        else
          return static_cast<int64_t>(static_cast<Index>(packed[g / 2] >> (32 * (g % 2))));
      };
      fma_row((q + 0) % NC, quad.template get<0>(), row_of(0));
      fma_row((q + 1) % NC, quad.template get<1>(), row_of(1));
      fma_row((q + 2) % NC, quad.template get<2>(), row_of(2));
      fma_row((q + 3) % NC, quad.template get<3>(), row_of(3));
    }
  }
  for (; p < end; ++p) fma_row(0, Batch(values[p]), static_cast<int64_t>(index[p]));
#pragma GCC unroll 8
  for (int v = 0; v < MV; ++v) {
#pragma GCC unroll 8
    for (int c = 1; c < NC; ++c) acc[0][v] += acc[c][v];
    acc[0][v].store_unaligned(out + v * W);
  }
}

}  // namespace
}  // namespace tessera::kernels::sparse
