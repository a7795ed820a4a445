#pragma once
// The GEMM epilogue's activations over xsimd batches: the one implementation
// that the microkernels (gemm_microkernel_impl.hpp), the sparse kernels
// (kernels/sparse/sparse_gemm_impl.hpp), the depthwise convolutions and the
// scalar epilogue (apply_epilogue_scalar, gemm.cpp) all run. Sigmoid, SiLU
// and GELU use vector_math.hpp's polynomials, whose lanes are independent,
// so the scalar form (one SSE2 lane, activation_lane) gives the same bits as
// any vector width: fused, unfused (cpu.unary) and edge elements agree.
// Anonymous namespace, like vector_math.hpp: include it only from per-ISA
// translation units or from baseline ones.
#include <xsimd/xsimd.hpp>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace tessera::kernels::cpu {
namespace {

template <class B>
inline B activation_approx(GemmActivation activation, B x, float clip_min, float clip_max) {
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
  }
  return x;
}

// One element through the same per-lane arithmetic (SSE2 is the x86-64
// baseline, so every translation unit may use it).
inline float activation_lane(GemmActivation activation, float x, float clip_min, float clip_max) {
  using Lane = xsimd::batch<float, xsimd::sse2>;
  return activation_approx(activation, Lane(x), clip_min, clip_max).get(0);
}

}  // namespace
}  // namespace tessera::kernels::cpu
