#pragma once
// The epilogue of one output row, shared by the sparse kernels: the CSR and
// BSR GEMM kernels (sparse_gemm_impl.hpp) and SparDR's convolution
// (conv_spardr_impl.hpp), for rows of C and for channel or pixel runs of Y.
// Anonymous namespace: include only from the per-ISA kernel headers.
#include <xsimd/xsimd.hpp>

#include <cstdint>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_lanes.hpp"

namespace tessera::kernels::sparse {
namespace {

// dst[j] = epilogue((accumulate ? dst[j] : 0) + src[j]) for j < count: row m
// of C, columns n .. n + count (gemm.hpp's epilogue contract, in
// conv_gemm's order; for SparDR, m and n index Y as its epilogue's bias and
// residual do: a channel's pixels, or a pixel's channels). The last count
// mod W columns take masked moves (simd_lanes.hpp), not a scalar epilogue:
// with C's 44 columns (SparDR's CV7) the scalar tail was half of the
// kernel's time.
template <class Arch>
inline void finish_row(const float* src, float* dst, int64_t count, int64_t m, int64_t n,
                       const cpu::GemmEpilogue& ep) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int64_t W = Batch::size;
  const bool before = ep.residual_position == cpu::GemmResidual::kBeforeActivation;
  const bool accumulate = ep.accumulate;
  const float* column_bias = ep.bias_kind == cpu::GemmBias::kPerColumn ? ep.bias + n : nullptr;
  const bool row_bias = ep.bias_kind == cpu::GemmBias::kPerRow;
  const Batch bias_m(row_bias ? ep.bias[m] : 0.0f);
  const float* residual = ep.residual ? ep.residual + m * ep.ld_residual + n : nullptr;
  cpu::with_activation(ep.activation, [&](auto activation) {
    auto finish = [&](int64_t j, auto load, auto store) {
      Batch x = load(src + j);
      if (accumulate) x += load(dst + j);
      if (column_bias) x += load(column_bias + j);
      if (row_bias) x += bias_m;
      if (residual && before) x += load(residual + j);
      x = cpu::activation_approx(decltype(activation)::value, x, ep.clip_min, ep.clip_max,
                                 ep.leaky_alpha);
      if (residual && !before) x += load(residual + j);
      store(dst + j, x);
    };
    int64_t j = 0;
    for (; j + W <= count; j += W)
      finish(
          j, [](const float* p) { return Batch::load_unaligned(p); },
          [](float* p, const Batch& x) { x.store_unaligned(p); });
    if (j < count) {
      const int lanes = static_cast<int>(count - j);
      finish(
          j, [lanes](const float* p) { return cpu::load_lanes<Arch>(p, 0, lanes); },
          [lanes](float* p, const Batch& x) { cpu::store_lanes<Arch>(p, x, 0, lanes); });
    }
  });
}

}  // namespace
}  // namespace tessera::kernels::sparse
