#pragma once
// Int8 GEMM tile for weights whose TeSA bit width allows 8 bits (SparTA §3.3,
// "BitRounding": an element's bit width picks the instruction that computes
// it; here AVX-512 VNNI's vpdpbusd, u8 × s8 summed four at a time into s32):
//
//   C[m, n] = sa[m] · sb[n] · Σk (qa[m, k] − 128) · qb[k, n], then the epilogue,
//
// - B is quantized once at prepare time, symmetric per output column:
//   sb[n] = max|B[:, n]| / 127, qb = round(B / sb) in [−127, 127];
// - each row of A is quantized when a tile reads it (dynamic quantization):
//   sa[m] = max|A[m, :]| / 127, qa = round(A / sa) + 128 in [1, 255] (vpdpbusd
//   takes unsigned bytes, so A carries the zero point 128 and the kernel
//   subtracts 128 · Σk qb[k, n], precomputed per column).
// A row's quantization depends on the whole row only, so the result does not
// depend on the tiling, and every ISA path gives the same bits (integer sums
// are exact; rounding, conversion and scaling are the same operations).
//
// The error against float32 is bounded per element (int8_error_bound()); the
// tests check it, and the user opts in per weight through the annotation
// file's "bits": 8 (`tessera compile --sparsity FILE.json`).
//
// Usage:
//   QuantizedMatrix w = quantize_b(weights, K, N, /*ldb=*/N, /*transposed=*/false);
//   int8_gemm_tile(x, /*lda=*/K, w, y, /*ldc=*/N, {.m0 = 0, .m1 = M, .n0 = 0, .n1 = N}, ep);
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::cpu {

// kAvx2: exact s16 products (vpmaddwd) for CPUs without VNNI
// (gemm_int8_avx2.cpp); the same bits as the others.
enum class Int8Isa { kPortable, kAvx512Vnni, kAvx2 };

// How quantize_b() stores B: every element, or only the 32×32 blocks of B
// (32 k × 32 columns) that hold a nonzero int8 value: SparTA's block-sparse
// TeSA at 8 bits (§3.3), one k offset per block and none per element. Both
// give the same bits (a dropped block's products are all zero).
enum class Int8Layout { kDense, kBlocks32 };
inline constexpr int kInt8Block = 32;
// The fraction of B's 32×32 blocks (edge blocks included) that hold a nonzero.
double int8_block_coverage(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed);
bool int8_isa_supported(Int8Isa isa);
// The int8 GEMM's time relative to the float32 SGEMM's on the same shape
// (the kernel choice weighs it against a sparse float32 layout's):
//  - AVX2 0.65, measured (bench_int8, 1 thread, AVX2 Zen 4 guest: 1.51-1.55x
//    the SGEMM on BERT's shapes and 1024³);
//  - AVX-512 VNNI 0.33, estimated, not measured on a VNNI CPU: vpdpbusd does
//    four times an FMA's multiply-adds per instruction where AVX2's
//    vpmaddwd does two, at the AVX2 kernel's efficiency;
//  - portable 12 (that path is refused: int8_weight_allowed()).
double int8_relative_cost(Int8Isa isa);
std::string_view int8_isa_name(Int8Isa isa);
// The best the CPU supports unless set_int8_isa() forced one.
Int8Isa int8_isa();
// Forces `isa` for later quantize_b() calls; throws std::invalid_argument when
// the CPU cannot run it. Not thread-safe with concurrent quantize_b().
void set_int8_isa(Int8Isa isa);

// B [K, N] as int8. The unit is a group of 16 columns × 4 consecutive k
// (64 bytes: one vpdpbusd operand), K past the matrix zero.
//  - kDense: panel p holds columns [16p, 16p + 16) (zero past N) as
//    k_groups() groups, at panel(p).
//  - kBlocks32: strip s holds columns [32s, 32s + 32) as its stored blocks
//    strip_blocks()[s] .. strip_blocks()[s + 1]; block i starts at k group
//    block_group()[i] and holds 8 groups of its first 16 columns, then 8 of
//    the next 16 (1024 bytes at block(i)).
class QuantizedMatrix {
 public:
  static constexpr int kPanel = 16;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t k_groups() const { return (k_ + 3) / 4; }
  // Groups of A a row is quantized into (K rounded up to whole blocks).
  int64_t a_groups() const {
    return layout_ == Int8Layout::kDense ? k_groups() : (k_ + kInt8Block - 1) / kInt8Block * 8;
  }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  const int8_t* panel(int64_t p) const { return data_.get() + p * k_groups() * kPanel * 4; }
  int64_t strips() const { return (n_ + kInt8Block - 1) / kInt8Block; }
  const int64_t* strip_blocks() const { return strip_blocks_.data(); }
  const int32_t* block_group() const { return block_group_.data(); }
  const int8_t* block(int64_t i) const { return data_.get() + i * 1024; }
  int64_t stored_blocks() const { return static_cast<int64_t>(block_group_.size()); }
  // sb and 128·Σk qb per column, padded with zeros to whole strips.
  const float* scale() const { return scale_.data(); }
  const int32_t* compensation() const { return compensation_.data(); }
  Int8Isa isa() const { return isa_; }
  Int8Layout layout() const { return layout_; }

 private:
  struct Free {
    void operator()(int8_t* p) const;
  };
  friend QuantizedMatrix quantize_b(const float*, int64_t, int64_t, int64_t, bool, Int8Layout);
  int64_t k_ = 0, n_ = 0;
  Int8Isa isa_ = Int8Isa::kPortable;
  Int8Layout layout_ = Int8Layout::kDense;
  std::vector<int64_t> strip_blocks_;
  std::vector<int32_t> block_group_;
  std::unique_ptr<int8_t[], Free> data_;
  std::vector<float> scale_;
  std::vector<int32_t> compensation_;
};

// Quantizes B [K, N] (transposed = false: b[k·ldb + n]) or B^T stored as
// [N, K] (transposed = true: b[n·ldb + k]). Throws std::invalid_argument on a
// bad shape, a non-finite weight, or K ≥ 2^24 (s32 sums could overflow).
QuantizedMatrix quantize_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                           Int8Layout layout = Int8Layout::kDense);

// C[m0:m1, n0:n1] = the quantized product, then the epilogue (same contract
// as gemm_tile(); `accumulate` is not supported). Thread-safe: per-thread
// scratch.
void int8_gemm_tile(const float* a, int64_t lda, const QuantizedMatrix& b, float* c, int64_t ldc,
                    const GemmTile& tile, const GemmEpilogue& epilogue = {});

// |C_int8[m, n] − C_float[m, n]| before the epilogue is at most
//   Σk (|a_k|·eb_n + |b_kn|·ea_m + ea_m·eb_n) + float rounding,
// with ea_m = sa[m]/2 and eb_n = sb[n]/2 the quantization steps' halves;
// this returns that bound (plus a 1e-5 relative slack for the float
// arithmetic) for one element, computed from the float A row and B column.
double int8_error_bound(const float* a_row, const float* b, int64_t k, int64_t n_index, int64_t ldb,
                        bool transposed);

}  // namespace tessera::kernels::cpu
