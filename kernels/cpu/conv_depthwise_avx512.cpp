// The AVX-512 instance of the NHWC depthwise tile kernel
// (conv_depthwise_nhwc_impl.hpp). kernels/CMakeLists.txt compiles this file
// with the matching target flags; conv_depthwise.cpp calls it only when
// gemm_isa() is AVX-512. 4 pixels × 2 vectors: 8 accumulators, and at 3×3
// stride 2 the block's 9 input columns × 2 vectors still fit the 32 registers.
// GCC 12's own _mm512_undefined_ps() self-initialises and trips
// -Wmaybe-uninitialized once inlined (GCC bug 105593; see gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/conv_depthwise_nhwc_impl.hpp"

namespace tessera::kernels::cpu {

void depthwise_nhwc_tile_avx512(const DepthwiseNhwcTile& tile) {
  depthwise_nhwc_tile_impl<xsimd::avx512f, /*kFma=*/true, 4, 2>(tile);
}

}  // namespace tessera::kernels::cpu
