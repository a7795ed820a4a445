#pragma once
// The register-blocked SGEMM microkernel, written once over xsimd batches and
// instantiated per ISA by gemm_<isa>.cpp, each compiled with its own target
// flags. Include it from nowhere else: everything here is in an anonymous
// namespace so no inline function compiled for AVX-512 can be picked by the
// linker for a caller on a baseline CPU.
//
// The MR×NR block of C lives in MR·NR/W vector registers for the whole k
// loop; each k step loads NR/W vectors of the packed B panel and broadcasts
// MR scalars of A (BLIS's microkernel, Van Zee & van de Geijn 2015).
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm_microkernel.hpp"

namespace tessera::kernels::cpu {
namespace {

template <class Batch>
inline Batch apply_microtile_epilogue(Batch x, const GemmMicrotileEpilogue& ep, int64_t i,
                                      int64_t j) {
  if (ep.bias_kind == GemmBias::kPerColumn) x += Batch::load_unaligned(ep.bias + j);
  if (ep.bias_kind == GemmBias::kPerRow) x += Batch(ep.bias[i]);
  const bool residual_before = ep.residual_position == GemmResidual::kBeforeActivation;
  if (ep.residual && residual_before)
    x += Batch::load_unaligned(ep.residual + i * ep.ld_residual + j);
  switch (ep.activation) {
    case GemmActivation::kNone:
      break;
    case GemmActivation::kRelu:
      x = xsimd::max(x, Batch(0.0f));
      break;
    case GemmActivation::kClip:
      x = xsimd::min(xsimd::max(x, Batch(ep.clip_min)), Batch(ep.clip_max));
      break;
    case GemmActivation::kSigmoid:
      x = Batch(1.0f) / (Batch(1.0f) + xsimd::exp(-x));
      break;
  }
  if (ep.residual && !residual_before)
    x += Batch::load_unaligned(ep.residual + i * ep.ld_residual + j);
  return x;
}

template <class Arch, int MR, int NR>
inline void gemm_microkernel(const GemmMicrokernelArgs& args) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int NV = NR / W;
  static_assert(NR % W == 0, "NR must be a multiple of the vector width");

  Batch acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = Batch(0.0f);

      // C is touched only after the k loop: start fetching its rows now (they
      // are far apart, often in no cache after the previous KC slice).
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    __builtin_prefetch(args.c + i * args.ldc, 1);
    __builtin_prefetch(args.c + i * args.ldc + NR - 1, 1);
  }

  const float* b = args.b;
  const int64_t kc = args.kc;
  if (args.a_k_stride == 1) {
    // A in place: one pointer per row, rows past m_valid clamped to the last
    // valid one (their results are discarded by the caller).
    const float* rows[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
      rows[i] = args.a + (i < args.m_valid ? i : args.m_valid - 1) * args.a_row_stride;
    for (int64_t k = 0; k < kc; ++k) {
      Batch bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = Batch::load_aligned(b + v * W);
      b += NR;
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const Batch ai(rows[i][k]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
      }
    }
  } else {
    // A packed as kc groups of MR consecutive scalars.
    const float* a = args.a;
    for (int64_t k = 0; k < kc; ++k) {
      Batch bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bv[v] = Batch::load_aligned(b + v * W);
      b += NR;
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const Batch ai(a[i]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
      }
      a += MR;
    }
  }

  float* c = args.c;
  const int64_t ldc = args.ldc;
  if (args.load_c) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] += Batch::load_unaligned(c + i * ldc + v * W);
  }
  if (args.epilogue) {
    const GemmMicrotileEpilogue& ep = *args.epilogue;
    // Unrolled like the rest, so the accumulators stay in registers.
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = apply_microtile_epilogue(acc[i][v], ep, i, v * W);
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v].store_unaligned(c + i * ldc + v * W);
}

}  // namespace
}  // namespace tessera::kernels::cpu
