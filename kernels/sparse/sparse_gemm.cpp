// Sparse GEMM driver: packing B into BSR + CSR parts, the layout choice
// (SparTA §3.3's weighted block cover, specialised to one block shape plus
// the 1×1 remainder, with costs from measured crossovers) and the ISA
// dispatch. Compiled for the baseline ISA; the kernels live in
// sparse_gemm_<isa>.cpp.
#include "kernels/sparse/sparse_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/sparse/sparse_gemm_kernels.hpp"

namespace tessera::kernels::sparse {
namespace {

// The density crossovers, measured with `bench_spmm --crossover` (1024³,
// one thread, AVX-512 Xeon shared with other jobs, against Tessera's dense
// SGEMM in the same run: 30.1 ms): the fraction of B a format may store
// (elements it multiplies / K·N) before it is slower than the dense SGEMM.
// Their inverses are the formats' costs per stored element relative to
// dense, which is all the layout choice needs.
//  - CSR: 11.6 ms at 10% (dense 31.2), 37.5 ms at 30%, 52.7 ms at 50%
//    ⇒ ~3.7–4.2× dense per stored element: breaks even near 24%.
constexpr double kCsrDensityCrossover = 0.24;
//  - BSR, at 30% block density (where the sparse kernels are used; the
//    cost per element grows with density as B leaves the caches): 4×1
//    (4 lanes) 46.7 ms ⇒ ~19%; 8×1 (8 lanes) 21.1 ms ⇒ ~43%; 16×1 18.5 ms
//    ⇒ ~49%; 32×32 24.8 ms ⇒ ~36%.
constexpr double kBsrDensityCrossover[kSparseBlockShapeCount] = {0.19, 0.43, 0.49, 0.36};
// A layout replaces the best so far only when it is estimated at least 10%
// faster: a block part next to a CSR part costs a second pass over Y that
// the per-element costs do not see.
constexpr double kLayoutSwitchMargin = 0.9;

struct Kernels {
  SparseTileKernel bsr;
  SparseTileKernel csr;
};

Kernels kernels_for(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return {sparse_bsr_tile__avx512, sparse_csr_tile__avx512};
    case GemmIsa::kAvx2:
      return {sparse_bsr_tile__avx2, sparse_csr_tile__avx2};
    case GemmIsa::kPortable:
      break;
  }
  return {sparse_bsr_tile__sse2, sparse_csr_tile__sse2};
}

float* allocate_aligned(size_t floats) {
  const size_t bytes = (std::max<size_t>(floats, 1) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  return p;
}

// B[k][n] whichever way it is stored.
struct WeightView {
  const float* b;
  int64_t ldb;
  bool transposed;
  float at(int64_t k, int64_t n) const { return transposed ? b[n * ldb + k] : b[k * ldb + n]; }
};

// Nonzeros of every BN×BK block: counts[s·Q + q] for strip s, k-block q.
std::vector<int32_t> block_counts(const WeightView& w, int64_t k, int64_t n,
                                  const SparseBlockShape& shape) {
  const int64_t strips = (n + shape.n - 1) / shape.n, kblocks = (k + shape.k - 1) / shape.k;
  std::vector<int32_t> counts(static_cast<size_t>(strips * kblocks), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      if (w.at(kk, j) != 0.0f) ++counts[(j / shape.n) * kblocks + kk / shape.k];
  return counts;
}

void check_shape(const char* what, int64_t k, int64_t n, int64_t ldb, bool transposed) {
  if (k < 0 || n < 0 || ldb < (transposed ? k : n))
    throw std::invalid_argument(std::string(what) + ": bad shape or leading dimension");
  if (k >= std::numeric_limits<int32_t>::max())
    throw std::invalid_argument(std::string(what) + ": K must be below 2^31");
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
  return text;
}

}  // namespace

void SparseMatrix::Free::operator()(float* p) const {
  std::free(p);
}

std::string block_shape_name(int block) {
  if (block < 0 || block >= kSparseBlockShapeCount) return "1x1";
  const SparseBlockShape& s = kSparseBlockShapes[block];
  return std::to_string(s.n) + "x" + std::to_string(s.k);
}

std::string layout_name(const SparseLayout& layout) {
  if (layout.block < 0) return "csr";
  return "bsr" + block_shape_name(layout.block) + (layout.min_block_nonzeros > 1 ? "+csr" : "");
}

double csr_density_crossover() {
  return kCsrDensityCrossover;
}

double bsr_density_crossover(int block) {
  if (block < 0 || block >= kSparseBlockShapeCount)
    throw std::invalid_argument("bsr_density_crossover: no such block shape");
  return kBsrDensityCrossover[block];
}

int64_t SparseMatrix::stored_elements() const {
  int64_t stored = static_cast<int64_t>(csr_.values.size());
  if (bsr_.block >= 0) {
    const SparseBlockShape& s = kSparseBlockShapes[bsr_.block];
    stored += bsr_.blocks() * s.n * s.k;
  }
  return stored;
}

SparseMatrix pack_sparse_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                           const SparseLayout& layout) {
  check_shape("pack_sparse_b", k, n, ldb, transposed);
  if (layout.block >= kSparseBlockShapeCount || layout.min_block_nonzeros < 1)
    throw std::invalid_argument("pack_sparse_b: no such block shape, or a threshold below 1");
  const WeightView w{b, ldb, transposed};
  SparseMatrix m;
  m.k_ = k;
  m.n_ = n;
  m.isa_ = cpu::gemm_isa();
  m.layout_ = layout;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) m.nonzeros_ += w.at(kk, j) != 0.0f;

  // The BSR part: blocks holding at least min_block_nonzeros nonzeros.
  std::vector<int32_t> counts;
  int64_t kblocks = 0;
  SparseBlockShape shape;
  int64_t kept = 0;
  auto kept_block = [&](int64_t kk, int64_t j) {
    return layout.block >= 0 && counts[(j / shape.n) * kblocks + kk / shape.k] >=
                                    std::max<int64_t>(1, layout.min_block_nonzeros);
  };
  if (layout.block >= 0) {
    shape = kSparseBlockShapes[layout.block];
    counts = block_counts(w, k, n, shape);
    kblocks = (k + shape.k - 1) / shape.k;
    const int64_t strips = (n + shape.n - 1) / shape.n;
    for (int32_t c : counts) kept += c >= layout.min_block_nonzeros;
    if (kept > 0) {
      SparseMatrix::Bsr& bsr = m.bsr_;
      bsr.block = layout.block;
      bsr.strip_blocks.assign(static_cast<size_t>(strips + 1), 0);
      bsr.block_k.reserve(static_cast<size_t>(kept));
      const int64_t block_floats = shape.n * shape.k;
      bsr.values.reset(allocate_aligned(static_cast<size_t>(kept * block_floats)));
      float* out = bsr.values.get();
      for (int64_t s = 0; s < strips; ++s) {
        for (int64_t q = 0; q < kblocks; ++q) {
          if (counts[s * kblocks + q] < layout.min_block_nonzeros) continue;
          bsr.block_k.push_back(static_cast<int32_t>(q * shape.k));
          for (int64_t kk = 0; kk < shape.k; ++kk)
            for (int64_t j = 0; j < shape.n; ++j) {
              const int64_t row = q * shape.k + kk, col = s * shape.n + j;
              *out++ = row < k && col < n ? w.at(row, col) : 0.0f;
            }
        }
        bsr.strip_blocks[s + 1] = static_cast<int64_t>(bsr.block_k.size());
      }
    }
  }

  // The CSR part: every nonzero outside the kept blocks, by column.
  SparseMatrix::Csr& csr = m.csr_;
  csr.column_begin.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = w.at(kk, j);
      if (v == 0.0f || (kept > 0 && kept_block(kk, j))) continue;
      csr.row_k.push_back(static_cast<int32_t>(kk));
      csr.values.push_back(v);
    }
    csr.column_begin[j + 1] = static_cast<int64_t>(csr.values.size());
  }
  // Without a BSR part the CSR part runs even when empty: it writes the
  // epilogue of zero (an all-zero B still has an output).
  csr.present = !csr.values.empty() || kept == 0;
  return m;
}

void sparse_gemm_tile(const float* a, int64_t lda, const SparseMatrix& b, float* c, int64_t ldc,
                      const GemmTile& tile, const GemmEpilogue& epilogue) {
  if (b.empty()) throw std::invalid_argument("sparse_gemm_tile: B is not packed");
  if (tile.m0 < 0 || tile.n0 < 0 || tile.m1 < tile.m0 || tile.n1 < tile.n0 || tile.n1 > b.n())
    throw std::invalid_argument("sparse_gemm_tile: tile outside the matrices");
  if (epilogue.bias_kind != cpu::GemmBias::kNone && !epilogue.bias)
    throw std::invalid_argument("sparse_gemm_tile: bias kind set without bias");
  if (tile.m1 == tile.m0 || tile.n1 == tile.n0) return;
  const Kernels kernels = kernels_for(b.isa());
  SparseTileRun run{.a = a, .lda = lda, .b = &b, .c = c, .ldc = ldc, .tile = tile};
  const bool has_bsr = b.bsr().block >= 0, has_csr = b.csr().present;
  if (has_bsr && has_csr) {
    // The parts' results are summed (SparTA §3.3): the block part stores
    // the bare product, the fine-grained part adds to it and runs the
    // epilogue.
    const GemmEpilogue bare{.accumulate = epilogue.accumulate};
    run.epilogue = &bare;
    kernels.bsr(run);
    GemmEpilogue rest = epilogue;
    rest.accumulate = true;
    run.epilogue = &rest;
    kernels.csr(run);
    return;
  }
  run.epilogue = &epilogue;
  (has_bsr ? kernels.bsr : kernels.csr)(run);
}

SparseLayoutChoice choose_sparse_layout(const float* b, int64_t k, int64_t n, int64_t ldb,
                                        bool transposed) {
  check_shape("choose_sparse_layout", k, n, ldb, transposed);
  const WeightView w{b, ldb, transposed};
  SparseLayoutChoice choice;
  const double elements = std::max<double>(1.0, static_cast<double>(k) * static_cast<double>(n));
  int64_t nonzeros = 0;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) nonzeros += w.at(kk, j) != 0.0f;
  choice.density = static_cast<double>(nonzeros) / elements;
  const double csr_cost = 1.0 / kCsrDensityCrossover;
  choice.layout = {.block = -1, .min_block_nonzeros = 1};
  choice.relative_cost = static_cast<double>(nonzeros) * csr_cost / elements;
  // For each block shape, the greedy weighted cover (SparTA Algorithm 3,
  // WeightedBlockCover) with two candidate sizes, the block and 1×1: the
  // aligned blocks do not overlap, so the greedy choice is per block — keep
  // it when its nonzeros cost more in CSR than the whole block does in BSR.
  for (int block = 0; block < kSparseBlockShapeCount; ++block) {
    const SparseBlockShape& shape = kSparseBlockShapes[block];
    const double block_cost = static_cast<double>(shape.n * shape.k) / kBsrDensityCrossover[block];
    const auto threshold =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(block_cost / csr_cost)));
    double cost = 0;
    for (int32_t count : block_counts(w, k, n, shape))
      cost += count >= threshold ? block_cost : count * csr_cost;
    cost /= elements;
    if (cost < kLayoutSwitchMargin * choice.relative_cost) {
      choice.relative_cost = cost;
      choice.layout = {.block = block, .min_block_nonzeros = threshold};
    }
  }
  char text[160];
  std::snprintf(text, sizeof text, "B density %s: %s, est. %.2fx the dense time",
                percent(choice.density).c_str(), layout_name(choice.layout).c_str(),
                choice.relative_cost);
  choice.summary = text;
  return choice;
}

}  // namespace tessera::kernels::sparse
