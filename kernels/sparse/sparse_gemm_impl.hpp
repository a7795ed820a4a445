#pragma once
// The sparse GEMM kernels, written once over xsimd batches and instantiated
// per ISA by sparse_gemm_<isa>.cpp, each compiled with its own target flags.
// Include it from nowhere else: everything is in an anonymous namespace so
// no function compiled for AVX-512 can be picked by the linker for a caller
// on a baseline CPU (the same rule as kernels/cpu/gemm_microkernel_impl.hpp).
#include <xsimd/xsimd.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_fma.hpp"
#include "kernels/cpu/simd_lanes.hpp"
#include "kernels/cpu/transpose_block_impl.hpp"
#include "kernels/sparse/csr_dot_impl.hpp"
#include "kernels/sparse/finish_row_impl.hpp"
#include "kernels/sparse/sparse_gemm_kernels.hpp"

namespace tessera::kernels::sparse {
namespace {

using cpu::GemmActivation;

// The batch a BN-wide block is computed with: the ISA's own when BN fills
// it, else a narrower one of the same CPU (4×1 blocks use 4 lanes). Only
// the specialisations a TU instantiates are ever named.
template <class Arch, int BN>
struct BlockLanes {
  using type = Arch;
};

// Rows of A per register block for a BN-wide block: MR·BN/W accumulators
// plus BN/W B vectors and a broadcast fit the ISA's vector registers (32×32
// blocks on AVX-512: 14 rows × 2 vectors, the dense kernel's 14×32).
template <class Batch, int BN>
constexpr int bsr_rows() {
  constexpr int registers = Batch::size >= 16 ? 32 : 16;
  constexpr int vectors = BN / static_cast<int>(Batch::size);
  return std::clamp((registers - vectors - 1) / vectors, 2, 16);
}

// Rows of A packed at a time: MR-row panels of [K][MR] floats (the dense
// microkernel's packed A). A chunk of 128 rows × K = 1024 is 512 KB, in L2
// while the strips of B pass over it.
constexpr int64_t kBsrRowChunk = 128;

// Per-thread scratch of the BSR kernel, grown, never shrunk.
struct BsrScratch {
  std::vector<float> a_panels;
};

// 64-byte aligned per-thread scratch (a vector's own 16-byte alignment
// would split every 64-byte load of the CSR panel across two cache lines).
using cpu::grown;

// Vectors of a BN-wide strip that one register block holds: all of them,
// but for 32-wide blocks on AVX2 (4 vectors, 16 registers), where a whole
// strip leaves room for 2 rows (8 sums, 4 B loads and 2 broadcasts per 8
// FMAs); halves of 2 vectors take 6 rows, the dense 6x16 kernel's shape,
// each half a pass over the strip's blocks.
template <class Batch, int BN>
constexpr int bsr_block_vectors() {
  constexpr int vectors = BN / static_cast<int>(Batch::size);
  return Batch::size == 8 && vectors == 4 ? 2 : vectors;
}

// One BSR part of b over the tile. For each chunk of rows, A is packed into
// MR-row panels; for each strip of BN columns, each panel: the strip's
// blocks (ascending k, one index per block) are FMA'd into MR×(SV vectors)
// accumulators held across all of the strip's blocks, each A value a
// broadcast from the contiguous panel (no 4 KB-strided rows competing for
// L1 sets), a pass per SV vectors of the strip, then the rows are finished.
template <class Arch, int BN, int BK>
void bsr_tile(const SparseTileRun& run) {
  using Batch = xsimd::batch<float, typename BlockLanes<Arch, BN>::type>;
  constexpr int W = static_cast<int>(Batch::size);
  static_assert(BN % W == 0, "a block is a whole number of vectors");
  constexpr int NV = BN / W;
  constexpr int SV = bsr_block_vectors<Batch, BN>();
  static_assert(NV % SV == 0, "a strip is a whole number of register blocks");
  constexpr int MR = bsr_rows<Batch, SV * W>();
  const SparseMatrix::Bsr& bsr = *run.bsr;
  const int64_t k_total = run.b->k();
  const GemmTile& t = run.tile;
  const float* values = bsr.values.get();
  constexpr int64_t kChunk = (kBsrRowChunk + MR - 1) / MR * MR;
  thread_local BsrScratch scratch;
  const int64_t panel_floats = std::max<int64_t>(1, k_total) * MR;
  float* a_panels = grown(scratch.a_panels, (kChunk / MR) * panel_floats);
  alignas(64) float tmp[MR][BN];
  // An epilogue of the bare sum, or of C plus it: the BSR part that writes
  // first, or a middle one, of several (sparse_gemm_tile).
  const GemmEpilogue& ep = *run.epilogue;
  const bool plain = ep.bias_kind == cpu::GemmBias::kNone && !ep.residual &&
                     ep.activation == cpu::GemmActivation::kNone;
  const bool accumulate = ep.accumulate;
  for (int64_t mc = t.m0; mc < t.m1; mc += kChunk) {
    const int64_t mc_end = std::min(t.m1, mc + kChunk);
    for (int64_t m = mc; m < mc_end; m += MR) {
      const int64_t rows = std::min<int64_t>(MR, mc_end - m);
      float* panel = a_panels + ((m - mc) / MR) * panel_floats;
      // Rows past the tile are zero (their sums are dropped).
      if (rows < MR) std::fill(panel, panel + panel_floats, 0.0f);
      cpu::transpose_block<Arch>(run.a + m * run.lda, run.lda, rows, k_total, panel, MR);
    }
    for (int64_t s = t.n0 / BN; s * BN < t.n1; ++s) {
      const int64_t col0 = s * BN;
      const int64_t lo = std::max(t.n0, col0), hi = std::min(t.n1, col0 + BN);
      const int64_t b_begin = bsr.strip_blocks[s], b_end = bsr.strip_blocks[s + 1];
      // The sums go straight to C (added to it when accumulating) where
      // there is no bias, residual or activation to apply and the whole
      // strip is in the tile. Through tmp and finish_row, a call per row and
      // strip, it cost 0.16-0.23 ms of bench_spmm's 32x32-block cases (1.2
      // ms at 90%).
      const bool straight = plain && lo == col0 && hi == col0 + BN;
      for (int64_t m = mc; m < mc_end; m += MR) {
        const int64_t rows = std::min<int64_t>(MR, mc_end - m);
        const float* panel = a_panels + ((m - mc) / MR) * panel_floats;
        // C is written only after the blocks: fetch its lines now, as the
        // dense microkernel does (rows 4·ldc bytes apart are in no cache).
        for (int64_t i = 0; i < rows; ++i) {
          float* c_row = run.c + (m + i) * run.ldc;
          for (int64_t j = lo; j < hi; j += 16) __builtin_prefetch(c_row + j, 1);
          __builtin_prefetch(c_row + hi - 1, 1);
        }
        for (int h = 0; h < NV; h += SV) {
          Batch acc[MR][SV];
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < SV; ++v) acc[i][v] = Batch(0.0f);
          // One k step: SV vectors of the block, MR broadcasts from the panel.
          auto step = [&](const float* bk, const float* ak) {
            Batch bv[SV];
#pragma GCC unroll 4
            for (int v = 0; v < SV; ++v) bv[v] = Batch::load_aligned(bk + v * W);
#pragma GCC unroll 16
            for (int i = 0; i < MR; ++i) {
              const Batch ai(ak[i]);
#pragma GCC unroll 4
              for (int v = 0; v < SV; ++v) acc[i][v] = cpu::fused_madd(ai, bv[v], acc[i][v]);
            }
          };
          for (int64_t blk = b_begin; blk < b_end; ++blk) {
            const int64_t k0 = bsr.block_k[blk];
            const float* block = values + blk * (BK * BN) + h * W;
            const float* ak = panel + k0 * MR;
            if (k0 + BK <= k_total) {
#pragma GCC unroll 32
              for (int kk = 0; kk < BK; ++kk) step(block + kk * BN, ak + kk * MR);
            } else {
              for (int64_t kk = 0; kk < k_total - k0; ++kk) step(block + kk * BN, ak + kk * MR);
            }
          }
          if (straight) {
#pragma GCC unroll 16
            for (int i = 0; i < MR; ++i) {
              if (i >= rows) break;
              float* c_row = run.c + (m + i) * run.ldc + col0 + h * W;
#pragma GCC unroll 4
              for (int v = 0; v < SV; ++v) {
                Batch x = acc[i][v];
                if (accumulate) x += Batch::load_unaligned(c_row + v * W);
                x.store_unaligned(c_row + v * W);
              }
            }
            continue;
          }
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < SV; ++v) acc[i][v].store_aligned(&tmp[i][(h + v) * W]);
        }
        if (straight) continue;
        for (int64_t i = 0; i < rows; ++i)
          finish_row<typename BlockLanes<Arch, BN>::type>(&tmp[i][lo - col0],
                                                          run.c + (m + i) * run.ldc + lo, hi - lo,
                                                          m + i, lo, *run.epilogue);
      }
    }
  }
}

template <class Arch>
void bsr_tile_any(const SparseTileRun& run) {
  switch (run.bsr->block) {
    case 0:
      return bsr_tile<Arch, 4, 1>(run);
    case 1:
      return bsr_tile<Arch, 8, 1>(run);
    case 2:
      return bsr_tile<Arch, 16, 1>(run);
    case 3:
      return bsr_tile<Arch, 32, 32>(run);
    default:
      return;
  }
}

// Per-thread scratch of the CSR kernel, grown, never shrunk.
struct CsrScratch {
  std::vector<float> panel;  // A^T of one k-block: KB rows of MB floats
  std::vector<float> yt;     // Y^T: tile columns × MB
  std::vector<float> y;      // Y: MB rows × kCsrColumnChunk columns
};

constexpr int64_t kCsrColumnChunk = 64;

// Y^T[n] for the tile's columns n over one k-block of the panel: for each
// column, its nonzeros (offset, w) each add w · panel row into UV vectors
// of sums (one index load and one broadcast per UV FMAs). The panel's rows
// are MB = MV·W floats apart whatever UV: a panel of fewer rows than MB
// (the tile's last, or a small tile's only one) loads and FMAs only the
// UV = ceil(rows / W) vectors that hold rows, instead of paying MV vectors
// for them (with 4 tiles of 7×7 outputs, 7–14 rows each on AVX-512, 4
// vectors did 4.5× the useful FMAs and 2 threads ran the last stage no
// faster than 1). NC sets of sums rotate between nonzeros so consecutive
// FMAs do not wait on each other: NC·UV >= 8 FMAs in a row with no two on
// the same sum cover FMA latency (4) × ports (2); 4 sets of 4 vectors
// measured no faster on AVX-512 and do not fit AVX2's registers.
template <class Batch, int MB, int UV>
inline void csr_columns(const float* panel, const int64_t* col_begin, const int32_t* order,
                        const uint16_t* rows, const float* w, int64_t q, const GemmTile& t,
                        int64_t n_total, float* yt) {
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int NC = csr_sum_sets<Batch>(UV);
  // The column groups the tile overlaps; a group's columns are listed in
  // nonzero-count order, those outside the tile skipped.
  constexpr int64_t G = SparseMatrix::Csr::kColumnGroup;
  const int64_t i_end = std::min(n_total, (t.n1 + G - 1) / G * G);
  for (int64_t i = t.n0 / G * G; i < i_end; ++i) {
    const int64_t n = order[i];
    if (n < t.n0 || n >= t.n1) continue;
    int64_t p = col_begin[i];
    const int64_t e = col_begin[i + 1];
    float* out = yt + (n - t.n0) * MB;
    // Y^T of the column after next (listed in count order, so at no
    // stride a hardware prefetcher sees): an L2 hit that would otherwise
    // delay the column's first FMAs.
    if (q > 0 && i + 2 < i_end) {
      const int64_t ahead = std::clamp<int64_t>(order[i + 2], t.n0, t.n1 - 1) - t.n0;
#pragma GCC unroll 8
      for (int l = 0; l < UV * W; l += 16) __builtin_prefetch(yt + ahead * MB + l, 1);
    }
    if (q > 0 && p == e) continue;
    csr_dot<Batch, UV, NC, MB>(panel, rows, w, p, e, q > 0, out);
  }
}

// csr_columns with UV = vectors (1 <= vectors <= MV), a compile-time count.
template <class Batch, int MB, int UV>
inline void csr_columns_of(int vectors, const float* panel, const int64_t* col_begin,
                           const int32_t* order, const uint16_t* rows, const float* w, int64_t q,
                           const GemmTile& t, int64_t n_total, float* yt) {
  if constexpr (UV > 1)
    if (vectors < UV)
      return csr_columns_of<Batch, MB, UV - 1>(vectors, panel, col_begin, order, rows, w, q, t,
                                               n_total, yt);
  csr_columns<Batch, MB, UV>(panel, col_begin, order, rows, w, q, t, n_total, yt);
}

// The CSR part of b over the tile, lanes along M: for each MB = MV·W rows
// and each k-block, A^T is packed into a [KB, MB] panel (L1); each column's
// nonzeros in the k-block FMA panel rows into Y^T[n] (csr_columns: 2 load
// ports, 2 FMA ports). Then Y^T goes back to rows and the epilogue runs.
template <class Arch, int MV>
void csr_tile(const SparseTileRun& run) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int MB = MV * W;
  const SparseMatrix::Csr& csr = run.b->csr();
  // sparse_gemm_tile() runs the kernels of the ISA b was packed for.
  if (csr.panel_rows != MB) throw std::logic_error("sparse csr_tile: B packed for another ISA");
  const int64_t k_total = run.b->k(), n_total = run.b->n();
  const int64_t kb_rows = csr.k_block, k_blocks = csr.k_blocks(k_total);
  const GemmTile& t = run.tile;
  const int64_t cols = t.n1 - t.n0;
  thread_local CsrScratch scratch;
  float* panel = grown(scratch.panel, std::max<int64_t>(1, std::min(kb_rows, k_total)) * MB);
  float* yt = grown(scratch.yt, cols * MB);
  float* y = grown(scratch.y, kCsrColumnChunk * MB);
  const int64_t* begin = csr.column_begin.data();
  const uint16_t* block_rows = csr.rows.data();
  const float* w = csr.values.data();
  for (int64_t m = t.m0; m < t.m1; m += MB) {
    const int64_t rows = std::min<int64_t>(MB, t.m1 - m);
    const int vectors = static_cast<int>((rows + W - 1) / W);
    for (int64_t q = 0; q < k_blocks; ++q) {
      const int64_t k0 = q * kb_rows, k1 = std::min(k_total, k0 + kb_rows);
      // Lanes past the tile's rows (within the UV vectors read) hold stale
      // finite values or zeros; their sums are dropped.
      cpu::transpose_block<Arch>(run.a + m * run.lda + k0, run.lda, rows, k1 - k0, panel, MB);
      csr_columns_of<Batch, MB, MV>(vectors, panel, begin + q * n_total,
                                    csr.column_order.data() + q * n_total, block_rows, w, q, t,
                                    n_total, yt);
    }
    // Y^T back to rows kCsrColumnChunk columns at a time, through a 16 KB
    // buffer that stays in L1: transposing all columns at once writes rows
    // 4·cols bytes apart, a power of two for the usual N, so every row of
    // the [MB, cols] block falls into the same L1 set and each store misses.
    for (int64_t j = 0; j < cols; j += kCsrColumnChunk) {
      const int64_t chunk = std::min(kCsrColumnChunk, cols - j);
      cpu::transpose_block<Arch>(yt + j * MB, MB, chunk, rows, y, chunk);
      for (int64_t i = 0; i < rows; ++i)
        finish_row<Arch>(y + i * chunk, run.c + (m + i) * run.ldc + t.n0 + j, chunk, m + i,
                         t.n0 + j, *run.epilogue);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::sparse
