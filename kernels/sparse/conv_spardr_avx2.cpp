// The AVX2 + FMA SparDR kernel (conv_spardr_impl.hpp): blocks of 4 vectors
// of 8 pixels, compiled with those flags only here.
#include "kernels/sparse/conv_spardr_impl.hpp"

namespace tessera::kernels::sparse {

void spardr_chunk__avx2(const SpardrChunk& chunk) {
  spardr_chunk_impl<xsimd::fma3<xsimd::avx2>, 4>(chunk);
}

void spardr_row__avx2(const SpardrRow& row) {
  spardr_row_impl<xsimd::fma3<xsimd::avx2>>(row);
}

}  // namespace tessera::kernels::sparse
