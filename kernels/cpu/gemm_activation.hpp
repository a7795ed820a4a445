#pragma once
// The GEMM epilogue's activations over xsimd batches: the one implementation
// that the microkernels (gemm_microkernel_impl.hpp), the sparse kernels
// (kernels/sparse/sparse_gemm_impl.hpp), the depthwise convolutions and,
// through vector_ops().activation, the scalar epilogue
// (apply_epilogue_scalar, gemm.cpp) all run. Sigmoid, SiLU and GELU use
// vector_math.hpp's polynomials, whose lanes are independent, so on one ISA
// every vector width and a padded tail give the same bits: fused, unfused
// (cpu.unary) and edge elements agree. Anonymous namespace, like
// vector_math.hpp: include it only from per-ISA translation units.
#include <xsimd/xsimd.hpp>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace tessera::kernels::cpu {
namespace {

template <class B>
inline B activation_approx(GemmActivation activation, B x, float clip_min, float clip_max,
                           float leaky_alpha) {
  switch (activation) {
    case GemmActivation::kNone:
      return x;
    case GemmActivation::kRelu:
      return xsimd::max(x, B(0.0f));
    case GemmActivation::kClip:
      return xsimd::min(xsimd::max(x, B(clip_min)), B(clip_max));
    case GemmActivation::kSigmoid:
      return sigmoid_approx(x);
    case GemmActivation::kGelu:
      return gelu_erf_approx(x);
    case GemmActivation::kGeluTanh:
      return gelu_tanh_approx(x);
    case GemmActivation::kSilu:
      return silu_approx(x);
    case GemmActivation::kLeakyRelu:  // exact: the reference's x >= 0 ? x : alpha x
      return xsimd::select(x >= B(0.0f), x, B(leaky_alpha) * x);
  }
  return x;
}

// f(std::integral_constant<GemmActivation, a>{}) for the run-time a: a loop
// in f that applies activation_approx(decltype(a)::value, ...) per vector is
// then compiled once per activation, with no switch inside it. GCC does not
// hoist the switch out of such a loop by itself: the sparse kernels' row
// epilogue spent about a third of a 64->256 1x1 conv (90% sparse, 56x56)
// in it, reloading the activation and its parameters per vector.
template <class F>
inline decltype(auto) with_activation(GemmActivation activation, F&& f) {
  using A = GemmActivation;
  switch (activation) {
    case A::kNone:
      break;
    case A::kRelu:
      return f(std::integral_constant<A, A::kRelu>{});
    case A::kClip:
      return f(std::integral_constant<A, A::kClip>{});
    case A::kSigmoid:
      return f(std::integral_constant<A, A::kSigmoid>{});
    case A::kGelu:
      return f(std::integral_constant<A, A::kGelu>{});
    case A::kGeluTanh:
      return f(std::integral_constant<A, A::kGeluTanh>{});
    case A::kSilu:
      return f(std::integral_constant<A, A::kSilu>{});
    case A::kLeakyRelu:
      return f(std::integral_constant<A, A::kLeakyRelu>{});
  }
  return f(std::integral_constant<A, A::kNone>{});
}

// The activation over `rows` rows of n floats, ld apart, in place, in
// batches of Arch (map_span: the tail through a padded buffer and the same
// code, so an element's bits do not depend on where the span starts or
// ends), compiled once per activation (with_activation).
template <class Arch>
inline void activation_rows(GemmActivation activation, float clip_min, float clip_max,
                            float leaky_alpha, float* values, int64_t ld, int64_t rows, int64_t n) {
  using B = xsimd::batch<float, Arch>;
  with_activation(activation, [&](auto a) {
    for (int64_t i = 0; i < rows; ++i)
      map_span<B>(values + i * ld, values + i * ld, n, 0.0f, [&](B x) {
        return activation_approx(decltype(a)::value, x, clip_min, clip_max, leaky_alpha);
      });
  });
}

// The activation over a block of Rows rows of Vectors whole batches, ld
// apart, in place: the microkernels' deferred pass (gemm_microkernel_impl.hpp)
// over a whole MR×NR block, in map_group's batches across rows (row by row,
// a 6×16 block's rows of two batches each left the FMA ports idle behind
// SiLU's divide: bench_conv's 1×1 16->96 + SiLU 0.75 -> 0.61 ms).
template <class Arch, int Rows, int Vectors>
inline void activation_block(GemmActivation activation, float clip_min, float clip_max,
                             float leaky_alpha, float* values, int64_t ld) {
  using B = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(B::size);
  constexpr int kCount = Rows * Vectors;
  const auto at = [&](int index) {
    return values + (index / Vectors) * ld + (index % Vectors) * W;
  };
  with_activation(activation, [&](auto a) {
    const auto map = [&](B x) {
      return activation_approx(decltype(a)::value, x, clip_min, clip_max, leaky_alpha);
    };
    // Not unrolled: one group's code per activation and block shape.
#pragma GCC unroll 1
    for (int g = 0; g + kMapGroup <= kCount; g += kMapGroup) {
      const auto group_at = [&](int u) { return at(g + u); };
      map_group<B>(group_at, group_at, map);
    }
#pragma GCC unroll 4
    for (int i = kCount / kMapGroup * kMapGroup; i < kCount; ++i)
      map(B::load_unaligned(at(i))).store_unaligned(at(i));
  });
}

// values[i] = activation(values[i]) for i < n: one row of activation_rows.
template <class Arch>
inline void activation_span_approx(GemmActivation activation, float clip_min, float clip_max,
                                   float leaky_alpha, float* values, int64_t n) {
  activation_rows<Arch>(activation, clip_min, clip_max, leaky_alpha, values, 0, 1, n);
}

// The activations that cost a vector polynomial (and, but for the GELUs, a
// divide): worth a pass of their own after the stores.
constexpr bool activation_is_transcendental(GemmActivation activation) {
  return activation == GemmActivation::kSigmoid || activation == GemmActivation::kSilu ||
         activation == GemmActivation::kGelu || activation == GemmActivation::kGeluTanh;
}

}  // namespace
}  // namespace tessera::kernels::cpu
