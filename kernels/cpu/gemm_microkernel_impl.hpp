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

#include <algorithm>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "kernels/cpu/simd_fma.hpp"
#include "kernels/cpu/simd_lanes.hpp"

namespace tessera::kernels::cpu {
namespace {

// load(p) reads the vector at p: a whole one, or only the block's valid
// lanes at an edge (simd_lanes.hpp).
template <class Batch, class Load>
__attribute__((always_inline)) inline Batch apply_microtile_epilogue(
    Batch x, const GemmMicrotileEpilogue& ep, int64_t i, int64_t j, Load load) {
  if (ep.bias_kind == GemmBias::kPerColumn) x += load(ep.bias + j);
  if (ep.bias_kind == GemmBias::kPerRow) x += Batch(ep.bias[i]);
  const bool residual_before = ep.residual_position == GemmResidual::kBeforeActivation;
  if (ep.residual && residual_before) x += load(ep.residual + i * ep.ld_residual + j);
  x = activation_approx(ep.activation, x, ep.clip_min, ep.clip_max, ep.leaky_alpha);
  if (ep.residual && !residual_before) x += load(ep.residual + i * ep.ld_residual + j);
  return x;
}

// Software prefetch distance for the packed B panel, in k steps: far enough
// ahead to cover an L2 hit (~16 cycles) at MR·NR/(2·W) cycles per k step,
// near enough that the lines are still in L1 when used.
constexpr int kPrefetchBSteps = 8;

// Panels of 64 columns are not prefetched in the k loop: a k step reads
// four whole lines of B, in order, which the hardware's streamers fetch by
// themselves, and the four prefetches took load-port slots beside the six
// broadcasts and four loads. 6x64 without them (bench_sgemm, three
// alternating rounds, GFLOP/s): BERT's cold 128x3072x768 171-174 -> 176-184,
// 3136x256x64 162-171 -> 171-175, 256x64x576 193-203 -> 200-210, the rest
// within noise; BERT-base at 2 threads 70.7-74.5 -> 70.5-71.0 ms, at 1
// thread 135.9-139.0 -> 133.2-137.6, ResNet-50 at 1 thread 44.1-45.7 ->
// 43.3-44.8 (tessera run, four alternating rounds). The narrower panels
// keep them: without, 16x16 lost 4-10% and 14x32 on 784x32x192 7%.
template <int NR>
constexpr bool kPrefetchBInLoop = NR < 64;

// The accumulators live in registers for a whole call only if nothing takes
// their address: GCC's scalar replacement gives up on an array that a
// lambda captures by reference ("needs to live in memory"), and then every
// call zeroed, spilled and reloaded all MR·NV vectors through the stack (168
// stack moves of zmm registers in the 6x64 kernel). So the k loop and the
// stores are always-inline functions taking the array by reference: a 6x64
// call with K = 16, bias and Clip, in cache, 371-423 → 343-360 cycles.

// One k step: NV vectors of B, MR broadcasts of A, MR·NV FMAs; the B panel
// kPrefetchBSteps ahead into L1 and, while k < dense_lines, the next block's
// lines (prefetch_next) into L2.
template <class Batch, int MR, int NR, bool kDense, class AOfRow>
__attribute__((always_inline)) inline void gemm_k_step(Batch (&acc)[MR][NR / Batch::size],
                                                       const float* bk, int64_t k, int64_t kc,
                                                       const float* next, int64_t dense_lines,
                                                       AOfRow a_of_row) {
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int NV = NR / W;
  constexpr int kBLines = (NR * 4 + 63) / 64;
  if constexpr (kPrefetchBInLoop<NR>) {
#pragma GCC unroll 8
    for (int l = 0; l < kBLines; ++l) __builtin_prefetch(bk + kPrefetchBSteps * NR + l * 16);
  }
  if constexpr (kDense) {
    if (k < dense_lines) __builtin_prefetch(next + k * 16, 0, 2);
    if (k + kc < dense_lines) __builtin_prefetch(next + (k + kc) * 16, 0, 2);
  }
  Batch bv[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) bv[v] = Batch::load_aligned(bk + v * W);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const Batch ai(a_of_row(i));
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = fused_madd(ai, bv[v], acc[i][v]);
  }
}

// The k loop, unrolled by 4 (the loop counter and pointer updates are
// amortised over 4·MR·NV FMAs). a_at(k, i) is A[i, k].
// A share of at most kc lines of the next block is spread evenly over the
// loop, one line every kc / share steps: issued back to back in the first
// steps, the fetches from memory held the line fill buffers that the B
// panel's own loads from L2 need (BERT's FFN GEMMs with weights from memory,
// 128×768×3072: 149-150 → 157-158 GFLOP/s; BERT-base at 1 thread 3% faster
// in six interleaved rounds). A larger share (few row blocks per B block:
// Winograd's 16-block GEMMs) takes one or two lines per step.
template <class Batch, int MR, int NR, class AAt>
__attribute__((always_inline)) inline void gemm_k_loop(Batch (&acc)[MR][NR / Batch::size],
                                                       const GemmMicrokernelArgs& args, AAt a_at) {
  const float* b = args.b;
  const int64_t kc = args.kc;
  const float* next = args.prefetch_next;
  const int64_t next_lines = next ? args.prefetch_lines : 0;
  const bool spread = next_lines > 0 && next_lines <= kc;
  const int64_t dense_lines = spread ? 0 : next_lines;
  int64_t k = 0;
  if (dense_lines > 0) {
    // Its own loop: the checks and their registers stay out of the common
    // one (with them, GCC kept two more of 8x48's row pointers in vector
    // registers: one more port-0 move per k step, ~5% of a long-K call).
#pragma GCC unroll 4
    for (; k < kc; ++k)
      gemm_k_step<Batch, MR, NR, true>(acc, b + k * NR, k, kc, next, dense_lines,
                                       [&](int i) { return a_at(k, i); });
    return;
  }
  if (spread) {
    const int64_t every = kc / next_lines;
    for (int64_t l = 0; l < next_lines; ++l) {
      __builtin_prefetch(next + l * 16, 0, 2);
#pragma GCC unroll 4
      for (const int64_t end = k + every; k < end; ++k)
        gemm_k_step<Batch, MR, NR, false>(acc, b + k * NR, k, kc, next, 0,
                                          [&](int i) { return a_at(k, i); });
    }
  }
#pragma GCC unroll 4
  for (; k < kc; ++k)
    gemm_k_step<Batch, MR, NR, false>(acc, b + k * NR, k, kc, next, 0,
                                      [&](int i) { return a_at(k, i); });
}

// Every row and column of the MR×NR block is in C (most blocks): stored
// and given the epilogue without per-vector edge tests.
template <int MR, int NR>
inline bool whole_block(const GemmMicrokernelArgs& args) {
  return args.m_valid >= MR && args.n_begin == 0 && args.n_valid >= NR;
}

// Only rows [0, m_valid) and columns [n_begin, n_valid) are read back and
// written: an edge block goes straight to C, its partial vectors through
// masked loads and stores. ep null: no epilogue.
template <class Arch, int MR, int NR>
__attribute__((always_inline)) inline void gemm_store_block(
    const xsimd::batch<float, Arch> (&acc)[MR][NR / xsimd::batch<float, Arch>::size],
    const GemmMicrokernelArgs& args, const GemmMicrotileEpilogue* ep) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int NV = NR / W;
  float* c = args.c;
  const int64_t ldc = args.ldc;
  const int64_t m_valid = args.m_valid, n_begin = args.n_begin, n_valid = args.n_valid;
  const bool load_c = args.load_c;
  const auto load = [](const float* p) { return Batch::load_unaligned(p); };
  if (whole_block<MR, NR>(args)) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        float* cv = c + i * ldc + v * W;
        Batch x = acc[i][v];
        if (load_c) x += load(cv);
        if (ep) x = apply_microtile_epilogue(x, *ep, i, v * W, load);
        x.store_unaligned(cv);
      }
    return;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i >= m_valid) break;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      if (v * W >= n_valid) break;
      if ((v + 1) * W <= n_begin) continue;
      float* cv = c + i * ldc + v * W;
      Batch x = acc[i][v];
      if (v * W >= n_begin && (v + 1) * W <= n_valid) {
        if (load_c) x += load(cv);
        if (ep) x = apply_microtile_epilogue(x, *ep, i, v * W, load);
        x.store_unaligned(cv);
      } else {
        const int lo = static_cast<int>(std::max<int64_t>(0, n_begin - v * W));
        const int hi = static_cast<int>(std::min<int64_t>(W, n_valid - v * W));
        const auto load = [lo, hi](const float* p) { return load_lanes<Arch>(p, lo, hi); };
        if (load_c) x += load(cv);
        if (ep) x = apply_microtile_epilogue(x, *ep, i, v * W, load);
        store_lanes<Arch>(cv, x, lo, hi);
      }
    }
  }
}

// The stores with the common epilogues' fields made compile-time constants:
// the epilogue's branches then fold away in each of the MR·NV unrolled
// copies instead of being re-dispatched per vector (the C stores may alias
// *args.epilogue, so the compiler reloads its fields after every store).
// With a short k loop (1×1 convs over few channels) that dispatch cost as
// much as the FMAs. Rare forms keep the generic path.
template <class Arch, int MR, int NR>
__attribute__((always_inline)) inline void gemm_store_epilogue_fields(
    const xsimd::batch<float, Arch> (&acc)[MR][NR / xsimd::batch<float, Arch>::size],
    const GemmMicrokernelArgs& args, GemmMicrotileEpilogue ep) {
  const auto with_constant_activation = [&]() __attribute__((always_inline)) {
    switch (ep.activation) {
      case GemmActivation::kNone:
        ep.activation = GemmActivation::kNone;
        gemm_store_block<Arch, MR, NR>(acc, args, &ep);
        return true;
      case GemmActivation::kRelu:
        ep.activation = GemmActivation::kRelu;
        gemm_store_block<Arch, MR, NR>(acc, args, &ep);
        return true;
      case GemmActivation::kClip:
        ep.activation = GemmActivation::kClip;
        gemm_store_block<Arch, MR, NR>(acc, args, &ep);
        return true;
      default:
        return false;
    }
  };
  if (ep.bias_kind == GemmBias::kPerColumn && ep.residual == nullptr) {
    ep.bias_kind = GemmBias::kPerColumn;
    ep.residual = nullptr;
    if (with_constant_activation()) return;
  }
  // ResNet's residual blocks: bias, the residual, then ReLU (or none, Clip).
  if (ep.bias_kind == GemmBias::kPerColumn && ep.residual != nullptr &&
      ep.residual_position == GemmResidual::kBeforeActivation) {
    ep.bias_kind = GemmBias::kPerColumn;
    ep.residual_position = GemmResidual::kBeforeActivation;
    if (with_constant_activation()) return;
  }
  gemm_store_block<Arch, MR, NR>(acc, args, &ep);
}

// The block's stores and epilogue, in L1 after them for a transcendental
// activation.
template <class Arch, int MR, int NR>
__attribute__((always_inline)) inline void gemm_store_with_epilogue(
    const xsimd::batch<float, Arch> (&acc)[MR][NR / xsimd::batch<float, Arch>::size],
    const GemmMicrokernelArgs& args) {
  if (!args.epilogue) return gemm_store_block<Arch, MR, NR>(acc, args, nullptr);
  GemmMicrotileEpilogue ep = *args.epilogue;
  // Sigmoid, SiLU and the GELUs take ~20 vector operations and a dozen
  // constants each. Applied to each accumulator as it was stored, they ran on
  // the generic path with every other accumulator of the block live (spills,
  // and the activation re-dispatched per vector). So the block is stored with
  // bias and residual only, and the activation is a second pass over its
  // rows, still in L1, compiled per activation (as the depthwise kernels
  // defer theirs). Lanes are independent: the bits are the fused form's.
  const GemmActivation deferred =
      activation_is_transcendental(ep.activation) &&
              (ep.residual == nullptr || ep.residual_position == GemmResidual::kBeforeActivation)
          ? ep.activation
          : GemmActivation::kNone;
  if (deferred != GemmActivation::kNone) ep.activation = GemmActivation::kNone;
  gemm_store_epilogue_fields<Arch, MR, NR>(acc, args, ep);
  if (deferred == GemmActivation::kNone) return;
  if (whole_block<MR, NR>(args))
    activation_block<Arch, MR, NR / xsimd::batch<float, Arch>::size>(
        deferred, ep.clip_min, ep.clip_max, ep.leaky_alpha, args.c, args.ldc);
  else
    activation_rows<Arch>(deferred, ep.clip_min, ep.clip_max, ep.leaky_alpha, args.c + args.n_begin,
                          args.ldc, std::min<int64_t>(MR, args.m_valid),
                          args.n_valid - args.n_begin);
}

// C and a fused residual are touched only after the k loop: fetch every
// line of their rows now (rows are far apart and often in no cache after
// the previous slice; an unaligned row of NR floats spans up to NR/16 + 1
// lines). With a short k loop the residual's lines are a large part of a
// block's time (bench_conv's 1×1 conv, K = 64: 0.53 ms with a residual,
// 0.37 without); this prefetch and the constant epilogue took the residual
// case from 0.64 to 0.56.
template <int MR, int NR>
__attribute__((always_inline)) inline void gemm_prefetch_c(const GemmMicrokernelArgs& args) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int l = 0; l < NR; l += 16) __builtin_prefetch(args.c + i * args.ldc + l, 1);
    __builtin_prefetch(args.c + i * args.ldc + NR - 1, 1);
  }
  if (args.epilogue && args.epilogue->residual) {
    const float* r = args.epilogue->residual;
    const int64_t ldr = args.epilogue->ld_residual;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int l = 0; l < NR; l += 16) __builtin_prefetch(r + i * ldr + l);
      __builtin_prefetch(r + i * ldr + NR - 1);
    }
  }
}

// Not in sanitizer builds: ASan cannot see inside the assembly anyway, and
// the extra k loops doubled this file's -fsanitize=address,undefined
// compile (6 -> 12 minutes, most of .ci/run's sanitizer stage); the release
// tests run them.
#if defined(__AVX512F__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__SANITIZE_ADDRESS__)
#define TESSERA_STRIDED_ROW_BROADCASTS 1
// A block of A read in place has its MR rows at one stride; with a pointer
// per row, GCC kept only some of 12-16 pointers in registers and reloaded
// the rest from the stack at every k step (16x16: five loads and two
// vector-register moves per 16 FMAs, which are themselves one broadcast
// load each). Here rows 0-7 are p + j·s and rows 8-15 are p8 + j·s, j·s
// being an x86 address mode over s, 3s, 5s and 7s (s·1, s·2, s·4, 3s·1,
// 3s·2, 5s·1, 7s·1): six registers for up to 16 rows. The broadcasts are
// inline assembly because that address form is the point; A is not written
// while a kernel runs, so they need no memory dependence. Used for MR >= 12
// only: 6x64 and 8x48 keep their pointers in registers anyway and measured
// 3-8% slower this way; 16x16 on 196x96x576 and 256x64x576 was 5-10%
// faster, 12x32 on 3136x256x64 5% (bench_sgemm, two rounds each).
struct StridedRows {
  const char* p;   // row 0
  const char* p8;  // row 8
  int64_t s, s3, s5, s7;
};

inline StridedRows strided_rows(const float* a, int64_t row_stride) {
  const int64_t s = row_stride * static_cast<int64_t>(sizeof(float));
  const char* p = reinterpret_cast<const char*>(a);
  return {p, p + 8 * s, s, 3 * s, 5 * s, 7 * s};
}

// Row i (a constant once the k step is unrolled) at float k of its row.
__attribute__((always_inline)) inline __m512 broadcast_row(const StridedRows& r, int i, int64_t k) {
  const char* base = (i < 8 ? r.p : r.p8) + k * static_cast<int64_t>(sizeof(float));
  __m512 x;
  switch (i % 8) {
    case 0:
      asm("vbroadcastss (%1), %0" : "=v"(x) : "r"(base));
      break;
    case 1:
      asm("vbroadcastss (%1,%2,1), %0" : "=v"(x) : "r"(base), "r"(r.s));
      break;
    case 2:
      asm("vbroadcastss (%1,%2,2), %0" : "=v"(x) : "r"(base), "r"(r.s));
      break;
    case 3:
      asm("vbroadcastss (%1,%2,1), %0" : "=v"(x) : "r"(base), "r"(r.s3));
      break;
    case 4:
      asm("vbroadcastss (%1,%2,4), %0" : "=v"(x) : "r"(base), "r"(r.s));
      break;
    case 5:
      asm("vbroadcastss (%1,%2,1), %0" : "=v"(x) : "r"(base), "r"(r.s5));
      break;
    case 6:
      asm("vbroadcastss (%1,%2,2), %0" : "=v"(x) : "r"(base), "r"(r.s3));
      break;
    default:
      asm("vbroadcastss (%1,%2,1), %0" : "=v"(x) : "r"(base), "r"(r.s7));
      break;
  }
  return x;
}
#endif

template <class Arch, int MR, int NR>
__attribute__((always_inline)) inline void gemm_microkernel_panel(const GemmMicrokernelArgs& args) {
  using Batch = xsimd::batch<float, Arch>;
  static_assert(NR % Batch::size == 0, "NR must be a multiple of the vector width");
  constexpr int NV = NR / static_cast<int>(Batch::size);
  gemm_prefetch_c<MR, NR>(args);
  Batch acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = Batch(0.0f);
  // One k loop per way of reading A (a_at(k, i) is A[i, k]), all meeting
  // at one copy of the stores: their epilogue forms are most of the code.
  if (args.a_k_stride == 1 || args.a_offsets) {
#if defined(TESSERA_STRIDED_ROW_BROADCASTS)
    if constexpr (std::is_same_v<Arch, xsimd::avx512f> && MR >= 12 && MR <= 16) {
      if (args.m_valid >= MR) {  // every row real: one stride apart
        const StridedRows r = strided_rows(args.a, args.a_row_stride);
        if (const int32_t* offsets = args.a_offsets)
          gemm_k_loop<Batch, MR, NR>(
              acc, args, [&](int64_t k, int i) { return Batch(broadcast_row(r, i, offsets[k])); });
        else
          gemm_k_loop<Batch, MR, NR>(
              acc, args, [&](int64_t k, int i) { return Batch(broadcast_row(r, i, k)); });
        return gemm_store_with_epilogue<Arch, MR, NR>(acc, args);
      }
    }
#endif
    // A in place: one pointer per row, rows past m_valid clamped to the last
    // valid one (their results are discarded by the caller).
    const float* rows[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
      rows[i] = args.a + (i < args.m_valid ? i : args.m_valid - 1) * args.a_row_stride;
    if (const int32_t* offsets = args.a_offsets) {
      // Implicit GEMM: one offset per k step, shared by the MR rows.
      gemm_k_loop<Batch, MR, NR>(acc, args, [&](int64_t k, int i) { return rows[i][offsets[k]]; });
    } else {
      gemm_k_loop<Batch, MR, NR>(acc, args, [&](int64_t k, int i) { return rows[i][k]; });
    }
  } else {
    // A packed as kc groups of MR consecutive scalars: one pointer, the
    // broadcasts at constant offsets from it.
    const float* a = args.a;
    gemm_k_loop<Batch, MR, NR>(acc, args, [&](int64_t k, int i) { return a[k * MR + i]; });
  }
  gemm_store_with_epilogue<Arch, MR, NR>(acc, args);
}

// args.panels blocks side by side (GemmMicrokernelArgs::panels).
template <class Arch, int MR, int NR>
inline void gemm_microkernel(const GemmMicrokernelArgs& args) {
  GemmMicrokernelArgs panel = args;
  GemmMicrotileEpilogue ep;
  if (args.epilogue) {
    ep = *args.epilogue;
    panel.epilogue = &ep;
  }
  for (int64_t q = 0;;) {
    gemm_microkernel_panel<Arch, MR, NR>(panel);
    if (++q >= args.panels) break;
    panel.b += args.b_panel_stride;
    panel.c += NR;
    if (ep.bias_kind == GemmBias::kPerColumn) ep.bias += NR;
    if (ep.residual) ep.residual += NR;
    if (q < args.prefetch_panels)
      panel.prefetch_next += args.next_panel_stride;
    else
      panel.prefetch_next = nullptr;
  }
}

// Packs rows [0, rows) of A (row i at a + i·lda, kc floats each) into the
// microkernel's packed layout, kc groups of MR scalars, rows ≥ `rows` zero.
// A transposing copy: on x86 each 4×4 block (4 rows × 4 k) is transposed in
// registers (4 loads, 8 shuffles, 4 stores instead of 16 scalar moves) and
// the last MR mod 4 rows go in pairs; compiled per ISA like the kernels.
template <int MR>
inline void gemm_pack_a(const float* a, int64_t lda, int64_t rows, int64_t kc, float* out) {
  int64_t k = 0;
#if defined(__SSE2__)
  if (rows == MR) {
    for (; k + 4 <= kc; k += 4) {
      float* o = out + k * MR;
      int i = 0;
#pragma GCC unroll 4
      for (; i + 4 <= MR; i += 4) {
        __m128 r0 = _mm_loadu_ps(a + (i + 0) * lda + k);
        __m128 r1 = _mm_loadu_ps(a + (i + 1) * lda + k);
        __m128 r2 = _mm_loadu_ps(a + (i + 2) * lda + k);
        __m128 r3 = _mm_loadu_ps(a + (i + 3) * lda + k);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(o + 0 * MR + i, r0);
        _mm_storeu_ps(o + 1 * MR + i, r1);
        _mm_storeu_ps(o + 2 * MR + i, r2);
        _mm_storeu_ps(o + 3 * MR + i, r3);
      }
      if constexpr (MR % 4 >= 2) {
        const __m128 r0 = _mm_loadu_ps(a + (i + 0) * lda + k);
        const __m128 r1 = _mm_loadu_ps(a + (i + 1) * lda + k);
        const __m128 lo = _mm_unpacklo_ps(r0, r1), hi = _mm_unpackhi_ps(r0, r1);
        _mm_storel_pi(reinterpret_cast<__m64*>(o + 0 * MR + i), lo);
        _mm_storeh_pi(reinterpret_cast<__m64*>(o + 1 * MR + i), lo);
        _mm_storel_pi(reinterpret_cast<__m64*>(o + 2 * MR + i), hi);
        _mm_storeh_pi(reinterpret_cast<__m64*>(o + 3 * MR + i), hi);
        i += 2;
      }
      if constexpr (MR % 2 == 1)
        for (int kk = 0; kk < 4; ++kk) o[kk * MR + i] = a[i * lda + k + kk];
    }
  }
#endif
  for (; k < kc; ++k) {
    for (int64_t i = 0; i < rows; ++i) out[k * MR + i] = a[i * lda + k];
    for (int64_t i = rows; i < MR; ++i) out[k * MR + i] = 0.0f;
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
