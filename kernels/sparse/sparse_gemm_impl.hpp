#pragma once
// The sparse GEMM kernels, written once over xsimd batches and instantiated
// per ISA by sparse_gemm_<isa>.cpp, each compiled with its own target flags.
// Include it from nowhere else: everything is in an anonymous namespace so
// no function compiled for AVX-512 can be picked by the linker for a caller
// on a baseline CPU (the same rule as kernels/cpu/gemm_microkernel_impl.hpp).
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_fma.hpp"
#include "kernels/sparse/sparse_gemm_kernels.hpp"

namespace tessera::kernels::sparse {
namespace {

using cpu::GemmActivation;
using cpu::GemmBias;
using cpu::GemmResidual;

// dst[j] = epilogue((accumulate ? dst[j] : 0) + src[j]) for j < count: row m
// of C, columns n .. n + count.
template <class Arch>
inline void finish_row(const float* src, float* dst, int64_t count, int64_t m, int64_t n,
                       const GemmEpilogue& ep) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int64_t W = Batch::size;
  const bool before = ep.residual_position == GemmResidual::kBeforeActivation;
  const float* residual = ep.residual ? ep.residual + m * ep.ld_residual + n : nullptr;
  int64_t j = 0;
  for (; j + W <= count; j += W) {
    Batch x = Batch::load_unaligned(src + j);
    if (ep.accumulate) x += Batch::load_unaligned(dst + j);
    if (ep.bias_kind == GemmBias::kPerColumn) x += Batch::load_unaligned(ep.bias + n + j);
    if (ep.bias_kind == GemmBias::kPerRow) x += Batch(ep.bias[m]);
    if (residual && before) x += Batch::load_unaligned(residual + j);
    x = cpu::activation_approx(ep.activation, x, ep.clip_min, ep.clip_max);
    if (residual && !before) x += Batch::load_unaligned(residual + j);
    x.store_unaligned(dst + j);
  }
  for (; j < count; ++j)
    dst[j] = cpu::apply_epilogue_scalar((ep.accumulate ? dst[j] : 0.0f) + src[j], ep, m, n + j);
}

// The batch a BN-wide block is computed with: the ISA's own when BN fills
// it, else a narrower one of the same CPU (4×1 blocks use 4 lanes). Only
// the specialisations a TU instantiates are ever named.
template <class Arch, int BN>
struct BlockLanes {
  using type = Arch;
};

// Rows of A per register block for a BN-wide block: MR·BN/W accumulators
// plus BN/W B vectors and a broadcast fit the ISA's vector registers (at
// least 2 rows: SSE2's 32-wide blocks spill rather than reload B per row).
template <class Batch, int BN>
constexpr int bsr_rows() {
  constexpr int registers = Batch::size >= 16 ? 32 : 16;
  constexpr int vectors = BN / static_cast<int>(Batch::size);
  return std::clamp((registers - 2) / (vectors + 1), 2, 16);
}

// Rows of A kept in L2 while the strips of B pass over them.
constexpr int64_t kBsrRowChunk = 128;

// The BSR part of b over the tile. For each chunk of rows, each strip of
// BN columns, each MR rows: the strip's blocks (ascending k, one index per
// block) are FMA'd into MR×BN accumulators, then the rows are finished.
template <class Arch, int BN, int BK>
void bsr_tile(const SparseTileRun& run) {
  using Batch = xsimd::batch<float, typename BlockLanes<Arch, BN>::type>;
  constexpr int W = static_cast<int>(Batch::size);
  static_assert(BN % W == 0, "a block is a whole number of vectors");
  constexpr int NV = BN / W;
  constexpr int MR = bsr_rows<Batch, BN>();
  const SparseMatrix::Bsr& bsr = run.b->bsr();
  const int64_t k_total = run.b->k();
  const GemmTile& t = run.tile;
  const float* values = bsr.values.get();
  alignas(64) float tmp[MR][BN];
  for (int64_t mc = t.m0; mc < t.m1; mc += kBsrRowChunk) {
    const int64_t mc_end = std::min(t.m1, mc + kBsrRowChunk);
    for (int64_t s = t.n0 / BN; s * BN < t.n1; ++s) {
      const int64_t col0 = s * BN;
      const int64_t lo = std::max(t.n0, col0), hi = std::min(t.n1, col0 + BN);
      const int64_t b_begin = bsr.strip_blocks[s], b_end = bsr.strip_blocks[s + 1];
      for (int64_t m = mc; m < mc_end; m += MR) {
        const int64_t rows = std::min<int64_t>(MR, mc_end - m);
        // Rows past the tile read the last valid row; their sums are dropped.
        const float* a_rows[MR];
        for (int i = 0; i < MR; ++i)
          a_rows[i] = run.a + (m + std::min<int64_t>(i, rows - 1)) * run.lda;
        Batch acc[MR][NV];
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = Batch(0.0f);
        auto step = [&](const float* bk, int64_t k) {
          Batch bv[NV];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) bv[v] = Batch::load_aligned(bk + v * W);
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i) {
            const Batch ai(a_rows[i][k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = cpu::fused_madd(ai, bv[v], acc[i][v]);
          }
        };
        for (int64_t blk = b_begin; blk < b_end; ++blk) {
          const int64_t k0 = bsr.block_k[blk];
          const float* block = values + blk * (BK * BN);
          if (k0 + BK <= k_total) {
#pragma GCC unroll 32
            for (int kk = 0; kk < BK; ++kk) step(block + kk * BN, k0 + kk);
          } else {
            for (int64_t kk = 0; kk < k_total - k0; ++kk) step(block + kk * BN, k0 + kk);
          }
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(&tmp[i][v * W]);
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
  switch (run.b->bsr().block) {
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
  std::vector<float> panel;  // A^T: K rows of MB floats
  std::vector<float> yt;     // Y^T: tile columns × MB
  std::vector<float> y;      // Y: MB rows × tile columns
};

inline float* grown(std::vector<float>& v, int64_t floats) {
  if (static_cast<int64_t>(v.size()) < floats) v.resize(static_cast<size_t>(floats));
  return v.data();
}

// The CSR part of b over the tile, lanes along M: for each MB rows, A^T is
// packed into a [K, MB] panel; for each column n, its nonzeros (k, w) each
// add w · panel[k] into MB sums of Y^T[n] (four independent sums, so
// consecutive FMAs do not wait on each other), then Y^T goes back to rows.
template <class Arch, int MV>
void csr_tile(const SparseTileRun& run) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  constexpr int MB = MV * W;
  constexpr int kChains = 4;
  const SparseMatrix::Csr& csr = run.b->csr();
  const int64_t k_total = run.b->k();
  const GemmTile& t = run.tile;
  const int64_t cols = t.n1 - t.n0;
  thread_local CsrScratch scratch;
  float* panel = grown(scratch.panel, std::max<int64_t>(1, k_total) * MB);
  float* yt = grown(scratch.yt, cols * MB);
  float* y = grown(scratch.y, cols * MB);
  const int64_t* begin = csr.column_begin.data();
  const int32_t* row_k = csr.row_k.data();
  const float* w = csr.values.data();
  for (int64_t m = t.m0; m < t.m1; m += MB) {
    const int64_t rows = std::min<int64_t>(MB, t.m1 - m);
    // Rows past the tile are zero in the panel (their sums are dropped).
    if (rows < MB) std::fill(panel, panel + k_total * MB, 0.0f);
    cpu::transpose_panel(run.a + m * run.lda, run.lda, rows, k_total, panel, MB);
    for (int64_t n = t.n0; n < t.n1; ++n) {
      Batch acc[kChains][MV];
#pragma GCC unroll 4
      for (int c = 0; c < kChains; ++c)
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) acc[c][v] = Batch(0.0f);
      int64_t p = begin[n];
      const int64_t e = begin[n + 1];
      for (; p + kChains <= e; p += kChains) {
#pragma GCC unroll 4
        for (int c = 0; c < kChains; ++c) {
          const Batch wv(w[p + c]);
          const float* x = panel + static_cast<int64_t>(row_k[p + c]) * MB;
#pragma GCC unroll 4
          for (int v = 0; v < MV; ++v)
            acc[c][v] = cpu::fused_madd(wv, Batch::load_unaligned(x + v * W), acc[c][v]);
        }
      }
      for (; p < e; ++p) {
        const Batch wv(w[p]);
        const float* x = panel + static_cast<int64_t>(row_k[p]) * MB;
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v)
          acc[0][v] = cpu::fused_madd(wv, Batch::load_unaligned(x + v * W), acc[0][v]);
      }
      float* out = yt + (n - t.n0) * MB;
#pragma GCC unroll 4
      for (int v = 0; v < MV; ++v)
        ((acc[0][v] + acc[1][v]) + (acc[2][v] + acc[3][v])).store_unaligned(out + v * W);
    }
    cpu::transpose_panel(yt, MB, cols, rows, y, cols);
    for (int64_t i = 0; i < rows; ++i)
      finish_row<Arch>(y + i * cols, run.c + (m + i) * run.ldc + t.n0, cols, m + i, t.n0,
                       *run.epilogue);
  }
}

}  // namespace
}  // namespace tessera::kernels::sparse
