#pragma once
// The NHWC path of "cpu.conv_depthwise": one tile of a depthwise conv whose
// input, output and fused residual are all NHWC, vectorised along channels.
// Written once over xsimd (conv_depthwise_nhwc_impl.hpp) and compiled per ISA
// (conv_depthwise_<isa>.cpp, each with its own target flags); conv_depthwise.cpp
// picks the one of gemm_isa(), so set_gemm_isa() forces it in tests like the
// SGEMM's.
#include <cstdint>

#include "graph/operator.hpp"
#include "kernels/cpu/aligned_scratch.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {

// One NHWC tile: image n, channels [c0, c1), output rows [oh0, oh1) ×
// columns [ow0, ow1).
struct DepthwiseNhwcTile {
  const float* x = nullptr;         // the whole input, NHWC
  const float* weights = nullptr;   // tap-major: kH·kW rows of the tile's channels c0..c1
  int64_t weight_stride = 0;        // floats between two taps' rows
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
void depthwise_nhwc_tile_avx2(const DepthwiseNhwcTile& tile);
void depthwise_nhwc_tile_portable(const DepthwiseNhwcTile& tile);
// The one of gemm_isa() (set_gemm_isa() forces one, as for the SGEMM).
void depthwise_nhwc_tile(const DepthwiseNhwcTile& tile);

// All C channels' weights W [C, 1, kH, kW] tap-major, [kH·kW][C], 64-byte
// aligned: built once per op when the model is loaded (cpu.conv_depthwise's
// and cpu.conv_expand_depthwise's prepared state), not per tile: MobileNetV2's
// 14x14x384 depthwise convs cut in four tiles took 18.6-20.5 us each with
// the kH·kW·C strided copies per tile, 15.7-16.4 without (1 thread, tessera
// run --profile, this Zen 5).
struct TapMajorWeights {
  AlignedFloats data;  // null when W is not a constant
  int64_t channels = 0;
};
TapMajorWeights tap_major_weights(const float* w, int64_t taps, int64_t channels);

// Points t.weights and t.weight_stride at the tile's channels of `prepared`,
// or, where W is not a constant (prepared.data null), at its channels
// [t.c0, t.c1) transposed now into a per-thread buffer, valid until the
// thread's next call.
void set_tile_weights(DepthwiseNhwcTile& t, const TapMajorWeights& prepared, const float* w,
                      int64_t taps);

}  // namespace tessera::kernels::cpu
