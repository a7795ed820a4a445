// The baseline (SSE2) sparse GEMM kernels: every block shape is a whole
// number of 4-wide vectors. No FMA instruction: xsimd::fma multiplies, then adds.
#include "kernels/sparse/sparse_gemm_impl.hpp"

namespace tessera::kernels::sparse {

void sparse_bsr_tile__sse2(const SparseTileRun& run) {
  bsr_tile_any<xsimd::sse2>(run);
}
void sparse_csr_tile__sse2(const SparseTileRun& run) {
  csr_tile<xsimd::sse2, kCsrPanelVectorsSse2>(run);
}

}  // namespace tessera::kernels::sparse
