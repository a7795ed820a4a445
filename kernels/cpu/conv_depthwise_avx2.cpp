// The AVX2 + FMA3 instance of the NHWC depthwise tile kernel
// (conv_depthwise_nhwc_impl.hpp). kernels/CMakeLists.txt compiles this file
// with the matching target flags; conv_depthwise.cpp calls it only when
// gemm_isa() is AVX2. 4 pixels × 1 vector: with 16 registers, the 3×3 block's
// accumulators, weights and reused input columns fit without spills.
#include "kernels/cpu/conv_depthwise_nhwc_impl.hpp"

namespace tessera::kernels::cpu {

void depthwise_nhwc_tile_avx2(const DepthwiseNhwcTile& tile) {
  depthwise_nhwc_tile_impl<xsimd::fma3<xsimd::avx2>, /*kFma=*/true, 4, 1>(tile);
}

}  // namespace tessera::kernels::cpu
