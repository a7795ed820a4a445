#pragma once
// SparTA's plan transformation for one sparse weight (§3.3, Algorithm 3,
// WeightedBlockCover): cover the nonzeros of B [K, N] with blocks of the
// shapes that have a kernel (4×1, 8×1, 16×1, 32×32, N × K) plus single
// elements (1×1: the CSR part), each block weighing what its kernel costs on
// this machine, at the least total weight. The chosen blocks become one BSR
// part per shape and the rest the CSR part; sparse_gemm_tile() sums them.
//
// The kernels need aligned block grids, and the aligned grids of these
// shapes nest (a 32×32 block holds 32 rows of two 16×1 blocks, a 16×1 two
// 8×1, an 8×1 two 4×1, a 4×1 four elements): two aligned blocks are either
// nested or disjoint. The cover problem is then a tree, and instead of the
// paper's greedy (least cost per newly covered nonzero, an approximation for
// general set cover) a bottom-up pass finds the cheapest cover exactly, in
// time linear in K·N: a block's cost is min(its own weight, the sum of its
// children's). Like SparTA §4 ("we enumerate all combinations of block
// sizes … and pick the best one") the pass runs once per subset of shapes,
// charging each part used a fixed overhead (one more pass over the rows of
// A and C), so a shape that saves less than its pass costs is left out.
//
// The weights (SparseCosts) are measured on this machine once and cached;
// see sparse_costs().
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::sparse {

// A BSR block: `n` columns of Y (B's N axis) × `k` steps of K.
struct SparseBlockShape {
  int n = 1, k = 1;
};
// Every block shape with a kernel, in this order (index = SparseLayout::block),
// each nested in the next one's aligned grid.
inline constexpr SparseBlockShape kSparseBlockShapes[] = {{4, 1}, {8, 1}, {16, 1}, {32, 32}};
inline constexpr int kSparseBlockShapeCount = 4;
std::string block_shape_name(int block);  // e.g. "32x32"

// Time of each format relative to the dense SGEMM, per float it multiplies
// per row of A: CSR per nonzero, BSR per stored block element (the inverse
// of the density at which a format breaks even with dense).
struct SparseCosts {
  double csr = 1.0;
  double block[kSparseBlockShapeCount] = {1.0, 1.0, 1.0, 1.0};
  // Each part beyond the first: one more pass over the rows of A and C, as
  // a fraction of the dense time.
  double extra_part = 0.0;
  // Where they come from, for the compile report: "built-in", "measured on
  // this machine, cached in PATH", or "built-in (...why not measured)".
  std::string source;
};

// The constants measured with bench_spmm (1024³, one thread, AVX-512 Xeon).
SparseCosts builtin_sparse_costs();

// The costs for the SGEMM ISA in use (cpu::gemm_isa()), determined once
// per process and ISA: the built-in ones unless TESSERA_SPARSE_COSTS=measure
// (block_cover.cpp says why); with it, the cache file
// sparse_cost_cache_path() is read, or,
// when it does not exist, the kernels are timed (measure_sparse_costs(),
// ~0.1 s) and the result written there. A cache that cannot be read or
// parsed, or written, leaves the built-in costs with a note in `source`.
const SparseCosts& sparse_costs();
// What sparse_costs() does once, done now (tests vary the environment).
SparseCosts load_sparse_costs();

// Times each block kernel per stored block and CSR per nonzero against the
// dense SGEMM on a small synthetic problem (one row chunk of 128 × 512 ×
// 512), fastest of a few runs, on the calling thread.
SparseCosts measure_sparse_costs();

// "CPU model name | ISA", the key a cache file belongs to.
std::string sparse_cost_cache_key();
// $XDG_CACHE_HOME/tessera/ (else $HOME/.cache/tessera/) + a file named
// after the key's hash; empty when neither variable is set.
std::string sparse_cost_cache_path();
// Reads costs written by write_sparse_costs() for `key`; nullopt with
// *error set on a missing, unreadable or malformed file or another key.
std::optional<SparseCosts> read_sparse_costs(const std::string& path, const std::string& key,
                                             std::string* error);
// Writes them (creating the directory); false with *error set on failure.
bool write_sparse_costs(const std::string& path, const std::string& key, const SparseCosts& costs,
                        std::string* error);

// The cover of one weight: per block shape, the chosen blocks (aligned, as
// strip · k_blocks + k_block indices of that shape's grid, ascending, so
// strip-major), pairwise disjoint; every nonzero in none of them is CSR's.
struct BlockCover {
  int64_t k = 0, n = 0;
  std::vector<int64_t> blocks[kSparseBlockShapeCount];
  int64_t nonzeros = 0;                                 // of B
  int64_t block_nonzeros[kSparseBlockShapeCount] = {};  // covered by each part
  int64_t csr_nonzeros = 0;
  double relative_cost = 1.0;  // estimated time / the dense SGEMM's
  int parts() const;           // BSR parts with blocks, + 1 when CSR has nonzeros
};

// Grid size of a shape over [K, N]: strips along N, k-blocks along K.
int64_t block_strips(int64_t n, int block);
int64_t block_k_blocks(int64_t k, int block);

// The cheapest cover of B [K, N] (b[k·ldb + n], or b[n·ldb + k] when
// transposed) under `costs`. Throws std::invalid_argument on a bad shape.
BlockCover weighted_block_cover(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                                const SparseCosts& costs);

// "bsr32x32+bsr16x1+csr"; "csr" for a cover with no blocks.
std::string cover_name(const BlockCover& cover);
// "bsr32x32 71% of nonzeros + bsr16x1 20% + csr 9%".
std::string cover_parts_summary(const BlockCover& cover);

}  // namespace tessera::kernels::sparse
