// Compiled with AVX-512 flags; called only where the CPU has AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "csr_loop_limit.hpp"
#include "thread_seconds.hpp"

namespace tessera::bench {
namespace {

enum class Step { kAsKernel, kNoIndexLoad, kNoBroadcast, kAddsNotFmas };

constexpr int kPanelRows = 128;   // k rows of the panel: 32 KB, as csr_k_block() sizes it
constexpr int kPanelFloats = 64;  // 4 AVX-512 vectors of rows of A

// out[0, 64) += Σ w[p] · x[off[p] .. +64): the kernel's loop, or a variant.
template <Step S>
__attribute__((noinline)) void steps(const float* x, const int32_t* off, const float* w,
                                     int64_t count, float* out) {
  __m512 acc[2][4];
  for (auto& set : acc)
    for (__m512& v : set) v = _mm512_setzero_ps();
  const __m512 fixed = _mm512_set1_ps(0.001f);
  for (int64_t p = 0; p + 2 <= count; p += 2) {
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m512 b = S == Step::kNoBroadcast ? fixed : _mm512_set1_ps(w[p + c]);
      const float* row =
          S == Step::kNoIndexLoad ? x + ((p + c) % kPanelRows) * kPanelFloats : x + off[p + c];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m512 a = _mm512_loadu_ps(row + 16 * v);
        acc[c][v] = S == Step::kAddsNotFmas ? _mm512_add_ps(acc[c][v], a)
                                            : _mm512_fmadd_ps(b, a, acc[c][v]);
      }
    }
  }
  for (int v = 0; v < 4; ++v)
    _mm512_storeu_ps(out + 16 * v,
                     _mm512_add_ps(_mm512_loadu_ps(out + 16 * v), acc[0][v] + acc[1][v]));
}

}  // namespace

std::vector<LoopStepTime> csr_loop_step_times() {
  if (!__builtin_cpu_supports("avx512f")) return {};
  alignas(64) static float panel[kPanelRows * kPanelFloats];
  alignas(64) float out[kPanelFloats] = {};
  std::fill(std::begin(panel), std::end(panel), 1.0f);
  // 4096 nonzeros at random rows of the panel (their offsets and values
  // take 32 KB more: L1 and L2 hits, as in the kernel).
  constexpr int64_t kSteps = 4096;
  std::vector<int32_t> offsets(kSteps);
  std::vector<float> values(kSteps, 0.001f);
  std::mt19937 rng(3);
  for (int32_t& o : offsets) o = static_cast<int32_t>(rng() % kPanelRows) * kPanelFloats;
  auto best_ns = [&](auto run) {
    double best = 1e30;
    for (int rep = 0; rep < 200; ++rep) {
      const double t0 = thread_seconds();
      for (int i = 0; i < 50; ++i) run();
      best = std::min(best, thread_seconds() - t0);
    }
    return best / 50 / kSteps * 1e9;
  };
  const float* x = panel;
  const int32_t* off = offsets.data();
  const float* w = values.data();
  return {
      {"as the kernel (index, broadcast, 4 loads + FMAs)",
       best_ns([&] { steps<Step::kAsKernel>(x, off, w, kSteps, out); })},
      {"offsets computed (no index load)",
       best_ns([&] { steps<Step::kNoIndexLoad>(x, off, w, kSteps, out); })},
      {"weight in a register (no broadcast)",
       best_ns([&] { steps<Step::kNoBroadcast>(x, off, w, kSteps, out); })},
      {"4 loads + adds (no FMAs, no broadcast)",
       best_ns([&] { steps<Step::kAddsNotFmas>(x, off, w, kSteps, out); })},
  };
}

}  // namespace tessera::bench
