#pragma once
// The contract between sparse_gemm_tile() and the per-ISA sparse kernels
// (sparse_gemm_<isa>.cpp, each compiled with its own target flags). Internal
// to kernels/sparse.
#include <cstdint>

#include "kernels/sparse/sparse_gemm.hpp"

namespace tessera::kernels::sparse {

// One part of `b` over the tile, with `epilogue` (its accumulate flag says
// whether the part adds to C): the BSR part `bsr` (one of b's bsr_parts())
// for a BSR kernel, b's CSR part for a CSR kernel.
struct SparseTileRun {
  const float* a = nullptr;
  int64_t lda = 0;
  const SparseMatrix* b = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  GemmTile tile;
  const GemmEpilogue* epilogue = nullptr;
  const SparseMatrix::Bsr* bsr = nullptr;
};

using SparseTileKernel = void (*)(const SparseTileRun&);

// Per ISA: the BSR part (any block shape) and the CSR part.
#define TESSERA_SPARSE_ISA_KERNELS(isa)              \
  void sparse_bsr_tile__##isa(const SparseTileRun&); \
  void sparse_csr_tile__##isa(const SparseTileRun&);
TESSERA_SPARSE_ISA_KERNELS(avx512)
TESSERA_SPARSE_ISA_KERNELS(avx2)
TESSERA_SPARSE_ISA_KERNELS(sse2)
#undef TESSERA_SPARSE_ISA_KERNELS

}  // namespace tessera::kernels::sparse
