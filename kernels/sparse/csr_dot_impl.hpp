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
// One broadcast and one index load per MV FMAs; NC sets of sums rotate
// between nonzeros so consecutive FMAs do not wait on each other, and are
// added in order 0, 1, … at the end. The sums are local to this function:
// passed by reference to a helper, GCC keeps such arrays in memory.
// Anonymous namespace: include only from the per-ISA kernel headers.
#include <cstdint>

#include "kernels/cpu/simd_fma.hpp"

namespace tessera::kernels::sparse {
namespace {

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
  for (; p + NC <= end; p += NC) {
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
