// The AVX2 + FMA sparse GEMM kernels, compiled with those flags only here.
#include "kernels/sparse/sparse_gemm_impl.hpp"

namespace tessera::kernels::sparse {
namespace {
// 4-wide blocks run on the SSE vectors of the same CPU.
template <>
struct BlockLanes<xsimd::fma3<xsimd::avx2>, 4> {
  using type = xsimd::sse4_2;
};
}  // namespace

void sparse_bsr_tile__avx2(const SparseTileRun& run) {
  bsr_tile_any<xsimd::fma3<xsimd::avx2>>(run);
}
void sparse_csr_tile__avx2(const SparseTileRun& run) {
  csr_tile<xsimd::fma3<xsimd::avx2>, kCsrPanelVectorsAvx2>(run);
}

}  // namespace tessera::kernels::sparse
