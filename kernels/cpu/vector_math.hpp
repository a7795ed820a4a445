#pragma once
// Vector transcendentals over xsimd batches: exp, erf, tanh, sigmoid, SiLU
// and the two GELU forms, for the CPU tile kernels (cpu.unary, cpu.softmax)
// and the GEMM epilogue. Include it only from a per-ISA translation unit
// (like conv_depthwise_nhwc_impl.hpp): everything is in an anonymous
// namespace, so no function compiled for AVX-512 can be picked by the linker
// for a caller on a baseline CPU.
//
// Multiply-adds are fused where the ISA has FMA (AVX2, AVX-512: one
// instruction, one rounding) and a multiply then an add on SSE2, so a lane's
// result depends only on its input and on whether the ISA fuses: AVX2 and
// AVX-512 give the same bits, for every tiling and vector width; the
// baseline SSE2 path may differ from them in the last bits, within the same
// bounds. (Unfused everywhere, so that SSE2 agreed too, SiLU, EfficientNet's
// activation, cost about 0.9 ns an element, a third of the model's time.)
// Kernels that apply these outside a per-ISA unit go through
// vector_ops().activation, so they run the ISA's code too.
// Accuracy against the C library (the reference kernels), as
// tests/kernels_cpu/test_cpu_transformer_ops.cpp checks over dense sweeps:
//  - exp: relative error <= 2^-21 (a few ulp) over the whole float range,
//    denormal results included; +-inf, NaN and overflow as std::exp.
//  - erf: relative error <= 2^-21; +-inf -> +-1, NaN -> NaN.
//  - tanh: relative error <= 2^-21; +-inf -> +-1, NaN -> NaN.
//  - sigmoid (1 / (1 + exp(-x))) and silu (x sigmoid(x)): relative error
//    <= 2^-20 (e^-r's polynomial, 7.5e-8, plus the roundings; 4.0e-7 seen
//    over a dense sweep), subnormal results
//    included; 0 below -88.8 and 1 past 87, like the C library's; NaN -> NaN.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_fma.hpp"

namespace tessera::kernels::cpu {
namespace {

template <class B>
using IntBatch = xsimd::batch<int32_t, typename B::arch_type>;

// fn over kMapGroup batches, read at from(u) and written at to(u) for u <
// kMapGroup, loaded, mapped and stored together: a SiLU or an exp is a
// ~60-cycle chain per batch, and four independent ones keep the FMA ports
// busy where one batch at a time waits on the out-of-order window (SiLU on
// AVX2, Zen 4: 8.6 -> 8.3 cycles a batch over an L1-resident span; inside
// the GEMM's deferred pass, whose rows hold two batches, 16 -> 11).
inline constexpr int kMapGroup = 4;

template <class B, class From, class To, class Fn>
inline void map_group(From from, To to, Fn&& fn) {
  B v[kMapGroup];
#pragma GCC unroll 4
  for (int u = 0; u < kMapGroup; ++u) v[u] = B::load_unaligned(from(u));
#pragma GCC unroll 4
  for (int u = 0; u < kMapGroup; ++u) v[u] = fn(v[u]);
#pragma GCC unroll 4
  for (int u = 0; u < kMapGroup; ++u) v[u].store_unaligned(to(u));
}

// Calls fn(batch) -> batch over x[0, n) into y[0, n) (y may be x), the tail
// padded with `pad`: a span's last elements go through the same vector code,
// so an element's result never depends on where the span starts or ends.
// map_group's batches where the span holds them.
template <class B, class Fn>
inline void map_span(const float* x, float* y, int64_t n, float pad, Fn&& fn) {
  constexpr int64_t W = static_cast<int64_t>(B::size);
  int64_t i = 0;
  for (; i + kMapGroup * W <= n; i += kMapGroup * W)
    map_group<B>([&](int u) { return x + i + u * W; }, [&](int u) { return y + i + u * W; }, fn);
  for (; i + W <= n; i += W) fn(B::load_unaligned(x + i)).store_unaligned(y + i);
  if (i < n) {
    alignas(64) float buffer[W];
    std::fill(buffer, buffer + W, pad);
    std::memcpy(buffer, x + i, static_cast<size_t>(n - i) * sizeof(float));
    fn(B::load_unaligned(buffer)).store_unaligned(buffer);
    std::memcpy(y + i, buffer, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// exp_approx's first steps, shared by its softmax form below: n = round(x /
// ln2) as a float and as an int, and Cephes' polynomial for e^r, r = x - n ln2.
template <class B>
struct ExpParts {
  IntBatch<B> n;
  B p;
};

template <class B>
inline ExpParts<B> exp_parts(B x) {
  using I = IntBatch<B>;
  // n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest, exact).
  const B shifter(12582912.0f);
  const B t = fused_madd(x, B(1.44269504088896341f), shifter);
  const B n = t - shifter;
  const I n_int = xsimd::bitwise_cast<I>(t) - I(0x4B400000);
  // ln2 = C1 + C2 with C1 short enough that n * C1 is exact.
  B r = fused_nmadd(n, B(0.693359375f), x);
  r = fused_nmadd(n, B(-2.12194440e-4f), r);
  B p(1.9875691500e-4f);
  p = fused_madd(p, r, B(1.3981999507e-3f));
  p = fused_madd(p, r, B(8.3334519073e-3f));
  p = fused_madd(p, r, B(4.1665795894e-2f));
  p = fused_madd(p, r, B(1.6666665459e-1f));
  p = fused_madd(p, r, B(5.0000001201e-1f));
  p = fused_madd(p, r * r, r) + B(1.0f);
  return {n_int, p};
}

// exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and Cephes'
// expf polynomial for e^r (Moshier, Cephes Math Library). 2^n is applied as
// two powers of two, so results down to the smallest denormal round once,
// like the C library's.
template <class B>
inline B exp_approx(B x) {
  using I = IntBatch<B>;
  // Clamped so that 2^n below stays representable; the final rounding then
  // overflows to inf past ln(FLT_MAX) and underflows to 0 below ln(2^-150)
  // by itself.
  const B xc = xsimd::min(xsimd::max(x, B(-104.0f)), B(89.0f));
  const ExpParts<B> e = exp_parts(xc);
  // 2^n as 2^(n/2) * 2^(n - n/2): each factor is a normal float for n in [-151, 129].
  const I half = e.n >> 1;
  const B scale0 = xsimd::bitwise_cast<B>((half + I(127)) << 23);
  const B scale1 = xsimd::bitwise_cast<B>((e.n - half + I(127)) << 23);
  const B y = e.p * scale0 * scale1;
  return xsimd::select(xsimd::isnan(x), x, y);  // NaN stays NaN (the clamp dropped it)
}

// exp(x) for x <= 0 (or NaN) where a subnormal result is as good as 0: a
// softmax's exp(x - max), whose sum is at least 1, and erf's e^-big. 0 below
// -87 (e^-87 = 1.6e-38, just above the smallest normal float), never a
// subnormal, not even in a lane that is then dropped. An instruction that
// produces or reads a subnormal costs a microcode assist of a hundred-odd
// cycles on Intel cores unless the thread flushes them (we do not change
// MXCSR under the caller), and a causally masked attention row is half such
// lanes (GPT-2's mask is -3.4e38): its softmax ran 2.5x slower than on
// unmasked rows. Above -87 the bits are exp_approx's: 2^n (n in [-126, 0])
// is one normal float, so exp_approx's clamps, its split of 2^n into two
// factors (each product exact either way) and its NaN select (NaN propagates
// through the polynomial) fall away: 19 vector ops instead of 28.
template <class B>
inline B exp_nonpositive_or_zero(B x) {
  using I = IntBatch<B>;
  const B low(-87.0f);
  const auto below = x < low;  // false for NaN
  const ExpParts<B> e = exp_parts(xsimd::select(below, low, x));
  const B y = e.p * xsimd::bitwise_cast<B>((e.n + I(127)) << 23);
  return xsimd::select(below, B(0.0f), y);
}

// erf(x): Norbert Juffa's erff split (the one ONNX Runtime's MLAS uses):
// |x| <= 0.921875: x + x * P(x^2); above: 1 - exp(-(t + t * Q(t))) with t =
// min(|x|, 3.925) (erf rounds to 1 beyond), sign copied from x.
template <class B>
inline B erf_approx(B x) {
  const B a = xsimd::abs(x);
  const B s = x * x;
  B small(-5.99104969e-4f);
  small = fused_madd(small, s, B(4.99339588e-3f));
  small = fused_madd(small, s, B(-2.67667342e-2f));
  small = fused_madd(small, s, B(1.12818025e-1f));
  small = fused_madd(small, s, B(-3.76124859e-1f));
  small = fused_madd(small, s, B(1.28379151e-1f));
  small = fused_madd(small, x, x);
  const B t = xsimd::min(a, B(3.925f));
  B big(1.72948930e-5f);
  big = fused_madd(big, t, B(-3.83208680e-4f));
  big = fused_madd(big, t, B(3.88393435e-3f));
  big = fused_madd(big, t, B(-2.42545605e-2f));
  big = fused_madd(big, t, B(1.06777847e-1f));
  big = fused_madd(big, t, B(6.34846687e-1f));
  big = fused_madd(big, t, B(1.28717512e-1f));
  big = fused_madd(big, t, t);
  // big >= 0 (1 - e^-big approximates erf(t) >= 0): exp_nonpositive_or_zero
  // gives exp_approx's bits there in fewer steps.
  big = B(1.0f) - exp_nonpositive_or_zero(-big);
  big = xsimd::copysign(big, x);
  return xsimd::select(a > B(0.921875f), big, small);
}

// erf(x) for GELU: x P(x^2) / Q(x^2) on x clamped to [-4, 4] (Eigen's float
// erf coefficients), 15 vector ops and a divide against erf_approx's ~40 (two
// polynomials, an exp and a select): BERT's FFN-up MatMul spent 1.3 ms of
// its 21.6 in the fused erf-GELU, 0.1 ms with this (tessera run --profile, 1
// thread, seq 128 batch 8); in cpu.unary's Erf over 3.1 M floats it ran at
// memory speed (1.84 -> 0.83 ms). Its error passes erf_approx's 2^-21 relative
// bound near |x| = 2.85 (test_cpu_transformer_ops), which is why the Erf op
// keeps erf_approx; GELU's bound, 2^-21 (|x| + |y|), holds with 0.5 |x| in front.
template <class B>
inline B erf_rational(B x) {
  // min(4, x) returns x when x is NaN (x86's min gives its second operand),
  // so a NaN goes through the clamp and the polynomials.
  const B c = xsimd::max(B(-4.0f), xsimd::min(B(4.0f), x));
  const B s = c * c;
  B p(-2.72614225801306e-10f);
  p = fused_madd(p, s, B(2.77068142495902e-08f));
  p = fused_madd(p, s, B(-2.10102402082508e-06f));
  p = fused_madd(p, s, B(-5.69250639462346e-05f));
  p = fused_madd(p, s, B(-7.34990630326855e-04f));
  p = fused_madd(p, s, B(-2.95459980854025e-03f));
  p = fused_madd(p, s, B(-1.60960333262415e-02f));
  B q(-1.45660718464996e-05f);
  q = fused_madd(q, s, B(-2.13374055278905e-04f));
  q = fused_madd(q, s, B(-1.68282697438203e-03f));
  q = fused_madd(q, s, B(-7.37332916720468e-03f));
  q = fused_madd(q, s, B(-1.42647390514189e-02f));
  return c * (p / q);
}

// tanh(x): Cephes' tanhf: an odd polynomial for |x| < 0.625, else
// 1 - 2 / (e^(2|x|) + 1) with x's sign (1 once e^(2|x|) overflows).
template <class B>
inline B tanh_approx(B x) {
  const B a = xsimd::abs(x);
  const B z = x * x;
  B small(-5.70498872745e-3f);
  small = fused_madd(small, z, B(2.06390887954e-2f));
  small = fused_madd(small, z, B(-5.37397155531e-2f));
  small = fused_madd(small, z, B(1.33314422036e-1f));
  small = fused_madd(small, z, B(-3.33332819422e-1f));
  small = fused_madd(small * z, x, x);
  const B e = exp_approx(a + a);
  B big = B(1.0f) - B(2.0f) / (e + B(1.0f));
  big = xsimd::copysign(big, x);
  return xsimd::select(a < B(0.625f), small, big);
}

// The logistic sigmoid 1 / (1 + e^-x) of a number, a NaN taken as -89:
// e^-x by exp_approx's reduction, but only where 1 + e^-x is not 1 or
// infinite: x is clamped to [-89, 87], so 2^-n is one power of two (2^-n-1
// times 2 e^-r, the 2 folded into the polynomial's coefficients, exact);
// past 87 it underflows to 0 (sigmoid 1), below -88.72 the product overflows
// to inf (sigmoid 0), as the C library's expf does. e^-r is a degree-5
// polynomial fitted for relative error (7.5e-8 on |r| <= ln2/2) instead of
// exp_approx's degree 7: the sigmoid's bound is 2^-20, not 2^-21, and SiLU,
// EfficientNet's activation, was a sixth of that model's time (perf, 1
// thread): 10.5 -> 8.2 cycles per AVX-512 SiLU vector, with silu_approx's
// NaN handling below.
template <class B>
inline B sigmoid_of_number(B x) {
  using I = IntBatch<B>;
  // x86's max returns its second operand when either is NaN.
  const B xc = xsimd::min(xsimd::max(x, B(-89.0f)), B(87.0f));
  const B shifter(12582912.0f);
  const B t = fused_madd(xc, B(1.44269504088896341f), shifter);  // n + shifter
  const B n = t - shifter;
  B r = fused_nmadd(n, B(0.693359375f), xc);
  r = fused_nmadd(n, B(-2.12194440e-4f), r);
  // 2 e^-r = 2 P(-r), P(r) ~ e^r with coefficients 1.00000012, 0.999999702,
  // 0.499988943, 0.166675746, 0.0419153832, 0.00829765201.
  B p(-2.0f * 0.008297652006149292f);
  p = fused_madd(p, r, B(2.0f * 0.04191538318991661f));
  p = fused_madd(p, r, B(-2.0f * 0.16667574644088745f));
  p = fused_madd(p, r, B(2.0f * 0.49998894333839417f));
  p = fused_madd(p, r, B(-2.0f * 0.9999997019767761f));
  p = fused_madd(p, r, B(2.0f * 1.0000001192092896f));
  // 2^(-n-1): exponent field 126 - n, in [0, 254] for n in [-128, 126]
  // (0: the float 0, where e^-x is below 2^-126 anyway).
  const I field = I(126 + 0x4B400000) - xsimd::bitwise_cast<I>(t);
  const B e = p * xsimd::bitwise_cast<B>(field << 23);
  return B(1.0f) / (B(1.0f) + e);
}

// The one sigmoid of the CPU kernels (cpu.unary, every fused epilogue), so a
// fused and an unfused Sigmoid give the same bits. A NaN input comes back as
// itself, so that x * sigmoid(x) has one NaN whichever operand the compiler
// puts first.
template <class B>
inline B sigmoid_approx(B x) {
  return xsimd::select(xsimd::isnan(x), x, sigmoid_of_number(x));
}

// SiLU as Mul(x, Sigmoid(x)) rounds: for a NaN x both are x's NaN, and here
// x times a number is too, without sigmoid_approx's select.
template <class B>
inline B silu_approx(B x) {
  return x * sigmoid_of_number(x);
}

// GELU, the reference's expressions (kernels/reference/elementwise.cpp) with
// the vector erf / tanh.
template <class B>
inline B gelu_erf_approx(B x) {
  return B(0.5f) * x * (B(1.0f) + erf_rational(x * B(0.7071067811865476f)));
}

// The tanh form as x * sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3):
// 0.5 (1 + tanh(u)) = sigmoid(2u), one exp and one divide with no branch
// for small |u| (tanh_approx computes both of its branches), and no
// cancellation in 1 + tanh(u) for large negative x.
template <class B>
inline B gelu_tanh_approx(B x) {
  const B two_u = x * fused_madd(x * x, B(2.0f * 0.7978845608028654f * 0.044715f),
                                 B(2.0f * 0.7978845608028654f));
  return x * sigmoid_approx(two_u);
}

}  // namespace
}  // namespace tessera::kernels::cpu
