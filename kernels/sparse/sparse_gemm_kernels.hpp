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

// Vectors of A's rows per CSR panel (csr_tile's MV) per ISA: the packing
// (csr_panel_rows(), sparse_gemm.cpp) and each ISA's kernel read these. One
// broadcast of w and one index load feed MV FMAs. AVX2 takes 8, as many rows
// as AVX-512's 4: per nonzero 8 loads, the broadcast and a quarter of a row
// load against 8 FMAs, where 4 vectors had 6 loads per 4 FMAs; the 8 sums
// then take half of AVX2's 16 registers, in one set (csr_sum_sets).
// bench_spmm 1024³ (1 thread, AVX2 Zen 4 guest, three alternating rounds):
// 50% 19.0-19.3 -> 17.5-17.6 ms, 90-99% unchanged. A 16 KB panel for its
// 32 KiB L1 measured slower at 90% (4.8 -> 5.2 ms).
inline constexpr int kCsrPanelVectorsAvx512 = 4;
inline constexpr int kCsrPanelVectorsAvx2 = 8;
inline constexpr int kCsrPanelVectorsSse2 = 4;

// Per ISA: the BSR part (any block shape) and the CSR part.
#define TESSERA_SPARSE_ISA_KERNELS(isa)              \
  void sparse_bsr_tile__##isa(const SparseTileRun&); \
  void sparse_csr_tile__##isa(const SparseTileRun&);
TESSERA_SPARSE_ISA_KERNELS(avx512)
TESSERA_SPARSE_ISA_KERNELS(avx2)
TESSERA_SPARSE_ISA_KERNELS(sse2)
#undef TESSERA_SPARSE_ISA_KERNELS

}  // namespace tessera::kernels::sparse
