#pragma once
// The NHWC path of "cpu.conv_depthwise": one tile of a depthwise conv whose
// input, output and fused residual are all NHWC, vectorised along channels.
// Written once over xsimd (conv_depthwise_nhwc_impl.hpp) and compiled per ISA
// (conv_depthwise_<isa>.cpp, each with its own target flags); conv_depthwise.cpp
// picks the one of gemm_isa(), so set_gemm_isa() forces it in tests like the
// SGEMM's.
#include <cstdint>

#include "graph/operator.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {

// One NHWC tile: image n, channels [c0, c1), output rows [oh0, oh1) ×
// columns [ow0, ow1).
struct DepthwiseNhwcTile {
  const float* x = nullptr;         // the whole input, NHWC
  const float* weights = nullptr;   // [kH·kW, c1 − c0]: the tile's channels, tap-major
  const float* bias = nullptr;      // [C] or null
  const float* residual = nullptr;  // the whole residual, NHWC, or null
  float* y = nullptr;               // the whole output, NHWC
  const ConvGeometry* g = nullptr;
  const graph::OpAttributes* attrs = nullptr;
  int64_t n = 0, c0 = 0, c1 = 0, oh0 = 0, oh1 = 0, ow0 = 0, ow1 = 0;
};

// Every output element is computed the same way wherever its tile starts:
// from zero, one fused multiply-add per in-bounds tap in the reference's
// (kh, kw) order, then + bias, + residual, the activation. Vector lanes and
// the scalar channel tail use the same FMA, so results are bitwise
// independent of the tiling (and so of the thread count).
void depthwise_nhwc_tile_avx512(const DepthwiseNhwcTile& tile);
// The one of gemm_isa() (set_gemm_isa() forces one, as for the SGEMM).
void depthwise_nhwc_tile(const DepthwiseNhwcTile& tile);

// W [C, 1, kH, kW]'s channels [c0, c1) as [kH·kW, c1 − c0], so each tap is a
// contiguous vector over channels: DepthwiseNhwcTile::weights. A per-thread
// buffer, valid until the thread's next call.
const float* depthwise_tap_major_weights(const float* w, int64_t taps, int64_t c0, int64_t c1);
void depthwise_nhwc_tile_avx2(const DepthwiseNhwcTile& tile);
void depthwise_nhwc_tile_portable(const DepthwiseNhwcTile& tile);

}  // namespace tessera::kernels::cpu
