// The AVX2 + FMA SparDR kernel (conv_spardr_impl.hpp): blocks of 8 vectors
// of 8 pixels (one set of 8 sums in AVX2's 16 registers, csr_sum_sets), as
// many pixels as AVX-512's blocks, compiled with those flags only here.
// bench_spardr (1 thread, AVX2 Zen 4 guest, alternating rounds): CV9, the
// one Table II layer on this kernel, 0.55-0.56 -> 0.47-0.48 ms with 4.
#include "kernels/sparse/conv_spardr_impl.hpp"

namespace tessera::kernels::sparse {

void spardr_chunk__avx2(const SpardrChunk& chunk) {
  spardr_chunk_impl<xsimd::fma3<xsimd::avx2>, 8>(chunk);
}

void spardr_row__avx2(const SpardrRow& row) {
  spardr_row_impl<xsimd::fma3<xsimd::avx2>>(row);
}

}  // namespace tessera::kernels::sparse
