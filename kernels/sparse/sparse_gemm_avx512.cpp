// The AVX-512 sparse GEMM kernels. kernels/CMakeLists.txt compiles this file,
// and only this file, with the AVX-512 flags; sparse_gemm.cpp calls into it
// only when the CPU supports them (the SGEMM's ISA choice).
// GCC 12's own _mm512_undefined_ps() trips -Wmaybe-uninitialized once
// inlined (GCC bug 105593), as in kernels/cpu/gemm_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/sparse/sparse_gemm_impl.hpp"

namespace tessera::kernels::sparse {
namespace {
// 4- and 8-wide blocks run on the narrower vectors of the same CPU.
template <>
struct BlockLanes<xsimd::avx512f, 4> {
  using type = xsimd::sse4_2;
};
template <>
struct BlockLanes<xsimd::avx512f, 8> {
  using type = xsimd::fma3<xsimd::avx2>;
};
}  // namespace

void sparse_bsr_tile__avx512(const SparseTileRun& run) {
  bsr_tile_any<xsimd::avx512f>(run);
}
void sparse_csr_tile__avx512(const SparseTileRun& run) {
  csr_tile<xsimd::avx512f, kCsrPanelVectorsAvx512>(run);
}

}  // namespace tessera::kernels::sparse
