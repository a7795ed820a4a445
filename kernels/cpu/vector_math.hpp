#pragma once
// Vector transcendentals over xsimd batches: exp, erf, tanh and the two GELU
// forms, for the CPU tile kernels (cpu.unary, cpu.softmax) and later the
// GEMM epilogue. Include it only from a per-ISA translation unit (like
// conv_depthwise_nhwc_impl.hpp): everything is in an anonymous namespace, so
// no function compiled for AVX-512 can be picked by the linker for a caller
// on a baseline CPU.
//
// Every step is a separately rounded IEEE add, multiply, divide, compare or
// bit operation (no FMA; the build has -ffp-contract=off), so a lane's result
// depends only on its input: the same bits for AVX-512, AVX2 and SSE2, for
// every tiling. Accuracy against the C library (the reference kernels), as
// tests/kernels_cpu/test_cpu_transformer_ops.cpp checks over dense sweeps:
//  - exp: relative error <= 2^-21 (a few ulp) over the whole float range,
//    denormal results included; +-inf, NaN and overflow as std::exp.
//  - erf: relative error <= 2^-21; +-inf -> +-1, NaN -> NaN.
//  - tanh: relative error <= 2^-21; +-inf -> +-1, NaN -> NaN.
//  - sigmoid (1 / (1 + exp(-x))) and silu (x sigmoid(x)): relative error
//    <= 2^-20 (exp's error plus the divide's rounding); 0 below -104 and 1
//    past 89, like the C library's; NaN -> NaN.
#include <xsimd/xsimd.hpp>

#include <cstdint>

namespace tessera::kernels::cpu {
namespace {

template <class B>
using IntBatch = xsimd::batch<int32_t, typename B::arch_type>;

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
  // n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest, exact).
  const B shifter(12582912.0f);
  const B t = xc * B(1.44269504088896341f) + shifter;
  const B n = t - shifter;
  const I n_int = xsimd::bitwise_cast<I>(t) - I(0x4B400000);
  // ln2 = C1 + C2 with C1 short enough that n * C1 is exact.
  B r = xc - n * B(0.693359375f);
  r = r - n * B(-2.12194440e-4f);
  B p(1.9875691500e-4f);
  p = p * r + B(1.3981999507e-3f);
  p = p * r + B(8.3334519073e-3f);
  p = p * r + B(4.1665795894e-2f);
  p = p * r + B(1.6666665459e-1f);
  p = p * r + B(5.0000001201e-1f);
  p = p * (r * r) + r + B(1.0f);
  // 2^n as 2^(n/2) * 2^(n - n/2): each factor is a normal float for n in [-151, 129].
  const I half = n_int >> 1;
  const B scale0 = xsimd::bitwise_cast<B>((half + I(127)) << 23);
  const B scale1 = xsimd::bitwise_cast<B>((n_int - half + I(127)) << 23);
  const B y = p * scale0 * scale1;
  return xsimd::select(xsimd::isnan(x), x, y);  // NaN stays NaN (the clamp dropped it)
}

// exp(x) for x where a subnormal result is as good as 0 (softmax: the sum
// it joins is at least 1): 0 below -87 (e^-87 = 1.6e-38, just above the
// smallest normal float), never a subnormal, not even in a lane that is
// then dropped. An instruction that produces or reads a subnormal costs a
// microcode assist of a hundred-odd cycles on Intel cores unless the thread
// flushes them (we do not change MXCSR under the caller), and a causally
// masked attention row is half such lanes (GPT-2's mask is -3.4e38): its
// softmax ran 2.5x slower than on unmasked rows.
template <class B>
inline B exp_approx_or_zero(B x) {
  const B low(-87.0f);
  const auto below = x < low;  // false for NaN, which exp_approx passes through
  return xsimd::select(below, B(0.0f), exp_approx(xsimd::select(below, low, x)));
}

// erf(x): Norbert Juffa's erff split (the one ONNX Runtime's MLAS uses):
// |x| <= 0.921875: x + x * P(x^2); above: 1 - exp(-(t + t * Q(t))) with t =
// min(|x|, 3.925) (erf rounds to 1 beyond), sign copied from x.
template <class B>
inline B erf_approx(B x) {
  const B a = xsimd::abs(x);
  const B s = x * x;
  B small(-5.99104969e-4f);
  small = small * s + B(4.99339588e-3f);
  small = small * s + B(-2.67667342e-2f);
  small = small * s + B(1.12818025e-1f);
  small = small * s + B(-3.76124859e-1f);
  small = small * s + B(1.28379151e-1f);
  small = small * x + x;
  const B t = xsimd::min(a, B(3.925f));
  B big(1.72948930e-5f);
  big = big * t + B(-3.83208680e-4f);
  big = big * t + B(3.88393435e-3f);
  big = big * t + B(-2.42545605e-2f);
  big = big * t + B(1.06777847e-1f);
  big = big * t + B(6.34846687e-1f);
  big = big * t + B(1.28717512e-1f);
  big = big * t + t;
  big = B(1.0f) - exp_approx(-big);
  big = xsimd::copysign(big, x);
  return xsimd::select(a > B(0.921875f), big, small);
}

// tanh(x): Cephes' tanhf: an odd polynomial for |x| < 0.625, else
// 1 - 2 / (e^(2|x|) + 1) with x's sign (1 once e^(2|x|) overflows).
template <class B>
inline B tanh_approx(B x) {
  const B a = xsimd::abs(x);
  const B z = x * x;
  B small(-5.70498872745e-3f);
  small = small * z + B(2.06390887954e-2f);
  small = small * z + B(-5.37397155531e-2f);
  small = small * z + B(1.33314422036e-1f);
  small = small * z + B(-3.33332819422e-1f);
  small = small * z * x + x;
  const B e = exp_approx(a + a);
  B big = B(1.0f) - B(2.0f) / (e + B(1.0f));
  big = xsimd::copysign(big, x);
  return xsimd::select(a < B(0.625f), small, big);
}

// The logistic sigmoid with the reference's expression (kernels/activation.hpp)
// over exp_approx: the one sigmoid of the CPU kernels (cpu.unary, every
// fused epilogue), so a fused and an unfused Sigmoid give the same bits.
template <class B>
inline B sigmoid_approx(B x) {
  const B y = B(1.0f) / (B(1.0f) + exp_approx(-x));
  // A NaN input comes back as itself: the NaN the divide would return has
  // a sign that depends on the ISA's negation (AVX-512F's is 0 - x).
  return xsimd::select(xsimd::isnan(x), x, y);
}

// SiLU as Mul(x, Sigmoid(x)) rounds.
template <class B>
inline B silu_approx(B x) {
  return x * sigmoid_approx(x);
}

// GELU, the reference's expressions (kernels/reference/elementwise.cpp) with
// the vector erf / tanh.
template <class B>
inline B gelu_erf_approx(B x) {
  return B(0.5f) * x * (B(1.0f) + erf_approx(x * B(0.7071067811865476f)));
}

template <class B>
inline B gelu_tanh_approx(B x) {
  const B inner = B(0.7978845608028654f) * (x + B(0.044715f) * x * x * x);
  return B(0.5f) * x * (B(1.0f) + tanh_approx(inner));
}

}  // namespace
}  // namespace tessera::kernels::cpu
