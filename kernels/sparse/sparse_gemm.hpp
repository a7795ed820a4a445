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
// A SparseMatrix holds a CSR part and/or BSR parts of several shapes (the
// weighted block cover of block_cover.hpp); with more than one, per chunk
// of rows the first part writes the bare product, the others add to it and
// the last one applies the epilogue.
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
#include "kernels/sparse/block_cover.hpp"

namespace tessera::kernels::sparse {

using cpu::GemmEpilogue;
using cpu::GemmIsa;
using cpu::GemmTile;

// What pack_sparse_b() stores. With a cover (choose_sparse_layout()'s
// choice): one BSR part per block shape the cover uses, holding its blocks,
// and every other nonzero in the CSR part; block and min_block_nonzeros
// then only name the part with the most nonzeros. Without one, a single
// part: blocks of shape kSparseBlockShapes[block] holding at least
// min_block_nonzeros nonzeros go to the BSR part, every other nonzero to
// the CSR part. block = -1: CSR only; min_block_nonzeros = 1: BSR only
// (blocks keep their zeros).
struct SparseLayout {
  int block = -1;
  int64_t min_block_nonzeros = 1;
  std::shared_ptr<const BlockCover> cover = nullptr;
};
// "csr", "bsr16x1", "bsr32x32+csr", "bsr32x32+bsr16x1+csr"
std::string layout_name(const SparseLayout& layout);

// A weight B [K, N] packed into BSR parts (one per block shape) and/or a
// CSR part; each nonzero is in exactly one part.
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
  // + 1], k ascending. rows holds each nonzero's row in the k-block's
  // panel, k − q·k_block, in 16 bits (k_block <= kMaxBlockRows): 6 bytes
  // per nonzero instead of 8 with 32-bit offsets, so a quarter less weight
  // data to stream (pruned ResNet-50's 2.5 M nonzeros do not stay in a
  // shared L3 beside the activations); the kernel multiplies by panel_rows,
  // its M panel for the ISA the matrix is packed for.
  struct Csr {
    static constexpr int64_t kColumnGroup = 256;
    bool present = false;
    int64_t k_block = 1;
    int64_t panel_rows = 1;
    std::vector<int32_t> column_order;
    std::vector<int64_t> column_begin;
    static constexpr int64_t kMaxBlockRows = int64_t{1} << 16;
    std::vector<uint16_t> rows;
    std::vector<float> values;
    int64_t k_blocks(int64_t k) const { return k <= 0 ? 1 : (k + k_block - 1) / k_block; }
  };

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  GemmIsa isa() const { return isa_; }
  // The BSR parts, ascending block shape; bsr() is the first (block -1
  // when there is none).
  const std::vector<Bsr>& bsr_parts() const { return bsr_parts_; }
  const Bsr& bsr() const;
  const Csr& csr() const { return csr_; }
  SparseLayout layout() const { return layout_; }
  int64_t nonzeros() const { return nonzeros_; }  // of B
  // Floats the kernels multiply per row of A: BSR blocks' elements + CSR nonzeros.
  int64_t stored_elements() const;
  bool empty() const { return bsr_parts_.empty() && !csr_.present; }

 private:
  friend SparseMatrix pack_sparse_b(const float*, int64_t, int64_t, int64_t, bool,
                                    const SparseLayout&);
  int64_t k_ = 0, n_ = 0, nonzeros_ = 0;
  GemmIsa isa_ = GemmIsa::kPortable;
  SparseLayout layout_;
  std::vector<Bsr> bsr_parts_;
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
// SGEMM (< 1: the sparse kernel is expected to be faster): the weighted
// block cover (block_cover.hpp) under sparse_costs().
struct SparseLayoutChoice {
  SparseLayout layout;
  double density = 1.0;        // nonzeros / (K·N)
  double relative_cost = 1.0;  // the layout's time / the dense SGEMM's
  // e.g. "B density 9.8%: bsr32x32 71% of nonzeros + bsr16x1 20% + csr 9%,
  // est. 0.18x the dense time (costs: built-in)"
  std::string summary;
};
SparseLayoutChoice choose_sparse_layout(const float* b, int64_t k, int64_t n, int64_t ldb,
                                        bool transposed);

// The crossovers under sparse_costs(): the fraction of B a format may store
// before it is slower than the dense SGEMM (1 / its cost).
double csr_density_crossover();
double bsr_density_crossover(int block);

}  // namespace tessera::kernels::sparse
