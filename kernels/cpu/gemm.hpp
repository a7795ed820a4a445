#pragma once
// Tile-level SGEMM for the CPU: one call computes exactly one output tile
//
//   C[m0:m1, n0:n1] (+)= A[m0:m1, :K] · B[:K, n0:n1], then the epilogue,
//
// so the tiler's tiles map straight onto it. B (the weights) is packed once
// with pack_b() into NR-wide column panels, K-contiguous, 64-byte aligned:
// the layout the register-blocked microkernel reads. A (the activations) is
// row-major with a leading dimension; it is read in place, or copied into a
// per-thread scratch micro-panel when the tile is wide enough for that to
// pay. The epilogue (bias, activation, residual) runs while the tile is
// still in registers.
//
// The microkernel (AVX-512, AVX2 or portable SSE2) is chosen once, at
// start-up, from the CPU's features; set_gemm_isa() forces another one (tests
// use it to run every path on one machine). A PackedMatrix remembers the
// microkernel it was packed for, and gemm_tile() always runs that one.
//
// Usage:
//   PackedMatrix w = pack_b(weights, K, N, /*ldb=*/N, /*transposed=*/false);
//   GemmEpilogue ep{.bias = bias, .bias_kind = GemmBias::kPerColumn,
//                   .activation = GemmActivation::kRelu};
//   gemm_tile(x, /*lda=*/K, w, y, /*ldc=*/N, {.m0 = 0, .m1 = M, .n0 = 0, .n1 = N}, ep);
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "kernels/activation.hpp"

namespace tessera::kernels::cpu {

enum class GemmIsa { kPortable, kAvx2, kAvx512 };

struct GemmMicrokernelArgs;
using GemmMicrokernelFn = void (*)(const GemmMicrokernelArgs&);
// Packs rows [0, rows) of A (rows ≤ MR, row i at a + i·lda, kc floats each)
// into one micro-panel of kc groups of MR scalars, rows ≥ `rows` zero.
using GemmPackAFn = void (*)(const float* a, int64_t lda, int64_t rows, int64_t kc, float* out);

// One entry of kernels/cpu/gemm_microkernels.inc.
struct GemmMicrokernel {
  GemmIsa isa;
  std::string_view name;  // e.g. "gemm_12x32__avx512"
  int mr;                 // rows of C per call (broadcast from A)
  int nr;                 // columns of C per call (vectors of B)
  GemmMicrokernelFn fn;
  GemmPackAFn pack_a;  // the same ISA's A packer for this MR
};

// Every microkernel built into the library, in manifest order (including
// those the CPU cannot run: check gemm_isa_supported()).
std::span<const GemmMicrokernel> gemm_microkernels();
// The edge microkernels (kernels/cpu/gemm_edge_microkernels.inc): fewer
// rows, the same packed B as a main kernel of their ISA and NR.
std::span<const GemmMicrokernel> gemm_edge_microkernels();
// The kernel for the last `rows` rows of a tile whose B is packed for
// `kernel`, rows < kernel.mr: the edge kernel of its ISA and NR with the
// fewest rows >= `rows`, or `kernel` itself where none has fewer than it.
const GemmMicrokernel& gemm_edge_microkernel(const GemmMicrokernel& kernel, int64_t rows);
// Rows of C that gemm_tile() computes for a tile of m rows with `kernel`:
// whole MR blocks, then the edge kernel's rows for the rest.
int64_t gemm_computed_rows(const GemmMicrokernel& kernel, int64_t m);
bool gemm_isa_supported(GemmIsa isa);
std::string_view gemm_isa_name(GemmIsa isa);
// Floats per vector register of the ISA's microkernels (16, 8, 4).
int64_t gemm_isa_vector_floats(GemmIsa isa);

// The ISA in use: the best the CPU supports unless set_gemm_isa() forced one.
GemmIsa gemm_isa();
// Forces `isa` for later pack_b() calls. Throws std::invalid_argument when
// the CPU cannot run it. Not thread-safe with concurrent pack_b().
void set_gemm_isa(GemmIsa isa);
// The microkernel pack_b() uses now (the first of gemm_isa() in the manifest).
const GemmMicrokernel& gemm_default_microkernel();

// The microkernel of gemm_isa() for a B of n columns: the one with the
// lowest gemm_microkernel_column_cost(), the default one on ties (N = 96
// runs as 3 panels of 32, not 2 of 64 with 32 columns computed and dropped;
// N = 16 as one panel of 16). The FMAs spent on padding are what this saves.
// n padded to the kernel's NR, in columns, weighted 5/4 for a kernel whose
// NR is a single vector: it loads a B vector and MR broadcasts for only MR
// FMAs per k step, and ran 0.66-0.85x the 6x64 kernel's speed per column on
// bench_sgemm's tile shapes (AVX-512, 1 thread), so it is chosen only where
// it saves more than a fifth of the columns computed.
int64_t gemm_microkernel_column_cost(const GemmMicrokernel& kernel, int64_t n);
const GemmMicrokernel& gemm_microkernel_for_columns(int64_t n);
// The same for a C of m rows as well (MatMul and Gemm, whose rows are known
// when B is packed): the lowest gemm_computed_rows() times the column cost,
// the earlier kernel of the manifest on ties. Convolutions, whose rows
// (pixels per chunk) vary by tile, keep gemm_microkernel_for_columns().
const GemmMicrokernel& gemm_microkernel_for_shape(int64_t m, int64_t n);

// Cache blocking inside gemm_tile(), BLIS's loops (Van Zee & van de Geijn
// 2015) with A and B swapped for row-major C: for each `kc` slice of K, an
// `mc`-row block of A (packed, if at all, once per slice), then `nc`-column
// blocks of B panels (KC·NC floats held in L2; a slice shallower than kc
// takes nc·kc/slice columns, the same bytes), then MR-row micro-panels of
// A (held in L1) across those panels. Copying A into packed micro-panels
// removes MR row pointers and L1 set conflicts but costs a transposing copy
// of the tile's A once per slice, a stream from memory that nothing
// overlaps, so packing is reserved for tiles at least `pack_a_min_columns`
// wide (enough B panels to amortise it).
struct GemmBlocking {
  int64_t kc = 320;
  int64_t mc = 768;
  int64_t nc = 384;
  int64_t pack_a_min_columns = 4096;
  // When one kc slice of a B panel (kc·NR floats) is at most this many
  // bytes, the panels become the outer loop and the micro-panels of A the
  // inner one: the B panel stays in L1 while A streams past it.
  int64_t l1_panel_bytes = 0;
};
// The blocking gemm_tile() uses for `kernel`: the one set_gemm_blocking()
// forced, else the kernel's own, derived from its MR×NR and the cache sizes.
// gemm_tile() splits K into equal slices of at most 1.25 × kc.
GemmBlocking gemm_blocking_for(const GemmMicrokernel& kernel);
// gemm_blocking_for(gemm_default_microkernel()).
GemmBlocking gemm_blocking();
// Forces one blocking for every kernel, for tuning and tests; not to be
// called while gemm_tile() runs elsewhere. reset_gemm_blocking() returns to
// each kernel's own.
void set_gemm_blocking(const GemmBlocking& blocking);
void reset_gemm_blocking();

// B packed into ceil(N / NR) panels; panel p holds columns [p·NR, p·NR + NR)
// as K rows of NR floats (zero past column N). Panel p starts at p·K·NR.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int nr() const { return kernel_->nr; }
  const float* data() const { return data_.get(); }
  const GemmMicrokernel& microkernel() const { return *kernel_; }
  bool empty() const { return kernel_ == nullptr; }

 private:
  struct FreeAligned {
    void operator()(float* p) const;
  };
  friend void pack_b_into(PackedMatrix&, const float*, int64_t, int64_t, int64_t, bool,
                          const GemmMicrokernel&, const float*);
  std::unique_ptr<float[], FreeAligned> data_;
  size_t capacity_ = 0;  // floats allocated at data_
  int64_t k_ = 0, n_ = 0;
  const GemmMicrokernel* kernel_ = nullptr;
};

// Packs B [K, N] (transposed = false: b[k·ldb + n]) or its transpose stored
// as [N, K] (transposed = true: b[n·ldb + k], ONNX Gemm transB / conv weights
// as [out channels, in channels·kh·kw]) for gemm_default_microkernel().
PackedMatrix pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed);
// The same for a given microkernel (tests and benchmarks pick each one).
PackedMatrix pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                    const GemmMicrokernel& kernel);
// pack_b into `packed`, reusing its storage where it is large enough: for
// operands packed on the run path (attention's K^T and V per head, a
// batched MatMul's B, weights scaled per image), held per thread so that a
// run allocates nothing once warm. With k_scale, element (k, n) is packed
// times k_scale[k] (a squeeze-and-excitation scale on the input channels of
// a 1x1 conv's weights: B^T's rows scaled in the same pass).
void pack_b_into(PackedMatrix& packed, const float* b, int64_t k, int64_t n, int64_t ldb,
                 bool transposed, const GemmMicrokernel& kernel, const float* k_scale = nullptr);

enum class GemmBias { kNone, kPerColumn, kPerRow };
enum class GemmActivation { kNone, kRelu, kClip, kSigmoid, kGelu, kGeluTanh, kSilu, kLeakyRelu };
enum class GemmResidual { kBeforeActivation, kAfterActivation };

// Applied per element of the tile, in this order:
//   x = (accumulate ? C : 0) + A·B
//   x += bias[n] (kPerColumn) or bias[m] (kPerRow: output channels as rows)
//   x += residual[m·ld_residual + n]   if residual and kBeforeActivation
//   x = activation(x)                  relu, clip to [clip_min, clip_max], sigmoid,
//                                      gelu (erf or tanh form), silu,
//                                      leaky relu (x >= 0 ? x : leaky_alpha·x)
//   x += residual[m·ld_residual + n]   if residual and kAfterActivation
// bias and residual are indexed by absolute row/column, like A and C.
struct GemmEpilogue {
  bool accumulate = false;
  const float* bias = nullptr;
  GemmBias bias_kind = GemmBias::kNone;
  GemmActivation activation = GemmActivation::kNone;
  float clip_min = 0.0f, clip_max = 6.0f;
  float leaky_alpha = 0.0f;
  const float* residual = nullptr;
  int64_t ld_residual = 0;
  GemmResidual residual_position = GemmResidual::kBeforeActivation;
};

// The epilogue on one element of row m, column n (the scalar form of what the
// microkernels do in registers; also used by the sparse kernels). Sigmoid,
// SiLU and GELU run through vector_ops().activation, gemm_activation.hpp's
// code for gemm_isa(), so the bits equal the microkernels'. Defined in
// gemm.cpp (a baseline translation unit): an inline one compiled into an
// AVX-512 unit could be the copy the linker keeps.
float apply_epilogue_scalar(float x, const GemmEpilogue& ep, int64_t m, int64_t n);

// values[i] = ep's activation of values[i] for i < n (its activation and
// their parameters only: bias and residual are not applied), with the
// epilogue's arithmetic (vector_ops().activation: the same bits as the
// microkernels): for kernels that apply a fused activation after their own
// loops (depthwise NCHW, Gemm with C, Winograd, int8).
void apply_activation_span(const GemmEpilogue& ep, float* values, int64_t n);

struct GemmTile {
  int64_t m0 = 0, m1 = 0;  // rows of C (and A)
  int64_t n0 = 0, n1 = 0;  // columns of C (and B)
};

// C[m0:m1, n0:n1] (+)= A[m0:m1, :K] · B[:K, n0:n1] with the epilogue. `a`
// and `c` point at element (0, 0) of the whole matrices, so the tile's rows
// are read at a + m·lda and written at c + m·ldc; nothing outside the tile
// is written. Thread-safe: each thread has its own scratch.
//
// `next_b`, if given, is the B of the caller's next gemm_tile() call over the
// same columns (packed for the same microkernel): the last block of this call
// fetches the first block of it into L2, as each block does for the one after
// it within a call. Only a hint: C is the same with or without it.
void gemm_tile(const float* a, int64_t lda, const PackedMatrix& b, float* c, int64_t ldc,
               const GemmTile& tile, const GemmEpilogue& epilogue = {},
               const PackedMatrix* next_b = nullptr);

// The same over B's first k_rows rows only (0 <= k_rows <= b.k()): C =
// A[:, :k_rows] · B[:k_rows, :], each sum the chain over those k that
// gemm_tile() runs over all of B's rows when K is k_rows. For a product
// whose trailing terms are known zero (cpu.attention's masked columns).
void gemm_tile_leading_rows(const float* a, int64_t lda, const PackedMatrix& b, int64_t k_rows,
                            float* c, int64_t ldc, const GemmTile& tile,
                            const GemmEpilogue& epilogue = {});

// The same with A read through a table of k offsets (implicit GEMM):
//
//   A[m, k] = a[m·row_stride + k_offsets[k]]   for k < b.k(),
//
// so that a convolution's output pixels along one row (row_stride: the
// stride in the input) read their taps (k_offsets: channel, kernel row and
// column) straight from a padded input, with no patch matrix. A is never
// packed; every row [0, m1) must be readable at each offset.
void gemm_tile_indirect(const float* a, int64_t row_stride, const int32_t* k_offsets,
                        const PackedMatrix& b, float* c, int64_t ldc, const GemmTile& tile,
                        const GemmEpilogue& epilogue = {});

}  // namespace tessera::kernels::cpu
