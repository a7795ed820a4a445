#pragma once
// The vectorised inner loops of the transformer ops (cpu.unary's
// transcendentals, cpu.softmax, cpu.layer_norm), written once over xsimd
// (vector_ops_impl.hpp) and compiled per ISA (vector_ops_<isa>.cpp, each with
// its own target flags). vector_ops() picks the table of gemm_isa(), so
// set_gemm_isa() forces each ISA in tests like the SGEMM's.
//
// Each gives the same bits for any tiling: lane math is per lane
// (vector_math.hpp), and every sum is kept in 16 partial sums (element i
// into partial i mod 16, however wide the vector) reduced pairwise in one
// fixed order. AVX2 and AVX-512 agree bitwise; the baseline (SSE2) table,
// which has no FMA, may differ from them in the polynomial ops' last bits.
#include <cstdint>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::cpu {

// The unary ops with a vector implementation. The exact ones (Sqrt, Neg,
// Abs, Reciprocal, LeakyRelu, HardSigmoid, HardSwish) are the reference's
// expression in IEEE arithmetic: bitwise equal to it. Exp, Erf, Tanh and the
// GELUs are polynomial (vector_math.hpp states their error bounds).
enum class UnaryMath : uint8_t {
  kExp,
  kErf,
  kTanh,
  kGeluErf,
  kGeluTanh,
  kSqrt,
  kNeg,
  kAbs,
  kReciprocal,
  kLeakyRelu,
  kHardSigmoid,
  kHardSwish,
  kSigmoid,  // vector_math.hpp's sigmoid_approx, the fused epilogues' too
};

struct UnaryMathParams {
  float alpha = 0.0f;  // LeakyRelu, HardSigmoid
  float beta = 0.0f;   // HardSigmoid
};

// A softmax row's maximum and sum of exp(x - max).
struct SoftmaxStats {
  float max = 0.0f;
  float sum = 0.0f;
};

// A normalisation row's statistics, taken around its first element (the
// pivot), so that rows with a large mean and a small spread keep the
// precision of their deviations: mean = pivot + mean_delta, and
// 1 / sqrt(variance + epsilon).
struct LayerNormStats {
  float pivot = 0.0f;
  float mean_delta = 0.0f;
  float inv_std = 0.0f;
};

struct VectorOps {
  // y[i] = op(x[i]) for i < n; y may be x.
  void (*unary)(UnaryMath op, const float* x, float* y, int64_t n, UnaryMathParams params);
  // The statistics of the contiguous row x[0, n), n >= 1.
  SoftmaxStats (*softmax_stats)(const float* x, int64_t n);
  // y[i] = exp(x[i] - max) · (1 / sum) for i < n.
  void (*softmax_scale)(const float* x, float* y, int64_t n, SoftmaxStats stats);
  // The whole row at once: softmax_stats then softmax_scale, the same bits,
  // but each exp computed once (kept in y between the passes); y may be x.
  void (*softmax_row)(const float* x, float* y, int64_t n);
  // softmax(alpha * x + m) of the row x[0, n), m[i] = mask[i * mask_step]
  // (mask_step 1, or 0 for one value; no m when mask is null), written to y
  // at [begin, begin + length) only. z (n floats, scratch) takes the inputs,
  // each rounded as the reference's Mul then Add round them, then their exps.
  void (*scaled_masked_softmax_row)(const float* x, float alpha, const float* mask,
                                    int64_t mask_step, float* z, float* y, int64_t n, int64_t begin,
                                    int64_t length);
  // Mean and variance in float, two passes (the variance around the mean), n >= 1.
  LayerNormStats (*layer_norm_stats)(const float* x, int64_t n, float epsilon);
  // y[i] = ((x[i] - pivot) - mean_delta) * inv_std * scale[i] + bias[i] (bias may be null).
  void (*layer_norm_apply)(const float* x, const float* scale, const float* bias, float* y,
                           int64_t n, LayerNormStats stats);
  // values[i] = the GEMM epilogue's activation of values[i] for i < n
  // (gemm_activation.hpp): the microkernels' bits, for kernels outside a
  // per-ISA translation unit.
  void (*activation)(GemmActivation activation, float clip_min, float clip_max, float leaky_alpha,
                     float* values, int64_t n);
  // RMSNormalization's statistics as layer_norm_apply takes them: pivot and
  // mean 0, inv_std = 1 / sqrt(mean(x²) + epsilon), n >= 1.
  LayerNormStats (*rms_norm_stats)(const float* x, int64_t n, float epsilon);
  // dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols, in the
  // ISA's register blocks (transpose_block_impl.hpp: 16×16 on AVX-512, 8×8
  // on AVX2, transpose_panel's 4×4 on SSE2).
  void (*transpose)(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                    int64_t ld_dst);
};

// The table of gemm_isa() (kernels/cpu/gemm.hpp).
const VectorOps& vector_ops();

extern const VectorOps kVectorOpsAvx512;
extern const VectorOps kVectorOpsAvx2;
extern const VectorOps kVectorOpsPortable;

}  // namespace tessera::kernels::cpu
