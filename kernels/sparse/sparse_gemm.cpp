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

// The density crossovers, measured with `bench_spmm --crossover --min`
// (1024³, one thread, AVX-512 Xeon shared with other jobs, fastest of 7,
// against Tessera's dense SGEMM in the same run: 18.5 ms): the fraction of
// B a format may store (elements it multiplies / K·N) before it is slower
// than the dense SGEMM. Their inverses are the formats' costs per stored
// element relative to dense, which is all the layout choice needs.
//  - CSR (64-row panels, L1 k-blocks): 8.7 ms at 30%, 15.4 ms at 50%,
//    19.0 ms at 60% ⇒ breaks even near 58%.
constexpr double kCsrDensityCrossover = 0.58;
//  - BSR, from block densities 30–90%: 4×1 (4 lanes: a quarter of the
//    FMA width) 41.2 ms at 30% ⇒ ~13%; 8×1 (8 lanes) 16.0 ms at 30%, 23.3
//    at 50% ⇒ ~37%; 16×1 12.2 ms at 50%, 23.0 at 70% ⇒ ~60%; 32×32 6.6 ms
//    at 30%, 16.0 at 90% (0.85× dense per stored element plus ~1.8 ms of A
//    packing and C writes) ⇒ ~95%.
constexpr double kBsrDensityCrossover[kSparseBlockShapeCount] = {0.13, 0.37, 0.60, 0.95};
// A layout replaces the best so far only when it is estimated at least 10%
// faster: a block part next to a CSR part costs a second pass over Y that
// the per-element costs do not see.
constexpr double kLayoutSwitchMargin = 0.9;

// Rows per chunk when a BSR and a CSR part both run: a multiple of the CSR
// panel (64 rows on AVX-512); 128 rows of A and C at K = N = 1024 take
// 1 MB of the 2 MB L2.
constexpr int64_t kPartRowChunk = 128;

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

// Rows of A per CSR panel: 4 vectors of the ISA (csr_tile's MV), so one
// broadcast of w and one index load feed 4 FMAs.
int64_t csr_panel_rows(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return 64;
    case GemmIsa::kAvx2:
      return 32;
    case GemmIsa::kPortable:
      break;
  }
  return 16;
}

// Rows of K per CSR k-block. The [KB, MB] panel of A^T takes 32 KB, 2/3 of
// the 48 KB L1, so the 4 vectors each nonzero reads are L1 hits rather
// than 4 L2 lines. Each k-block re-reads and re-writes Y^T (MB floats per
// column): with fewer than ~8 nonzeros per column in a k-block that costs
// more than the L2 reads it saves, so sparser weights get taller k-blocks,
// up to all of K. bench_spmm (1024³, 90% sparse) measured 16, 32 and 64 KB
// panels alike within the noise of a shared machine.
int64_t csr_k_block(int64_t k, int64_t n, int64_t nonzeros, int64_t panel_rows) {
  constexpr int64_t kPanelBytes = 32 * 1024;
  constexpr double kMinNonzerosPerColumnBlock = 8.0;
  int64_t rows = kPanelBytes / (panel_rows * static_cast<int64_t>(sizeof(float)));
  if (nonzeros > 0 && n > 0) {
    const double per_row = static_cast<double>(nonzeros) / static_cast<double>(n) /
                           static_cast<double>(std::max<int64_t>(1, k));
    const double wanted = kMinNonzerosPerColumnBlock / per_row;
    if (wanted > static_cast<double>(rows))
      rows = wanted >= static_cast<double>(k) ? k : (static_cast<int64_t>(wanted) + 15) / 16 * 16;
  }
  // Offsets within a k-block are int32.
  const int64_t max_rows = std::numeric_limits<int32_t>::max() / panel_rows;
  return std::clamp<int64_t>(rows, 1, std::clamp<int64_t>(k, 1, max_rows));
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

  // The CSR part: every nonzero outside the kept blocks, by k-block, then
  // column.
  SparseMatrix::Csr& csr = m.csr_;
  int64_t csr_nonzeros = 0;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      csr_nonzeros += w.at(kk, j) != 0.0f && !(kept > 0 && kept_block(kk, j));
  csr.panel_rows = csr_panel_rows(m.isa_);
  csr.k_block = csr_k_block(k, n, csr_nonzeros, csr.panel_rows);
  const int64_t k_blocks = csr.k_blocks(k);
  csr.column_begin.assign(static_cast<size_t>(k_blocks * n + 1), 0);
  csr.column_order.resize(static_cast<size_t>(k_blocks * n));
  csr.offsets.reserve(static_cast<size_t>(csr_nonzeros));
  csr.values.reserve(static_cast<size_t>(csr_nonzeros));
  std::vector<int64_t> counts_in_block(static_cast<size_t>(n));
  for (int64_t q = 0; q < k_blocks; ++q) {
    const int64_t k0 = q * csr.k_block, k1 = std::min(k, k0 + csr.k_block);
    auto in_csr = [&](int64_t kk, int64_t j) {
      return w.at(kk, j) != 0.0f && !(kept > 0 && kept_block(kk, j));
    };
    for (int64_t j = 0; j < n; ++j) {
      counts_in_block[j] = 0;
      for (int64_t kk = k0; kk < k1; ++kk) counts_in_block[j] += in_csr(kk, j);
    }
    int32_t* order = csr.column_order.data() + q * n;
    for (int64_t j = 0; j < n; ++j) order[j] = static_cast<int32_t>(j);
    for (int64_t g = 0; g < n; g += SparseMatrix::Csr::kColumnGroup)
      std::stable_sort(
          order + g, order + std::min(n, g + SparseMatrix::Csr::kColumnGroup),
          [&](int32_t x, int32_t y) { return counts_in_block[x] < counts_in_block[y]; });
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = order[i];
      for (int64_t kk = k0; kk < k1; ++kk) {
        if (!in_csr(kk, j)) continue;
        csr.offsets.push_back(static_cast<int32_t>((kk - k0) * csr.panel_rows));
        csr.values.push_back(w.at(kk, j));
      }
      csr.column_begin[q * n + i + 1] = static_cast<int64_t>(csr.values.size());
    }
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
    // epilogue. Both run per chunk of rows, so the chunk's rows of A and C
    // are still in L2 when the second part reads them again (whole tiles
    // would stream A and C from memory twice).
    const GemmEpilogue bare{.accumulate = epilogue.accumulate};
    GemmEpilogue rest = epilogue;
    rest.accumulate = true;
    for (int64_t m = tile.m0; m < tile.m1; m += kPartRowChunk) {
      run.tile.m0 = m;
      run.tile.m1 = std::min(tile.m1, m + kPartRowChunk);
      run.epilogue = &bare;
      kernels.bsr(run);
      run.epilogue = &rest;
      kernels.csr(run);
    }
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
