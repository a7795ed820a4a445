#pragma once
// The NHWC depthwise tile kernel, written once over xsimd batches and
// instantiated per ISA by conv_depthwise_<isa>.cpp, each compiled with its
// own target flags. Include it from nowhere else: everything here is in an
// anonymous namespace, so no inline function compiled for AVX-512 can be
// picked by the linker for a caller on a baseline CPU.
//
// Per output row, the columns whose whole kW window lies inside the image
// (the interior) go in blocks of P pixels × CV channel vectors, P·CV
// accumulators in registers for all the taps: each tap loads one weight
// vector per channel vector for P FMAs, and at kW = 3, stride 1 or 2, the
// compile-time offsets let the compiler load an input column once for every
// pixel of the block that reads it. Border columns run one pixel at a time
// with the out-of-image taps skipped; channels past the last whole vector
// run as scalars with the same FMA (so a lane's result does not depend on
// where a tile's channels start).
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/activation.hpp"
#include "kernels/cpu/conv_depthwise_nhwc.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_fma.hpp"

namespace tessera::kernels::cpu {
namespace {

// One tile's constants, channels already offset to the tile's first one.
struct DepthwiseContext {
  const float* weights = nullptr;  // [kH·kW] rows of the tile's channels, weight_stride apart
  const float* bias = nullptr;     // [width] (offset to c0) or null
  int64_t width = 0;               // channels in the tile
  int64_t weight_stride = 0;       // floats between the weights of taps t and t + 1
  int64_t channels = 0;            // C: the pixel stride of X, Y and R
  int64_t k_w = 0;
  int64_t row_step = 0;  // floats between input rows kh and kh + 1
  int64_t tap_step = 0;  // floats between input columns kw and kw + 1
  int64_t pix_step = 0;  // floats between the inputs of adjacent output pixels
  graph::Activation activation = graph::Activation::None;
  float clip_min = 0.0f, clip_max = 0.0f;
  float leaky_alpha = 0.0f;
};

template <bool kFma>
inline float scalar_madd(float w, float x, float acc) {
  if constexpr (kFma)
    return std::fma(w, x, acc);  // one rounding, like the vector FMA
  else
    return w * x + acc;  // the baseline ISA has no FMA: two roundings, like xsimd's
}

// The fused activation with the GEMM epilogue's arithmetic
// (kernels/cpu/gemm_activation.hpp): the same bits as conv_gemm and cpu.unary.
// ReLU and Clip are applied as each accumulator is stored. The others
// (EfficientNet's SiLU) are deferred to a pass over each finished output row
// (apply_deferred_activation): inside the store loop they were a call per
// vector with every other accumulator of the block live, and all vector
// registers are caller-saved, so each call spilled the block.
template <class Batch>
__attribute__((always_inline)) inline Batch activate_vector(Batch x, const DepthwiseContext& k) {
  switch (k.activation) {
    case graph::Activation::Relu:
      return xsimd::max(x, Batch(0.0f));
    case graph::Activation::Clip:
      return xsimd::min(xsimd::max(x, Batch(k.clip_min)), Batch(k.clip_max));
    case graph::Activation::LeakyRelu:
      return xsimd::select(x >= Batch(0.0f), x, Batch(k.leaky_alpha) * x);
    default:
      return x;  // none, or deferred
  }
}

inline float activate_scalar(float x, const DepthwiseContext& k) {
  switch (k.activation) {
    case graph::Activation::Relu:
      return std::max(x, 0.0f);
    case graph::Activation::Clip:
      return std::min(std::max(x, k.clip_min), k.clip_max);
    case graph::Activation::LeakyRelu:
      return x >= 0.0f ? x : k.leaky_alpha * x;
    default:
      return x;  // none, or deferred
  }
}

inline GemmActivation deferred_gemm_activation(graph::Activation activation) {
  switch (activation) {
    case graph::Activation::Sigmoid:
      return GemmActivation::kSigmoid;
    case graph::Activation::Gelu:
      return GemmActivation::kGelu;
    case graph::Activation::GeluTanh:
      return GemmActivation::kGeluTanh;
    case graph::Activation::Silu:
      return GemmActivation::kSilu;
    default:
      return GemmActivation::kNone;
  }
}

// The transcendental activations the GEMM microkernel defers too.
inline bool activation_deferred(graph::Activation activation) {
  return activation_is_transcendental(deferred_gemm_activation(activation));
}

// A deferred activation on `pixels` pixels (pixel stride `channels`) of
// `width` channels each, with the epilogue's arithmetic, as one span where
// the tile has all channels (lanes are independent: the same bits).
template <class Arch>
void apply_deferred_activation(graph::Activation activation, float* out, int64_t pixels,
                               int64_t width, int64_t channels) {
  const GemmActivation act = deferred_gemm_activation(activation);
  if (width == channels)
    activation_rows<Arch>(act, 0.0f, 0.0f, 0.0f, out, 0, 1, pixels * channels);
  else
    activation_rows<Arch>(act, 0.0f, 0.0f, 0.0f, out, channels, pixels, width);
}

// P output pixels × CV vectors of channels [c, c + CV·W). `in` is the input
// of tap (kh_lo, kw_lo) of the first pixel at channel 0 of the tile, `out`
// and `res` the first pixel's output and residual at channel 0. KW and SW
// are the kernel width and stride at compile time (dilation 1, every kw tap
// in bounds), or 0: taken from the context and [kw_lo, kw_hi).
template <class Arch, int P, int CV, int KW, int SW>
inline void pixel_block(const DepthwiseContext& k, const float* in, int64_t kh_lo, int64_t kh_hi,
                        int64_t kw_lo, int64_t kw_hi, int64_t c, float* out, const float* res) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int W = static_cast<int>(Batch::size);
  const int64_t pix_step = SW ? SW * k.channels : k.pix_step;
  const int64_t tap_step = KW ? k.channels : k.tap_step;
  const int64_t k_w = KW ? KW : k.k_w;
  Batch acc[P][CV];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < CV; ++v) acc[p][v] = Batch(0.0f);
  const float* in_row = in + c;
  // Compile-time kW and stride: the block's input columns of each row are
  // loaded once into registers, (P − 1)·SW + KW of them, and every tap's FMAs
  // read them there. Addressed per tap instead (the loop below), the P·KW
  // offsets, multiples of the runtime channel count, outran the general
  // registers: GCC kept them in vector registers and moved each back before
  // its FMA. 3-8% fewer cycles per FMA on MobileNetV2's 3x3 shapes (a
  // throwaway harness over depthwise_nhwc_tile, this Zen 5, three rounds).
  constexpr int kColumns = KW ? (P - 1) * SW + KW : 0;
  constexpr int kRegisters = W >= 16 ? 32 : 16;
  if constexpr (KW != 0 && (kColumns + P + 1) * CV <= kRegisters) {
    for (int64_t kh = kh_lo; kh < kh_hi; ++kh, in_row += k.row_step) {
      const float* w_row = k.weights + kh * KW * k.weight_stride + c;
      Batch x[kColumns][CV];
      const float* column = in_row;
#pragma GCC unroll 16
      for (int j = 0; j < kColumns; ++j, column += k.channels)
#pragma GCC unroll 4
        for (int v = 0; v < CV; ++v) x[j][v] = Batch::load_unaligned(column + v * W);
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw) {
        Batch w[CV];
#pragma GCC unroll 4
        for (int v = 0; v < CV; ++v)
          w[v] = Batch::load_unaligned(w_row + kw * k.weight_stride + v * W);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
          for (int v = 0; v < CV; ++v) acc[p][v] = fused_madd(w[v], x[p * SW + kw][v], acc[p][v]);
      }
    }
  } else {
    for (int64_t kh = kh_lo; kh < kh_hi; ++kh, in_row += k.row_step) {
      const float* w_row = k.weights + kh * k_w * k.weight_stride + c;
      auto tap = [&](int64_t kw) {
        Batch w[CV];
#pragma GCC unroll 4
        for (int v = 0; v < CV; ++v)
          w[v] = Batch::load_unaligned(w_row + kw * k.weight_stride + v * W);
        const float* in_tap = in_row + (kw - kw_lo) * tap_step;
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
          for (int v = 0; v < CV; ++v)
            acc[p][v] =
                fused_madd(w[v], Batch::load_unaligned(in_tap + p * pix_step + v * W), acc[p][v]);
      };
      if constexpr (KW != 0) {
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) tap(kw);
      } else {
        for (int64_t kw = kw_lo; kw < kw_hi; ++kw) tap(kw);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < CV; ++v) {
      const int64_t at = p * k.channels + c + v * W;
      Batch x = acc[p][v];
      if (k.bias) x += Batch::load_unaligned(k.bias + c + v * W);
      if (res) x += Batch::load_unaligned(res + at);
      activate_vector(x, k).store_unaligned(out + at);
    }
}

// The channels [c, width) past the last whole vector, one at a time, for
// `pixels` pixels; the same operations as pixel_block in scalar form.
template <bool kFma>
inline void scalar_tail(const DepthwiseContext& k, const float* in, int64_t pixels, int64_t kh_lo,
                        int64_t kh_hi, int64_t kw_lo, int64_t kw_hi, int64_t c, float* out,
                        const float* res) {
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t ch = c; ch < k.width; ++ch) {
      float acc = 0.0f;
      const float* in_row = in + p * k.pix_step + ch;
      for (int64_t kh = kh_lo; kh < kh_hi; ++kh, in_row += k.row_step)
        for (int64_t kw = kw_lo; kw < kw_hi; ++kw)
          acc = scalar_madd<kFma>(k.weights[(kh * k.k_w + kw) * k.weight_stride + ch],
                                  in_row[(kw - kw_lo) * k.tap_step], acc);
      const int64_t at = p * k.channels + ch;
      if (k.bias) acc += k.bias[ch];
      if (res) acc += res[at];
      out[at] = activate_scalar(acc, k);
    }
}

// P pixels, all channels of the tile: CV vectors at a time, then single
// vectors, then scalars.
template <class Arch, bool kFma, int P, int CV, int KW, int SW>
inline void pixels_all_channels(const DepthwiseContext& k, const float* in, int64_t kh_lo,
                                int64_t kh_hi, int64_t kw_lo, int64_t kw_hi, float* out,
                                const float* res) {
  constexpr int W = static_cast<int>(xsimd::batch<float, Arch>::size);
  int64_t c = 0;
  for (; c + CV * W <= k.width; c += CV * W)
    pixel_block<Arch, P, CV, KW, SW>(k, in, kh_lo, kh_hi, kw_lo, kw_hi, c, out, res);
  if constexpr (CV > 1)
    for (; c + W <= k.width; c += W)
      pixel_block<Arch, P, 1, KW, SW>(k, in, kh_lo, kh_hi, kw_lo, kw_hi, c, out, res);
  if (c < k.width) scalar_tail<kFma>(k, in, P, kh_lo, kh_hi, kw_lo, kw_hi, c, out, res);
}

// The interior columns [ow, ow_end) of one row: blocks of P pixels, then
// the last few one by one, all with every kw tap in bounds.
template <class Arch, bool kFma, int P, int CV, int KW, int SW>
inline void interior_run(const DepthwiseContext& k, const float* in, int64_t kh_lo, int64_t kh_hi,
                         int64_t count, float* out, const float* res) {
  const int64_t k_w = KW ? KW : k.k_w;
  const int64_t pix_step = SW ? SW * k.channels : k.pix_step;
  int64_t i = 0;
  for (; i + P <= count; i += P)
    pixels_all_channels<Arch, kFma, P, CV, KW, SW>(k, in + i * pix_step, kh_lo, kh_hi, 0, k_w,
                                                   out + i * k.channels,
                                                   res ? res + i * k.channels : nullptr);
  for (; i < count; ++i)
    pixels_all_channels<Arch, kFma, 1, CV, KW, SW>(k, in + i * pix_step, kh_lo, kh_hi, 0, k_w,
                                                   out + i * k.channels,
                                                   res ? res + i * k.channels : nullptr);
}

// The whole tile. P and CV: the register block (P·CV accumulators).
template <class Arch, bool kFma, int P, int CV>
void depthwise_nhwc_tile_impl(const DepthwiseNhwcTile& t) {
  const ConvGeometry& g = *t.g;
  const int64_t channels = g.channels;
  DepthwiseContext k;
  k.weights = t.weights;
  k.bias = t.bias ? t.bias + t.c0 : nullptr;
  k.width = t.c1 - t.c0;
  k.weight_stride = t.weight_stride;
  k.channels = channels;
  k.k_w = g.k_w;
  k.row_step = g.dilation_h * g.in_w * channels;
  k.tap_step = g.dilation_w * channels;
  k.pix_step = g.stride_w * channels;
  k.activation = t.attrs->activation;
  k.clip_min = t.attrs->clip_min;
  k.clip_max = t.attrs->clip_max;
  k.leaky_alpha = t.attrs->leaky_relu_alpha;

  // The interior: output columns whose kW taps are all inside the image.
  const int64_t interior_lo =
      std::min(g.out_w, (g.pad_left + g.stride_w - 1) / g.stride_w);  // ceil(pad / stride)
  const int64_t last_start = g.in_w - 1 + g.pad_left - (g.k_w - 1) * g.dilation_w;
  const int64_t interior_hi = last_start < 0 ? 0 : std::min(g.out_w, last_start / g.stride_w + 1);
  const int64_t lo = std::clamp(interior_lo, t.ow0, t.ow1);
  const int64_t hi = std::clamp(interior_hi, lo, t.ow1);
  const bool kw3 = g.k_w == 3 && g.dilation_w == 1;
  // EfficientNet's 5x5 layers: its columns in registers too (pixel_block).
  const bool kw5 = g.k_w == 5 && g.dilation_w == 1;

  const float* image = t.x + t.n * g.in_h * g.in_w * channels + t.c0;
  for (int64_t oh = t.oh0; oh < t.oh1; ++oh) {
    const int64_t ih_first = oh * g.stride_h - g.pad_top;
    int64_t kh_lo = 0, kh_hi = 0;
    tap_range(ih_first, g.dilation_h, g.k_h, g.in_h, kh_lo, kh_hi);
    const int64_t first_pixel = (t.n * g.out_h + oh) * g.out_w;
    float* out_row = t.y + first_pixel * channels + t.c0;
    const float* res_row = t.residual ? t.residual + first_pixel * channels + t.c0 : nullptr;
    // Input row of tap kh_lo (any row when no tap is in bounds: not read).
    const float* in_row =
        image + (kh_lo < kh_hi ? (ih_first + kh_lo * g.dilation_h) : 0) * g.in_w * channels;
    auto column_input = [&](int64_t ow, int64_t kw_lo) {
      return in_row + (ow * g.stride_w - g.pad_left + kw_lo * g.dilation_w) * channels;
    };
    auto border_pixel = [&](int64_t ow) {
      int64_t kw_lo = 0, kw_hi = 0;
      tap_range(ow * g.stride_w - g.pad_left, g.dilation_w, g.k_w, g.in_w, kw_lo, kw_hi);
      // No tap in bounds: any in-image address, never read.
      const float* in = kw_lo < kw_hi ? column_input(ow, kw_lo) : in_row;
      pixels_all_channels<Arch, kFma, 1, CV, 0, 0>(k, in, kh_lo, kh_hi, kw_lo, kw_hi,
                                                   out_row + ow * channels,
                                                   res_row ? res_row + ow * channels : nullptr);
    };
    for (int64_t ow = t.ow0; ow < lo; ++ow) border_pixel(ow);
    if (hi > lo) {
      const float* in = column_input(lo, 0);
      float* out = out_row + lo * channels;
      const float* res = res_row ? res_row + lo * channels : nullptr;
      if (kw3 && g.stride_w == 1)
        interior_run<Arch, kFma, P, CV, 3, 1>(k, in, kh_lo, kh_hi, hi - lo, out, res);
      else if (kw3 && g.stride_w == 2)
        interior_run<Arch, kFma, P, CV, 3, 2>(k, in, kh_lo, kh_hi, hi - lo, out, res);
      else if (kw5 && g.stride_w == 1)
        interior_run<Arch, kFma, P, CV, 5, 1>(k, in, kh_lo, kh_hi, hi - lo, out, res);
      else if (kw5 && g.stride_w == 2)
        interior_run<Arch, kFma, P, CV, 5, 2>(k, in, kh_lo, kh_hi, hi - lo, out, res);
      else
        interior_run<Arch, kFma, P, CV, 0, 0>(k, in, kh_lo, kh_hi, hi - lo, out, res);
    }
    for (int64_t ow = hi; ow < t.ow1; ++ow) border_pixel(ow);
    if (activation_deferred(k.activation))
      apply_deferred_activation<Arch>(k.activation, out_row + t.ow0 * channels, t.ow1 - t.ow0,
                                      k.width, channels);
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
