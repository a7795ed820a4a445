// The SSE2 (x86-64 baseline) instance of the NHWC depthwise tile kernel
// (conv_depthwise_nhwc_impl.hpp): no FMA, so lanes and the scalar tail both
// multiply, round, add, round.
#include "kernels/cpu/conv_depthwise_nhwc_impl.hpp"

namespace tessera::kernels::cpu {

void depthwise_nhwc_tile_portable(const DepthwiseNhwcTile& tile) {
  depthwise_nhwc_tile_impl<xsimd::sse2, /*kFma=*/false, 4, 1>(tile);
}

}  // namespace tessera::kernels::cpu
