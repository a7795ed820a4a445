#pragma once
// The contract between gemm_tile() and the per-ISA microkernels. Internal to
// kernels/cpu (tests and benchmarks include it to call kernels one by one).
#include <cstdint>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::cpu {

// The epilogue for one MR×NR block, its pointers already offset to the
// block's first row/column.
struct GemmMicrotileEpilogue {
  const float* bias = nullptr;  // bias[j] (kPerColumn) or bias[i] (kPerRow)
  GemmBias bias_kind = GemmBias::kNone;
  GemmActivation activation = GemmActivation::kNone;
  float clip_min = 0.0f, clip_max = 0.0f;
  float leaky_alpha = 0.0f;
  const float* residual = nullptr;  // residual[i·ld_residual + j]
  int64_t ld_residual = 0;
  GemmResidual residual_position = GemmResidual::kBeforeActivation;
};

// C[0:m_valid, n_begin:n_valid] (+)= A[0:m_valid, 0:kc] · Bpanel[0:kc, n_begin:n_valid]:
// the whole MR×NR block is computed, but only rows < m_valid and columns in
// [n_begin, n_valid) are loaded, stored and given the epilogue (partial
// vectors through masked moves: nothing outside is touched). A is read
// either in place (a_k_stride == 1: row i at a + i·a_row_stride; rows ≥
// m_valid read row m_valid − 1 instead, so no read leaves the matrix),
// through a table of k offsets (a_offsets: element (i, k) at a + i·a_row_stride
// + a_offsets[k], rows clamped alike; a_k_stride unused) or packed
// (a_row_stride == 1, a_k_stride == MR).
struct GemmMicrokernelArgs {
  int64_t kc = 0;
  const float* a = nullptr;
  int64_t a_row_stride = 0, a_k_stride = 1;
  const int32_t* a_offsets = nullptr;
  int64_t m_valid = 0;
  int64_t n_begin = 0;       // 0 for a whole block
  int64_t n_valid = 0;       // NR for a whole block
  const float* b = nullptr;  // kc rows of NR floats, 64-byte aligned
  float* c = nullptr;
  int64_t ldc = 0;
  bool load_c = false;                              // C += product, else C = product
  const GemmMicrotileEpilogue* epilogue = nullptr;  // null: store the sum as is
  // Lines of B that the next block of panels will read, fetched into L2
  // spread over the k loop (one every kc / prefetch_lines steps; one or two
  // per step when there are more than kc; null: none). gemm_tile() spreads
  // the next block over the current block's calls.
  const float* prefetch_next = nullptr;
  int64_t prefetch_lines = 0;
  // Whole panels run by this call, each against the same rows of A: panel
  // q reads B at b + q·b_panel_stride, writes C (and reads a per-column
  // bias and the residual) NR columns further than panel q − 1, and
  // prefetches at prefetch_next + q·next_panel_stride while q <
  // prefetch_panels. One call per row block instead of one per block: the
  // call, its saved registers and the row pointers weigh against the FMAs
  // of a short k loop (1×1 convs over 16-64 channels). bench_sgemm, 6x16
  // on AVX2, three alternating rounds, GFLOP/s: 784×192×16 62-64 -> 70-71,
  // 12544×96×16 62-63 -> 66-67, 784×192×32 72.5-73 -> 76-78, 196×384×64
  // 79-81.5 -> 83-84; long-K shapes unchanged within noise.
  int64_t panels = 1;
  int64_t b_panel_stride = 0;
  int64_t prefetch_panels = 1;
  int64_t next_panel_stride = 0;
};

#define TESSERA_GEMM_MICROKERNEL(isa, function, pack_a_function, mr, nr) \
  void function(const GemmMicrokernelArgs& args);                        \
  void pack_a_function(const float* a, int64_t lda, int64_t rows, int64_t kc, float* out);
#include "kernels/cpu/gemm_edge_microkernels.inc"
#include "kernels/cpu/gemm_microkernels.inc"
#undef TESSERA_GEMM_MICROKERNEL

}  // namespace tessera::kernels::cpu
