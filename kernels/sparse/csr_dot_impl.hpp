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
// One broadcast and one index load (a quarter of one for 16-bit rows) per MV
// FMAs; NC sets of sums rotate
// between nonzeros so consecutive FMAs do not wait on each other, and are
// added in order 0, 1, … at the end. The sums are local to this function:
// passed by reference to a helper, GCC keeps such arrays in memory.
// Anonymous namespace: include only from the per-ISA kernel headers.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_fma.hpp"

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
  int64_t p = begin;
  // 16-bit rows: four per 64-bit load, taken apart with shifts (ALU ops), so
  // a step issues one load per four nonzeros for its rows instead of four:
  // the step is bound by load ports (4 vectors, a broadcast, the row).
  // bench_spmm 1024³, alternating binaries: 50% 7.0-7.1 -> 6.4-6.6 ms, 90%
  // 1.91-1.97 -> 1.81-1.88 ms. The at most 3 left over go one by one.
  constexpr bool grouped = sizeof(Index) == 2 && 4 % NC == 0;
  if constexpr (grouped) {
    static_assert(std::endian::native == std::endian::little, "rows unpacked little-endian");
    constexpr int G = 4;
    for (; p + G <= end; p += G) {
      uint64_t packed;
      std::memcpy(&packed, index + p, sizeof packed);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const int c = g % NC;
        const Batch w(values[p + g]);
        const float* row = x + static_cast<int64_t>((packed >> (16 * g)) & 0xffff) * Stride;
#pragma GCC unroll 8
        for (int v = 0; v < MV; ++v)
          acc[c][v] = cpu::fused_madd(w, Batch::load_unaligned(row + v * W), acc[c][v]);
      }
    }
  }
  for (; !grouped && p + NC <= end; p += NC) {
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const Batch w(values[p + c]);
      const float* row = x + static_cast<int64_t>(index[p + c]) * Stride;
#pragma GCC unroll 8
      for (int v = 0; v < MV; ++v)
        acc[c][v] = cpu::fused_madd(w, Batch::load_unaligned(row + v * W), acc[c][v]);
    }
  }
  for (; p < end; ++p) {
    const Batch w(values[p]);
    const float* row = x + static_cast<int64_t>(index[p]) * Stride;
#pragma GCC unroll 8
    for (int v = 0; v < MV; ++v)
      acc[0][v] = cpu::fused_madd(w, Batch::load_unaligned(row + v * W), acc[0][v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < MV; ++v) {
#pragma GCC unroll 8
    for (int c = 1; c < NC; ++c) acc[0][v] += acc[c][v];
    acc[0][v].store_unaligned(out + v * W);
  }
}

}  // namespace
}  // namespace tessera::kernels::sparse
