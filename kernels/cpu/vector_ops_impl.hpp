#pragma once
// The loops of vector_ops.hpp over xsimd batches of architecture A. Include
// it only from vector_ops_<isa>.cpp (anonymous namespace: see vector_math.hpp).
// A span's tail (fewer elements than a vector) goes through a padded stack
// buffer and the same vector code, so an element's result never depends on
// where a span starts or ends.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/transpose_block_impl.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/vector_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr int64_t kPartials = 16;  // partial sums per row, on every ISA

template <class B>
inline B unary_math(UnaryMath op, B x, UnaryMathParams p) {
  switch (op) {
    case UnaryMath::kExp:
      return exp_approx(x);
    case UnaryMath::kErf:
      return erf_approx(x);
    case UnaryMath::kTanh:
      return tanh_approx(x);
    case UnaryMath::kGeluErf:
      return gelu_erf_approx(x);
    case UnaryMath::kGeluTanh:
      return gelu_tanh_approx(x);
    case UnaryMath::kSigmoid:
      return sigmoid_approx(x);
    case UnaryMath::kSqrt:
      return xsimd::sqrt(x);
    case UnaryMath::kNeg:
      // A sign flip, NaN included (xsimd's AVX-512F negation is 0 - x).
      return x ^ B(-0.0f);
    case UnaryMath::kAbs:
      return xsimd::abs(x);
    case UnaryMath::kReciprocal:
      return B(1.0f) / x;
    case UnaryMath::kLeakyRelu:
      return xsimd::select(x >= B(0.0f), x, B(p.alpha) * x);
    case UnaryMath::kHardSigmoid: {
      // std::max(0, std::min(1, v)) exactly, NaN included (it gives 1).
      const B v = B(p.alpha) * x + B(p.beta);
      const B lo = xsimd::select(v < B(1.0f), v, B(1.0f));
      return xsimd::select(B(0.0f) < lo, lo, B(0.0f));
    }
    case UnaryMath::kHardSwish: {
      const B v = x / B(6.0f) + B(0.5f);
      const B lo = xsimd::select(v < B(1.0f), v, B(1.0f));
      return x * xsimd::select(B(0.0f) < lo, lo, B(0.0f));
    }
  }
  return x;
}

template <class A>
void unary_span(UnaryMath op, const float* x, float* y, int64_t n, UnaryMathParams params) {
  using B = xsimd::batch<float, A>;
  // One loop per op, so the switch is outside the hot loop.
  auto run = [&](auto tag) {
    constexpr UnaryMath kOp = decltype(tag)::value;
    map_span<B>(x, y, n, 0.0f, [&](B v) { return unary_math(kOp, v, params); });
  };
  switch (op) {
#define TESSERA_UNARY_CASE(K)                               \
  case UnaryMath::K:                                        \
    run(std::integral_constant<UnaryMath, UnaryMath::K>{}); \
    break;
    TESSERA_UNARY_CASE(kExp)
    TESSERA_UNARY_CASE(kErf)
    TESSERA_UNARY_CASE(kTanh)
    TESSERA_UNARY_CASE(kGeluErf)
    TESSERA_UNARY_CASE(kGeluTanh)
    TESSERA_UNARY_CASE(kSqrt)
    TESSERA_UNARY_CASE(kNeg)
    TESSERA_UNARY_CASE(kAbs)
    TESSERA_UNARY_CASE(kReciprocal)
    TESSERA_UNARY_CASE(kLeakyRelu)
    TESSERA_UNARY_CASE(kSigmoid)
    TESSERA_UNARY_CASE(kHardSigmoid)
    TESSERA_UNARY_CASE(kHardSwish)
#undef TESSERA_UNARY_CASE
  }
}

// Folds f(x[0, n)) into kPartials lanes with combine(acc, f(v)): element i
// into lane i mod 16. In the tail, lanes past n get `neutral` (an identity of
// combine) instead of f's value. The lanes land in `lanes`. With `out`,
// f's values are stored there too (out may be x).
template <class B, class F, class Combine>
inline void fold_row(const float* x, int64_t n, B init, float neutral, F&& f, Combine&& combine,
                     float* lanes, float* out = nullptr) {
  constexpr int64_t W = static_cast<int64_t>(B::size);
  constexpr int64_t G = kPartials / W;
  static_assert(G * W == kPartials, "the vector width divides 16");
  B acc[G];
  for (int64_t g = 0; g < G; ++g) acc[g] = init;
  int64_t i = 0;
  for (; i + kPartials <= n; i += kPartials)
    for (int64_t g = 0; g < G; ++g) {
      const B v = f(B::load_unaligned(x + i + g * W));
      if (out) v.store_unaligned(out + i + g * W);
      acc[g] = combine(acc[g], v);
    }
  if (i < n) {
    const int64_t tail = n - i;
    alignas(64) float buffer[kPartials];
    std::fill(buffer, buffer + kPartials, x[i]);  // any input f accepts
    std::memcpy(buffer, x + i, static_cast<size_t>(tail) * sizeof(float));
    for (int64_t g = 0; g < G; ++g)
      f(B::load_unaligned(buffer + g * W)).store_unaligned(buffer + g * W);
    if (out) std::memcpy(out + i, buffer, static_cast<size_t>(tail) * sizeof(float));
    std::fill(buffer + tail, buffer + kPartials, neutral);
    for (int64_t g = 0; g < G; ++g) acc[g] = combine(acc[g], B::load_unaligned(buffer + g * W));
  }
  for (int64_t g = 0; g < G; ++g) acc[g].store_unaligned(lanes + g * W);
}

// The 16 lanes summed pairwise in one fixed order.
inline float sum_lanes(float* lanes) {
  for (int64_t half = kPartials / 2; half >= 1; half /= 2)
    for (int64_t k = 0; k < half; ++k) lanes[k] = lanes[k] + lanes[k + half];
  return lanes[0];
}

// The largest of the values v(i), i < n (vectors vec(i) of W of them, the
// tail one by one as one(i)), NaN skipped like the reference's
// (std::max(m, v) = m < v ? v : m); with `out`, each value is stored there
// too. Four running maxima: one is a chain of compare-and-blend steps, one
// vector per ~5 cycles, which made the max pass of an attention row (384
// floats) as slow as its exp pass. Max is exact, so the grouping changes no
// value (only, at most, the sign of a zero maximum, which x - max and so
// every softmax bit ignore).
template <class B, class Vec, class One>
float max_of(int64_t n, Vec&& vec, One&& one, float* out = nullptr) {
  constexpr int64_t W = static_cast<int64_t>(B::size);
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  auto take = [&](B m, int64_t i) {
    const B v = vec(i);
    if (out) v.store_unaligned(out + i);
    return xsimd::select(m < v, v, m);
  };
  B m[4] = {B(kMinusInf), B(kMinusInf), B(kMinusInf), B(kMinusInf)};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int64_t g = 0; g < 4; ++g) m[g] = take(m[g], i + g * W);
  for (; i + W <= n; i += W) m[0] = take(m[0], i);
  for (int g = 1; g < 4; ++g) m[0] = xsimd::select(m[0] < m[g], m[g], m[0]);
  alignas(64) float lanes[W];
  m[0].store_aligned(lanes);
  float max = kMinusInf;
  for (float v : lanes) max = max < v ? v : max;
  for (; i < n; ++i) {
    const float v = one(i);
    if (out) out[i] = v;
    max = max < v ? v : max;
  }
  return max;
}

// The largest of x[0, n) (max_of).
template <class B>
float row_max(const float* x, int64_t n) {
  return max_of<B>(
      n, [x](int64_t i) { return B::load_unaligned(x + i); }, [x](int64_t i) { return x[i]; });
}

// The sum of exp(x - max) over x[0, n), each x <= max or NaN; with `exps`,
// the exps are kept there (exps may be x).
template <class B>
float exp_sum(const float* x, int64_t n, float max, float* exps) {
  alignas(64) float lanes[kPartials];
  const B bmax(max);
  fold_row<B>(
      x, n, B(0.0f), 0.0f, [&](B v) { return exp_nonpositive_or_zero(v - bmax); },
      [](B s, B v) { return s + v; }, lanes, exps);
  return sum_lanes(lanes);
}

template <class A>
SoftmaxStats softmax_stats(const float* x, int64_t n) {
  using B = xsimd::batch<float, A>;
  const float max = row_max<B>(x, n);
  return {max, exp_sum<B>(x, n, max, nullptr)};
}

// Each exp times 1 / sum, not divided by sum: a vector division costs
// about 20 multiplies' issue slots (within 1.5 ulp of the quotient instead
// of 0.5).
template <class A>
void softmax_scale(const float* x, float* y, int64_t n, SoftmaxStats stats) {
  using B = xsimd::batch<float, A>;
  const B max(stats.max), inverse(1.0f / stats.sum);
  map_span<B>(x, y, n, 0.0f, [&](B v) { return exp_nonpositive_or_zero(v - max) * inverse; });
}

template <class A>
void softmax_row(const float* x, float* y, int64_t n) {
  using B = xsimd::batch<float, A>;
  const float max = row_max<B>(x, n);
  const B inverse(1.0f / exp_sum<B>(x, n, max, y));
  map_span<B>(y, y, n, 0.0f, [&](B e) { return e * inverse; });
}

template <class A>
void scaled_masked_softmax_row(const float* x, float alpha, const float* mask, int64_t mask_step,
                               float* z, float* y, int64_t n, int64_t begin, int64_t length) {
  using B = xsimd::batch<float, A>;
  // z = alpha * x + m and its maximum in one pass; alpha * x + m in two
  // roundings (the build never contracts them into an FMA), lane by lane as
  // the reference's Mul then Add.
  const B balpha(alpha);
  float max;
  if (mask && mask_step == 1) {
    max = max_of<B>(
        n,
        [&](int64_t i) { return balpha * B::load_unaligned(x + i) + B::load_unaligned(mask + i); },
        [&](int64_t i) { return alpha * x[i] + mask[i]; }, z);
  } else if (mask) {
    const float m = mask[0];
    const B bm(m);
    max = max_of<B>(
        n, [&](int64_t i) { return balpha * B::load_unaligned(x + i) + bm; },
        [&](int64_t i) { return alpha * x[i] + m; }, z);
  } else {
    max = max_of<B>(
        n, [&](int64_t i) { return balpha * B::load_unaligned(x + i); },
        [&](int64_t i) { return alpha * x[i]; }, z);
  }
  const B inverse(1.0f / exp_sum<B>(z, n, max, z));
  map_span<B>(z + begin, y + begin, length, 0.0f, [&](B e) { return e * inverse; });
}

template <class A>
LayerNormStats layer_norm_stats(const float* x, int64_t n, float epsilon) {
  using B = xsimd::batch<float, A>;
  alignas(64) float lanes[kPartials];
  auto add = [](B s, B v) { return s + v; };
  const float pivot = x[0];
  const B bpivot(pivot);
  fold_row<B>(
      x, n, B(0.0f), 0.0f, [&](B v) { return v - bpivot; }, add, lanes);
  const float mean_delta = sum_lanes(lanes) / static_cast<float>(n);
  const B bmean(mean_delta);
  fold_row<B>(
      x, n, B(0.0f), 0.0f,
      [&](B v) {
        const B c = (v - bpivot) - bmean;
        return c * c;
      },
      add, lanes);
  const float squares = sum_lanes(lanes);
  const float variance = squares / static_cast<float>(n);
  return {pivot, mean_delta, 1.0f / std::sqrt(variance + epsilon)};
}

template <class A>
LayerNormStats rms_norm_stats(const float* x, int64_t n, float epsilon) {
  using B = xsimd::batch<float, A>;
  alignas(64) float lanes[kPartials];
  fold_row<B>(
      x, n, B(0.0f), 0.0f, [](B v) { return v * v; }, [](B s, B v) { return s + v; }, lanes);
  const float mean_square = sum_lanes(lanes) / static_cast<float>(n);
  return {0.0f, 0.0f, 1.0f / std::sqrt(mean_square + epsilon)};
}

template <class A>
void layer_norm_apply(const float* x, const float* scale, const float* bias, float* y, int64_t n,
                      LayerNormStats stats) {
  using B = xsimd::batch<float, A>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  const B pivot(stats.pivot), mean(stats.mean_delta), inv_std(stats.inv_std);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const B b = bias ? B::load_unaligned(bias + i) : B(0.0f);
    const B v = B::load_unaligned(x + i);
    (((v - pivot) - mean) * inv_std * B::load_unaligned(scale + i) + b).store_unaligned(y + i);
  }
  for (; i < n; ++i) {
    // The same operations on one lane.
    const float b = bias ? bias[i] : 0.0f;
    y[i] = ((x[i] - stats.pivot) - stats.mean_delta) * stats.inv_std * scale[i] + b;
  }
}

template <class A>
constexpr VectorOps make_vector_ops() {
  return {unary_span<A>,
          softmax_stats<A>,
          softmax_scale<A>,
          softmax_row<A>,
          scaled_masked_softmax_row<A>,
          layer_norm_stats<A>,
          layer_norm_apply<A>,
          activation_span_approx<A>,
          rms_norm_stats<A>,
          transpose_block<A>};
}

}  // namespace
}  // namespace tessera::kernels::cpu
