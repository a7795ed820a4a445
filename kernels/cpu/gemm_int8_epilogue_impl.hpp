#pragma once
// The int8 GEMM's epilogue over xsimd batches, instantiated by the per-ISA
// row kernels (gemm_int8_<isa>.cpp), each compiled with its own target
// flags. Include it from nowhere else: everything is in an anonymous
// namespace, so no function compiled for one ISA can be picked by the
// linker for a caller of another (gemm_microkernel_impl.hpp's rule).
#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_activation.hpp"

namespace tessera::kernels::cpu::int8_detail {
namespace {

// The epilogue on C[m0:m1, n0:n1] in apply_epilogue_scalar()'s order and
// bits (the activations are gemm_activation.hpp's lane-independent ones).
template <class Arch>
void epilogue_simd(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                   const GemmEpilogue& ep) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int64_t W = Batch::size;
  const bool before = ep.residual_position == GemmResidual::kBeforeActivation;
  for (int64_t m = m0; m < m1; ++m) {
    float* row = c + m * ldc;
    const float* residual = ep.residual ? ep.residual + m * ep.ld_residual : nullptr;
    int64_t n = n0;
    for (; n + W <= n1; n += W) {
      Batch x = Batch::load_unaligned(row + n);
      if (ep.bias_kind == GemmBias::kPerColumn) x += Batch::load_unaligned(ep.bias + n);
      if (ep.bias_kind == GemmBias::kPerRow) x += Batch(ep.bias[m]);
      if (residual && before) x += Batch::load_unaligned(residual + n);
      x = activation_approx(ep.activation, x, ep.clip_min, ep.clip_max, ep.leaky_alpha);
      if (residual && !before) x += Batch::load_unaligned(residual + n);
      x.store_unaligned(row + n);
    }
    for (; n < n1; ++n) row[n] = apply_epilogue_scalar(row[n], ep, m, n);
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu::int8_detail
