// Sparse GEMM driver: packing B into BSR parts (one per block shape) + a
// CSR part, the layout choice (SparTA §3.3's weighted block cover,
// block_cover.cpp, under the per-machine costs) and the ISA dispatch. Compiled for the baseline
// ISA; the kernels live in sparse_gemm_<isa>.cpp.
#include "kernels/sparse/sparse_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/sparse/sparse_gemm_kernels.hpp"

namespace tessera::kernels::sparse {
namespace {

// Rows per chunk when several parts run: a multiple of the CSR panel (64
// rows on AVX-512); 128 rows of A and C at K = N = 1024 take 1 MB of the
// 2 MB L2.
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

void check_shape(const char* what, int64_t k, int64_t n, int64_t ldb, bool transposed) {
  if (k < 0 || n < 0 || ldb < (transposed ? k : n))
    throw std::invalid_argument(std::string(what) + ": bad shape or leading dimension");
  if (k >= std::numeric_limits<int32_t>::max())
    throw std::invalid_argument(std::string(what) + ": K must be below 2^31");
}

// Rows of A per CSR panel: csr_tile's MV vectors of the ISA
// (sparse_gemm_kernels.hpp).
int64_t csr_panel_rows(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return kCsrPanelVectorsAvx512 * cpu::gemm_isa_vector_floats(isa);
    case GemmIsa::kAvx2:
      return kCsrPanelVectorsAvx2 * cpu::gemm_isa_vector_floats(isa);
    default:
      return kCsrPanelVectorsSse2 * cpu::gemm_isa_vector_floats(isa);
  }
}

// Rows of K per CSR k-block. The [KB, MB] panel of A^T fills the L1d
// (cache_sizes.hpp), so the vectors each nonzero reads are L1 hits rather
// than L2 lines, and each column's visit to a k-block (which re-reads and
// re-writes MB floats of Y^T, and pays a loop start and exit) covers as many
// nonzeros as the L1d allows. bench_spmm 1024³, AVX2, 32 KiB L1d, three
// alternating rounds: at 90% panels of 16, 21 and 32 KiB took 5.5, 5.6-7.1
// and 4.9-5.1 ms; at 50% a 64 KiB panel ran 1.4x slower than 32 KiB. With
// fewer than ~8 nonzeros per column in a k-block the visits cost more than
// the L2 reads they save, so sparser weights get taller k-blocks, up to all
// of K.
int64_t csr_k_block(int64_t k, int64_t n, int64_t nonzeros, int64_t panel_rows) {
  const int64_t panel_bytes = cpu::cache_sizes().l1d;
  constexpr double kMinNonzerosPerColumnBlock = 8.0;
  int64_t rows = panel_bytes / (panel_rows * static_cast<int64_t>(sizeof(float)));
  if (nonzeros > 0 && n > 0) {
    const double per_row = static_cast<double>(nonzeros) / static_cast<double>(n) /
                           static_cast<double>(std::max<int64_t>(1, k));
    const double wanted = kMinNonzerosPerColumnBlock / per_row;
    if (wanted > static_cast<double>(rows))
      rows = wanted >= static_cast<double>(k) ? k : (static_cast<int64_t>(wanted) + 15) / 16 * 16;
  }
  // Rows within a k-block are 16-bit (SparseMatrix::Csr::rows).
  constexpr int64_t max_rows = SparseMatrix::Csr::kMaxBlockRows;
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

std::string layout_name(const SparseLayout& layout) {
  if (layout.cover) return cover_name(*layout.cover);
  if (layout.block < 0) return "csr";
  return "bsr" + block_shape_name(layout.block) + (layout.min_block_nonzeros > 1 ? "+csr" : "");
}

double csr_density_crossover() {
  return 1.0 / sparse_costs().csr;
}

double bsr_density_crossover(int block) {
  if (block < 0 || block >= kSparseBlockShapeCount)
    throw std::invalid_argument("bsr_density_crossover: no such block shape");
  return 1.0 / sparse_costs().block[block];
}

const SparseMatrix::Bsr& SparseMatrix::bsr() const {
  static const Bsr none;
  return bsr_parts_.empty() ? none : bsr_parts_.front();
}

int64_t SparseMatrix::stored_elements() const {
  int64_t stored = static_cast<int64_t>(csr_.values.size());
  for (const Bsr& part : bsr_parts_) {
    const SparseBlockShape& s = kSparseBlockShapes[part.block];
    stored += part.blocks() * s.n * s.k;
  }
  return stored;
}

namespace {

// The legacy single-part layout as a cover: the blocks of one shape holding
// at least the threshold's nonzeros (every nonzero counted once).
BlockCover threshold_cover(const WeightView& w, int64_t k, int64_t n, const SparseLayout& layout) {
  BlockCover cover;
  cover.k = k;
  cover.n = n;
  if (layout.block < 0) return cover;
  const SparseBlockShape shape = kSparseBlockShapes[layout.block];
  const int64_t kblocks = block_k_blocks(k, layout.block);
  std::vector<int32_t> counts(static_cast<size_t>(block_strips(n, layout.block) * kblocks), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      if (w.at(kk, j) != 0.0f) ++counts[(j / shape.n) * kblocks + kk / shape.k];
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] >= layout.min_block_nonzeros)
      cover.blocks[layout.block].push_back(static_cast<int64_t>(i));
  return cover;
}

}  // namespace

SparseMatrix pack_sparse_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                           const SparseLayout& layout) {
  check_shape("pack_sparse_b", k, n, ldb, transposed);
  if (layout.block >= kSparseBlockShapeCount || layout.min_block_nonzeros < 1)
    throw std::invalid_argument("pack_sparse_b: no such block shape, or a threshold below 1");
  if (layout.cover && (layout.cover->k != k || layout.cover->n != n))
    throw std::invalid_argument("pack_sparse_b: the cover was made for a " +
                                std::to_string(layout.cover->k) + "x" +
                                std::to_string(layout.cover->n) + " weight, not " +
                                std::to_string(k) + "x" + std::to_string(n));
  const WeightView w{b, ldb, transposed};
  SparseMatrix m;
  m.k_ = k;
  m.n_ = n;
  m.isa_ = cpu::gemm_isa();
  m.layout_ = layout;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) m.nonzeros_ += w.at(kk, j) != 0.0f;
  const BlockCover legacy = layout.cover ? BlockCover{} : threshold_cover(w, k, n, layout);
  const BlockCover& cover = layout.cover ? *layout.cover : legacy;

  // Which part owns each element of B ([k][n]): -1 CSR, else a block shape.
  std::vector<int8_t> owner(static_cast<size_t>(k * n), -1);
  bool any_block = false;
  for (int s = 0; s < kSparseBlockShapeCount; ++s) {
    const std::vector<int64_t>& blocks = cover.blocks[s];
    if (blocks.empty()) continue;
    const SparseBlockShape shape = kSparseBlockShapes[s];
    const int64_t kblocks = block_k_blocks(k, s), strips = block_strips(n, s);
    SparseMatrix::Bsr& bsr = m.bsr_parts_.emplace_back();
    bsr.block = s;
    bsr.strip_blocks.assign(static_cast<size_t>(strips + 1), 0);
    bsr.block_k.reserve(blocks.size());
    const int64_t block_floats = shape.n * shape.k;
    bsr.values.reset(allocate_aligned(blocks.size() * static_cast<size_t>(block_floats)));
    float* out = bsr.values.get();
    int64_t previous = -1;
    for (int64_t index : blocks) {
      const int64_t strip = index / std::max<int64_t>(1, kblocks);
      const int64_t q = index % std::max<int64_t>(1, kblocks);
      if (index <= previous || strip >= strips)
        throw std::invalid_argument("pack_sparse_b: cover blocks of " + block_shape_name(s) +
                                    " out of order or outside the weight");
      previous = index;
      bsr.block_k.push_back(static_cast<int32_t>(q * shape.k));
      ++bsr.strip_blocks[strip + 1];
      for (int64_t kk = 0; kk < shape.k; ++kk)
        for (int64_t j = 0; j < shape.n; ++j) {
          const int64_t row = q * shape.k + kk, col = strip * shape.n + j;
          const bool inside = row < k && col < n;
          if (inside) {
            int8_t& o = owner[row * n + col];
            if (o >= 0)
              throw std::invalid_argument("pack_sparse_b: cover blocks of " + block_shape_name(o) +
                                          " and " + block_shape_name(s) + " overlap");
            o = static_cast<int8_t>(s);
          }
          *out++ = inside ? w.at(row, col) : 0.0f;
        }
    }
    for (int64_t st = 0; st < strips; ++st) bsr.strip_blocks[st + 1] += bsr.strip_blocks[st];
    any_block = true;
  }

  // The CSR part: every nonzero outside the blocks, by k-block, then column.
  auto in_csr = [&](int64_t kk, int64_t j) { return owner[kk * n + j] < 0 && w.at(kk, j) != 0.0f; };
  SparseMatrix::Csr& csr = m.csr_;
  int64_t csr_nonzeros = 0;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) csr_nonzeros += in_csr(kk, j);
  csr.panel_rows = csr_panel_rows(m.isa_);
  csr.k_block = csr_k_block(k, n, csr_nonzeros, csr.panel_rows);
  const int64_t k_blocks = csr.k_blocks(k);
  csr.column_begin.assign(static_cast<size_t>(k_blocks * n + 1), 0);
  csr.column_order.resize(static_cast<size_t>(k_blocks * n));
  csr.rows.reserve(static_cast<size_t>(csr_nonzeros));
  csr.values.reserve(static_cast<size_t>(csr_nonzeros));
  std::vector<int64_t> counts_in_block(static_cast<size_t>(n));
  for (int64_t q = 0; q < k_blocks; ++q) {
    const int64_t k0 = q * csr.k_block, k1 = std::min(k, k0 + csr.k_block);
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
        csr.rows.push_back(static_cast<uint16_t>(kk - k0));
        csr.values.push_back(w.at(kk, j));
      }
      csr.column_begin[q * n + i + 1] = static_cast<int64_t>(csr.values.size());
    }
  }
  // Without a BSR part the CSR part runs even when empty: it writes the
  // epilogue of zero (an all-zero B still has an output).
  csr.present = !csr.values.empty() || !any_block;
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
  const std::vector<SparseMatrix::Bsr>& parts = b.bsr_parts();
  const bool has_csr = b.csr().present;
  const size_t part_count = parts.size() + (has_csr ? 1 : 0);
  if (part_count == 1) {
    run.epilogue = &epilogue;
    if (has_csr) {
      kernels.csr(run);
    } else {
      run.bsr = &parts.front();
      kernels.bsr(run);
    }
    return;
  }
  // The parts' results are summed (SparTA §3.3): the first part stores the
  // bare product, the next ones add to it, the last (CSR when present) adds
  // and runs the epilogue. All run per chunk of rows, so the chunk's rows
  // of A and C are still in L2 when the next part reads them again (whole
  // tiles would stream A and C from memory once per part).
  GemmEpilogue first{.accumulate = epilogue.accumulate};
  const GemmEpilogue middle{.accumulate = true};
  GemmEpilogue last = epilogue;
  last.accumulate = true;
  // C written over its own residual (graph/memory_plan.hpp): the first
  // part's bare product would overwrite the residual before the last part
  // reads it. C already holds the residual, so every part adds to it and
  // the last one runs the epilogue without it; that is the same sum where
  // the residual comes before the activation.
  if (epilogue.residual == c && epilogue.ld_residual == ldc) {
    if (epilogue.accumulate || (epilogue.activation != cpu::GemmActivation::kNone &&
                                epilogue.residual_position == cpu::GemmResidual::kAfterActivation))
      throw std::invalid_argument(
          "sparse_gemm_tile: C is its own residual, which a layout of several parts can only "
          "add before the activation and without accumulating");
    first.accumulate = true;
    last.residual = nullptr;
  }
  for (int64_t m = tile.m0; m < tile.m1; m += kPartRowChunk) {
    run.tile.m0 = m;
    run.tile.m1 = std::min(tile.m1, m + kPartRowChunk);
    for (size_t p = 0; p < part_count; ++p) {
      run.epilogue = p == 0 ? &first : p + 1 == part_count ? &last : &middle;
      if (p < parts.size()) {
        run.bsr = &parts[p];
        kernels.bsr(run);
      } else {
        kernels.csr(run);
      }
    }
  }
}

SparseLayoutChoice choose_sparse_layout(const float* b, int64_t k, int64_t n, int64_t ldb,
                                        bool transposed) {
  check_shape("choose_sparse_layout", k, n, ldb, transposed);
  const SparseCosts& costs = sparse_costs();
  auto cover = std::make_shared<BlockCover>(weighted_block_cover(b, k, n, ldb, transposed, costs));
  SparseLayoutChoice choice;
  const double elements = std::max<double>(1.0, static_cast<double>(k) * static_cast<double>(n));
  choice.density = static_cast<double>(cover->nonzeros) / elements;
  choice.relative_cost = cover->relative_cost;
  // block names the part with the most nonzeros (informational: the cover
  // decides what is packed).
  int64_t most = cover->csr_nonzeros;
  for (int s = 0; s < kSparseBlockShapeCount; ++s)
    if (!cover->blocks[s].empty() && cover->block_nonzeros[s] >= most) {
      most = cover->block_nonzeros[s];
      choice.layout.block = s;
    }
  choice.layout.min_block_nonzeros = cover->csr_nonzeros > 0 && choice.layout.block >= 0 ? 2 : 1;
  char text[96];
  std::snprintf(text, sizeof text, ", est. %.2fx the dense time (costs: ", choice.relative_cost);
  choice.summary = "B density " + percent(choice.density) + ": " + cover_parts_summary(*cover) +
                   text + costs.source + ")";
  choice.layout.cover = std::move(cover);
  return choice;
}

}  // namespace tessera::kernels::sparse
