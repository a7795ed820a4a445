#pragma once
// Tile-level sparse-weight GEMM for the CPU: one call computes one output tile
//
//   Y[m0:m1, n0:n1] (+)= A[m0:m1, :K] · B[:K, n0:n1], then the epilogue,
//
// with A dense (activations, row-major) and B a constant sparse weight,
// packed once at prepare time (SparTA §3.3: one sparse tensor becomes a
// block-sparse part plus a fine-grained part whose results are summed).
//
// Two encodings, each read with one index per stored unit, never per element:
//  - BSR with the block shape BN×BK (BN columns of Y, i.e. of B's N axis, by
//    BK steps of K; shapes 4×1, 8×1, 16×1, 32×32) a compile-time parameter
//    of its kernel. A block is BK rows of BN floats, N contiguous, so the
//    SIMD lanes run along N over a block and Y rows are written in place:
//    for each stored block, MR rows of A are broadcast and FMA'd into MR×BN
//    accumulators (the dense microkernel's order, one k index per block).
//    A is packed per MR rows ([K][MR], the dense microkernel's A panel), so
//    a stored block costs what the dense kernel pays for its elements.
//  - CSR over B's columns (= rows of W [N, K]): unstructured nonzeros. Lanes
//    run along M instead: per k-block, MB rows of A are transposed into a
//    [KB, MB] panel that stays in L1, and each nonzero w(k, n) broadcasts w
//    and FMAs it into the MB-row vector Y^T[n] (4 vectors: one broadcast and
//    one index per 4 FMAs; LIBXSMM's / XNNPACK's SpMM orientation), then
//    Y^T is transposed back. Unstructured nonzeros never fill an N-vector.
// A SparseMatrix holds one or both parts; with both, per chunk of rows the
// BSR part runs first and the CSR part adds to it with the real epilogue.
//
// The kernels (AVX-512, AVX2, SSE2 via xsimd) are those of the SGEMM ISA in
// use when the matrix is packed (kernels/cpu/gemm.hpp: gemm_isa(), forced
// with set_gemm_isa()); sparse_gemm_tile() always runs those.
//
// Usage:
//   SparseLayoutChoice choice = choose_sparse_layout(w, K, N, /*ldb=*/N, false);
//   if (choice.relative_cost < 1.0) {
//     SparseMatrix b = pack_sparse_b(w, K, N, N, false, choice.layout);
//     sparse_gemm_tile(x, K, b, y, N, {.m0 = 0, .m1 = M, .n0 = 0, .n1 = N}, epilogue);
//   }
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::sparse {

using cpu::GemmEpilogue;
using cpu::GemmIsa;
using cpu::GemmTile;

// A BSR block: `n` columns of Y (B's N axis) × `k` steps of K.
struct SparseBlockShape {
  int n = 1, k = 1;
};
// Every block shape with a kernel, in this order (index = SparseLayout::block).
inline constexpr SparseBlockShape kSparseBlockShapes[] = {{4, 1}, {8, 1}, {16, 1}, {32, 32}};
inline constexpr int kSparseBlockShapeCount = 4;
std::string block_shape_name(int block);  // e.g. "32x32"

// What pack_sparse_b() stores: blocks of shape kSparseBlockShapes[block]
// holding at least min_block_nonzeros nonzeros go to the BSR part, every
// other nonzero to the CSR part. block = -1: CSR only; min_block_nonzeros =
// 1: BSR only (blocks keep their zeros).
struct SparseLayout {
  int block = -1;
  int64_t min_block_nonzeros = 1;
};
std::string layout_name(const SparseLayout& layout);  // "csr", "bsr16x1", "bsr32x32+csr"

// A weight B [K, N] packed into a BSR part and/or a CSR part.
class SparseMatrix {
 public:
  struct Free {
    void operator()(float* p) const;
  };
  // BSR: strip s holds columns [s·BN, s·BN + BN) (zero past N); its blocks
  // are strip_blocks[s] .. strip_blocks[s + 1], each with its first k in
  // block_k and BK·BN values (k-major, N contiguous) at values + b·BK·BN,
  // 64-byte aligned. K past the matrix is zero and never read from A.
  struct Bsr {
    int block = -1;  // index into kSparseBlockShapes; -1: no BSR part
    std::vector<int64_t> strip_blocks;
    std::vector<int32_t> block_k;
    std::unique_ptr<float[], Free> values;
    int64_t blocks() const { return block_k.empty() ? 0 : static_cast<int64_t>(block_k.size()); }
  };
  // CSR over columns of B, cut into k-blocks of k_block rows (the A^T
  // panel of one k-block stays in L1 while every column passes over it).
  // Within k-block q, the columns of each group of kColumnGroup are listed
  // by ascending nonzero count, so the loop over one column's nonzeros
  // exits after the same trip count as the previous column's and the
  // branch predictor gets it right: the i-th listed column, column_order[q·N
  // + i], has its nonzeros at column_begin[q·N + i] .. column_begin[q·N + i
  // + 1], k ascending. offsets holds each nonzero's element offset in the
  // panel, (k − q·k_block)·panel_rows, so the inner loop does no index
  // arithmetic; panel_rows is the kernel's M panel for the ISA the matrix
  // is packed for.
  struct Csr {
    static constexpr int64_t kColumnGroup = 256;
    bool present = false;
    int64_t k_block = 1;
    int64_t panel_rows = 1;
    std::vector<int32_t> column_order;
    std::vector<int64_t> column_begin;
    std::vector<int32_t> offsets;
    std::vector<float> values;
    int64_t k_blocks(int64_t k) const { return k <= 0 ? 1 : (k + k_block - 1) / k_block; }
  };

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  GemmIsa isa() const { return isa_; }
  const Bsr& bsr() const { return bsr_; }
  const Csr& csr() const { return csr_; }
  SparseLayout layout() const { return layout_; }
  int64_t nonzeros() const { return nonzeros_; }  // of B
  // Floats the kernels multiply per row of A: BSR blocks' elements + CSR nonzeros.
  int64_t stored_elements() const;
  bool empty() const { return !bsr_.values && !csr_.present; }

 private:
  friend SparseMatrix pack_sparse_b(const float*, int64_t, int64_t, int64_t, bool,
                                    const SparseLayout&);
  int64_t k_ = 0, n_ = 0, nonzeros_ = 0;
  GemmIsa isa_ = GemmIsa::kPortable;
  SparseLayout layout_;
  Bsr bsr_;
  Csr csr_;
};

// Packs B [K, N] (transposed = false: b[k·ldb + n]) or B^T stored as [N, K]
// (transposed = true: b[n·ldb + k]: Gemm transB, conv weights [OC, C·kh·kw])
// for the SGEMM ISA in use. Throws std::invalid_argument on a bad shape or
// K ≥ 2^31.
SparseMatrix pack_sparse_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                           const SparseLayout& layout);

// Y[m0:m1, n0:n1] (+)= A[m0:m1, :K] · B[:K, n0:n1] with the epilogue (the
// same contract as cpu::gemm_tile(): a and c point at element (0, 0), only
// the tile is written; thread-safe, per-thread scratch).
void sparse_gemm_tile(const float* a, int64_t lda, const SparseMatrix& b, float* c, int64_t ldc,
                      const GemmTile& tile, const GemmEpilogue& epilogue = {});

// The layout the cost model picks for B, and its cost relative to the dense
// SGEMM (< 1: the sparse kernel is expected to be faster). The costs per
// stored element come from the measured density crossovers below.
struct SparseLayoutChoice {
  SparseLayout layout;
  double density = 1.0;        // nonzeros / (K·N)
  double relative_cost = 1.0;  // the layout's time / the dense SGEMM's
  std::string summary;         // e.g. "density 9.8%: bsr32x32+csr, est. 0.21x dense"
};
SparseLayoutChoice choose_sparse_layout(const float* b, int64_t k, int64_t n, int64_t ldb,
                                        bool transposed);

// Measured crossovers (bench/kernels/bench_spmm.cpp, 1024³, one thread,
// AVX-512 Xeon): the fraction of B a format may store before it is slower
// than the dense SGEMM. See sparse_gemm.cpp for the numbers.
double csr_density_crossover();
double bsr_density_crossover(int block);

}  // namespace tessera::kernels::sparse
