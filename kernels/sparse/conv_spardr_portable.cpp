// The baseline (SSE2) SparDR kernel (conv_spardr_impl.hpp): blocks of 4
// vectors of 4 pixels; no FMA instruction (xsimd::fma multiplies, then adds).
#include "kernels/sparse/conv_spardr_impl.hpp"

namespace tessera::kernels::sparse {

void spardr_chunk__sse2(const SpardrChunk& chunk) {
  spardr_chunk_impl<xsimd::sse2, 4>(chunk);
}

void spardr_row__sse2(const SpardrRow& row) {
  spardr_row_impl<xsimd::sse2>(row);
}

}  // namespace tessera::kernels::sparse
