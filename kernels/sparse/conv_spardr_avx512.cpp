// The AVX-512 SparDR kernel (conv_spardr_impl.hpp): blocks of 4 vectors of
// 16 pixels. kernels/CMakeLists.txt compiles this file, and only this file,
// with the AVX-512 flags; conv_spardr.cpp calls it only when the SGEMM's ISA
// choice is AVX-512. GCC 12's own _mm512_undefined_ps() trips
// -Wmaybe-uninitialized once inlined (GCC bug 105593; see gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/sparse/conv_spardr_impl.hpp"

namespace tessera::kernels::sparse {

void spardr_chunk__avx512(const SpardrChunk& chunk) {
  spardr_chunk_impl<xsimd::avx512f, 4>(chunk);
}

void spardr_row__avx512(const SpardrRow& row) {
  spardr_row_impl<xsimd::avx512f>(row);
}

}  // namespace tessera::kernels::sparse
