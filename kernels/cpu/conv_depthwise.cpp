// "cpu.conv_depthwise": depthwise convolution (group == C == OC), direct.
// NCHW: per channel plane, the input window is copied zero-padded, then each
// (kh, kw) tap is one vectorised multiply-add loop over the accumulators.
// NHWC (input, output and residual all NHWC: LayoutSupport::Uniform): blocks
// of output pixels × channel vectors in registers, the weights transposed to
// [kH·kW, C] per tile (conv_depthwise_nhwc_impl.hpp, one build per ISA).
// The NCHW plane loop is compiled for AVX-512, AVX2 and the baseline (GCC's
// target_clones): the loader picks one clone for the CPU once, at start-up.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "graph/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/cpu/aligned_scratch.hpp"
#include "kernels/cpu/conv_depthwise_nhwc.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.conv_depthwise";

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TESSERA_DEPTHWISE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_DEPTHWISE_CLONES
#endif

// One (image, channel) plane of a tile: output rows [oh0, oh1) × columns
// [ow0, ow1).
struct DepthwisePlane {
  const float* plane = nullptr;   // the channel's input, in_h × in_w
  const float* kernel = nullptr;  // k_h × k_w weights
  float bias = 0.0f;
  const float* residual = nullptr;  // the channel's fused residual plane, or null
  float* out = nullptr;             // the channel's output plane, out_h × out_w
  const ConvGeometry* g = nullptr;
  const graph::OpAttributes* attrs = nullptr;
  int64_t oh0 = 0, oh1 = 0, ow0 = 0, ow1 = 0;
  float* window = nullptr;  // scratch: the input window, zero-padded
  float* acc = nullptr;     // scratch: accumulators
};

// Bias-added accumulators → output, with the fused activation; the switch
// is outside the loops so ReLU and Clip vectorise (kernels/activation.hpp
// semantics).
inline void store_activated(const float* __restrict acc, float* __restrict out, int64_t count,
                            const graph::OpAttributes& attrs) {
  switch (attrs.activation) {
    case graph::Activation::Relu:
      for (int64_t i = 0; i < count; ++i) out[i] = acc[i] > 0.0f ? acc[i] : 0.0f;
      return;
    case graph::Activation::Clip: {
      const float lo = attrs.clip_min, hi = attrs.clip_max;
      for (int64_t i = 0; i < count; ++i) out[i] = std::min(std::max(acc[i], lo), hi);
      return;
    }
    case graph::Activation::None:
    case graph::Activation::Sigmoid:
    case graph::Activation::Gelu:
    case graph::Activation::GeluTanh:
    case graph::Activation::Silu:
    case graph::Activation::LeakyRelu:
      std::copy(acc, acc + count, out);
      apply_activation_span(activation_epilogue(attrs), out, count);
      return;
  }
}

// The window the plane's outputs read, copied once with its padding as
// zeros, so the tap loops need no bounds checks. At unit stride the rows of
// the window are one flat array: output (r, i) is acc[r·cols_in + i] and
// tap (kh, kw) reads window[that + kh·dh·cols_in + kw·dw], so each tap is
// one contiguous loop over all rows (the columns past the row's end are
// computed and dropped). One call per plane: the clone is picked once, and
// there is no per-row call overhead on narrow planes.
TESSERA_DEPTHWISE_CLONES
void depthwise_plane(const DepthwisePlane& p) {
  const ConvGeometry& g = *p.g;
  const int64_t rows = p.oh1 - p.oh0, cols = p.ow1 - p.ow0;
  const int64_t rows_in = (rows - 1) * g.stride_h + (g.k_h - 1) * g.dilation_h + 1;
  const int64_t cols_in = (cols - 1) * g.stride_w + (g.k_w - 1) * g.dilation_w + 1;
  const int64_t ih0 = p.oh0 * g.stride_h - g.pad_top, iw0 = p.ow0 * g.stride_w - g.pad_left;
  const int64_t j_lo = std::clamp<int64_t>(-iw0, 0, cols_in);
  const int64_t j_hi = std::clamp<int64_t>(g.in_w - iw0, j_lo, cols_in);
  float* __restrict window = p.window;
  for (int64_t r = 0; r < rows_in; ++r) {
    float* row = window + r * cols_in;
    const int64_t ih = ih0 + r;
    if (ih < 0 || ih >= g.in_h) {
      std::fill(row, row + cols_in, 0.0f);
      continue;
    }
    std::fill(row, row + j_lo, 0.0f);
    std::copy(p.plane + ih * g.in_w + iw0 + j_lo, p.plane + ih * g.in_w + iw0 + j_hi, row + j_lo);
    std::fill(row + j_hi, row + cols_in, 0.0f);
  }

  float* __restrict acc = p.acc;
  if (g.stride_h == 1 && g.stride_w == 1) {
    const int64_t length = (rows - 1) * cols_in + cols;
    std::fill(acc, acc + length, p.bias);
    // Blocks of accumulators small enough to stay in L1 across the taps.
    constexpr int64_t kBlock = 1024;
    for (int64_t q0 = 0; q0 < length; q0 += kBlock) {
      const int64_t q1 = std::min(length, q0 + kBlock);
      for (int64_t kh = 0; kh < g.k_h; ++kh)
        for (int64_t kw = 0; kw < g.k_w; ++kw) {
          const float w = p.kernel[kh * g.k_w + kw];
          const float* __restrict in = window + kh * g.dilation_h * cols_in + kw * g.dilation_w;
          for (int64_t q = q0; q < q1; ++q) acc[q] += w * in[q];
        }
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* out = p.out + (p.oh0 + r) * g.out_w + p.ow0;
      float* acc_row = acc + r * cols_in;
      if (p.residual) {
        const float* res = p.residual + (p.oh0 + r) * g.out_w + p.ow0;
        for (int64_t i = 0; i < cols; ++i) acc_row[i] += res[i];
      }
      store_activated(acc_row, out, cols, *p.attrs);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc, acc + cols, p.bias);
    for (int64_t kh = 0; kh < g.k_h; ++kh)
      for (int64_t kw = 0; kw < g.k_w; ++kw) {
        const float w = p.kernel[kh * g.k_w + kw];
        const float* __restrict in =
            window + (r * g.stride_h + kh * g.dilation_h) * cols_in + kw * g.dilation_w;
        const int64_t stride = g.stride_w;
        for (int64_t i = 0; i < cols; ++i) acc[i] += w * in[i * stride];
      }
    float* out = p.out + (p.oh0 + r) * g.out_w + p.ow0;
    if (p.residual) {
      const float* res = p.residual + (p.oh0 + r) * g.out_w + p.ow0;
      for (int64_t i = 0; i < cols; ++i) acc[i] += res[i];
    }
    store_activated(acc, out, cols, *p.attrs);
  }
}

std::optional<std::string> applies_with(const graph::Operator& op,
                                        std::span<const ConstTensorView> inputs, ConvGeometry& g) {
  if (op.type != graph::OpType::Conv) return "not a Conv";
  if (auto why = refuse_fused_input_scale(op)) return why;
  if (auto why = refuse_fused_expand(op)) return why;
  const size_t max_inputs = op.attrs.fused_residual ? 4 : 3;
  if (inputs.size() < 2 || inputs.size() > max_inputs)
    return "expected 2 to " + std::to_string(max_inputs) + " inputs";
  for (const ConstTensorView& input : inputs)
    if (!input.shape) return "an input has no shape";
  if (auto why = conv_geometry(op, *inputs[0].shape, *inputs[1].shape, g)) return why;
  if (g.group != g.channels || g.out_channels != g.channels)
    return "not depthwise (group " + std::to_string(g.group) + ", C " + std::to_string(g.channels) +
           ", OC " + std::to_string(g.out_channels) + "; needs group == C == OC)";
  if (inputs.size() >= 3 && *inputs[2].shape != graph::Shape{g.out_channels})
    return "bias shape " + graph::shape_to_string(*inputs[2].shape) + " is not [OC]";
  if (op.attrs.fused_residual && inputs.size() != 4) return "fused residual without its input";
  return std::nullopt;
}

// The width of a copy of an NHWC tile's input rows padded with zero columns
// that the tile's columns [ow0, ow1) are run over, or nullopt: run them in
// place. Border columns (those whose kW taps overhang the image) go one
// pixel at a time through the runtime-kW loop. For windows of 5 or more
// columns whose border columns are a quarter of the tile or more the copy
// costs less: EfficientNet-B0's 5x5 convs on 7x7x1152 maps 75.1-76.6 ->
// 67.6-69.3 us, on 14x14x672 123.9-126.5 -> 117.2-120.6 (1 thread, tessera
// run --profile, this Zen 5). Under a 3x3 window the copy cost more than the
// border pixels: MobileNetV2's 7x7x960 convs 14.5 -> 21 us.
std::optional<int64_t> padded_width(const ConvGeometry& g, int64_t ow0, int64_t ow1) {
  if (g.dilation_w != 1 || g.k_w < 5 || ow1 <= ow0) return std::nullopt;
  const int64_t last = (ow1 - 1) * g.stride_w - g.pad_left + g.k_w - 1;
  int64_t border = 0;
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    const int64_t iw = ow * g.stride_w - g.pad_left;
    border += iw < 0 || iw + g.k_w > g.in_w;
  }
  if (border * 4 < ow1 - ow0) return std::nullopt;
  // Columns from -pad_left to past the last tap the tile reads.
  return g.pad_left + std::max(g.in_w, last + 1);
}

// out[tap·(c1 − c0) + ch − c0] = w[ch·taps + tap] for channels [c0, c1).
void transpose_tap_major(const float* w, int64_t taps, int64_t c0, int64_t c1, float* out) {
  const int64_t width = c1 - c0;
  for (int64_t ch = 0; ch < width; ++ch)
    for (int64_t tap = 0; tap < taps; ++tap) out[tap * width + ch] = w[(c0 + ch) * taps + tap];
}

// W's channels [c0, c1) tap-major in a per-thread buffer (a W that is not
// a constant, so not prepared).
const float* depthwise_tap_major_weights(const float* w, int64_t taps, int64_t c0, int64_t c1) {
  // 64-byte aligned: from a std::vector (16-byte aligned) a third of the
  // 3x3 NHWC kernel's vector loads, the weights', split across two cache
  // lines.
  thread_local AlignedScratch scratch;
  float* transposed = scratch.at_least(taps * (c1 - c0));
  transpose_tap_major(w, taps, c0, c1, transposed);
  return transposed;
}

}  // namespace

void depthwise_nhwc_tile(const DepthwiseNhwcTile& t) {
  switch (gemm_isa()) {
    case GemmIsa::kAvx512:
      depthwise_nhwc_tile_avx512(t);
      return;
    case GemmIsa::kAvx2:
      depthwise_nhwc_tile_avx2(t);
      return;
    case GemmIsa::kPortable:
      depthwise_nhwc_tile_portable(t);
      return;
  }
}

TapMajorWeights tap_major_weights(const float* w, int64_t taps, int64_t channels) {
  TapMajorWeights t;
  t.channels = channels;
  if (!w) return t;
  t.data.reset(allocate_aligned_floats(static_cast<size_t>(taps * channels)));
  transpose_tap_major(w, taps, 0, channels, t.data.get());
  return t;
}

void set_tile_weights(DepthwiseNhwcTile& t, const TapMajorWeights& prepared, const float* w,
                      int64_t taps) {
  if (prepared.data) {
    t.weights = prepared.data.get() + t.c0;
    t.weight_stride = prepared.channels;
  } else {
    t.weights = depthwise_tap_major_weights(w, taps, t.c0, t.c1);
    t.weight_stride = t.c1 - t.c0;
  }
}

PreparedOp prepare_conv_depthwise(const graph::Operator& op,
                                  std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  if (auto why = applies_with(op, inputs, g)) fail_op(kVariant, &op, *why);
  return std::make_shared<TapMajorWeights>(
      tap_major_weights(inputs[1].data, g.k_h * g.k_w, g.channels));
}

std::optional<std::string> conv_depthwise_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  return applies_with(op, inputs, g);
}

void conv_depthwise(const TileArgs& args) {
  check_dense_tile_args(kVariant, args, 2, args.op && args.op->attrs.fused_residual ? 4 : 3,
                        /*needs_prepared=*/true);
  ConvGeometry g;
  const std::span<const ConstTensorView> inputs(args.inputs, args.input_count);
  if (auto why = applies_with(*args.op, inputs, g)) fail_op(kVariant, args.op, *why);
  const graph::Shape& y_shape = *args.output.shape;
  const bool is_1d = g.rank == 3;
  if (y_shape.size() != g.rank || y_shape[0] != g.batch || y_shape[1] != g.out_channels ||
      y_shape[g.rank - 1] != g.out_w || (!is_1d && y_shape[2] != g.out_h))
    fail_op(kVariant, args.op, "output shape " + graph::shape_to_string(y_shape) + " is wrong");
  const float* residual = args.input_count == 4 ? args.inputs[3].data : nullptr;
  if (residual && *args.inputs[3].shape != y_shape)
    fail_op(kVariant, args.op,
            "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                " differs from the output shape " + graph::shape_to_string(y_shape));
  // Uniform layouts: X, Y and the residual all NCHW or all NHWC.
  const bool nhwc = g.rank == 4 && args.output.layout == graph::Layout::NHWC;
  const auto layout_of = [&](const ConstTensorView& v) {
    return g.rank == 4 ? v.layout : graph::Layout::NCHW;
  };
  const graph::Layout want = nhwc ? graph::Layout::NHWC : graph::Layout::NCHW;
  if (layout_of(args.inputs[0]) != want || (residual && layout_of(args.inputs[3]) != want))
    fail_op(kVariant, args.op, "input, output and residual must share one layout (NCHW or NHWC)");
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  const float* x = args.inputs[0].data;
  const float* w = args.inputs[1].data;
  const float* bias = args.input_count >= 3 ? args.inputs[2].data : nullptr;
  if (nhwc) {
    DepthwiseNhwcTile t;
    t.x = x;
    t.bias = bias;
    t.residual = residual;
    t.y = args.output.data;
    t.g = &g;
    t.attrs = &args.op->attrs;
    t.c0 = r.begin[1], t.c1 = r.end[1];
    t.oh0 = r.begin[2], t.oh1 = r.end[2];
    t.ow0 = r.begin[3], t.ow1 = r.end[3];
    set_tile_weights(t, *static_cast<const TapMajorWeights*>(args.prepared), w, g.k_h * g.k_w);
    const std::optional<int64_t> width = padded_width(g, t.ow0, t.ow1);
    if (!width) {
      for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
        t.n = n;
        depthwise_nhwc_tile(t);
      }
      return;
    }
    // The tile's input rows, copied with the padding columns as zeros: the
    // conv over them has no padding left or right, so every column is an
    // interior one. Out-of-image taps then add w·0 to the sums, which
    // leaves them as they were (only an all-zero sum's sign could differ).
    const int64_t ih_lo = std::clamp<int64_t>(t.oh0 * g.stride_h - g.pad_top, 0, g.in_h);
    const int64_t ih_hi = std::clamp<int64_t>(
        (t.oh1 - 1) * g.stride_h - g.pad_top + (g.k_h - 1) * g.dilation_h + 1, ih_lo, g.in_h);
    ConvGeometry rows_g = g;
    rows_g.batch = 1;
    rows_g.in_h = ih_hi - ih_lo;
    rows_g.pad_top = g.pad_top + ih_lo;
    rows_g.in_w = *width;
    rows_g.pad_left = 0;
    t.g = &rows_g;
    t.n = 0;
    const int64_t c = g.channels, plane = g.out_h * g.out_w * c;
    thread_local AlignedScratch scratch;
    float* rows = scratch.at_least(std::max<int64_t>(1, rows_g.in_h * *width * c));
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
      const float* image = x + n * g.in_h * g.in_w * c;
      for (int64_t ih = ih_lo; ih < ih_hi; ++ih) {
        float* row = rows + (ih - ih_lo) * *width * c;
        std::fill(row, row + g.pad_left * c, 0.0f);
        std::memcpy(row + g.pad_left * c, image + ih * g.in_w * c,
                    static_cast<size_t>(g.in_w * c) * sizeof(float));
        std::fill(row + (g.pad_left + g.in_w) * c, row + *width * c, 0.0f);
      }
      t.x = rows;
      t.y = args.output.data + n * plane;
      t.residual = residual ? residual + n * plane : nullptr;
      depthwise_nhwc_tile(t);
    }
    return;
  }
  DepthwisePlane p;
  p.g = &g;
  p.attrs = &args.op->attrs;
  p.oh0 = is_1d ? 0 : r.begin[2];
  p.oh1 = is_1d ? 1 : r.end[2];
  p.ow0 = r.begin[g.rank - 1];
  p.ow1 = r.end[g.rank - 1];
  const int64_t rows = p.oh1 - p.oh0, cols = p.ow1 - p.ow0;
  const int64_t rows_in = (rows - 1) * g.stride_h + (g.k_h - 1) * g.dilation_h + 1;
  const int64_t cols_in = (cols - 1) * g.stride_w + (g.k_w - 1) * g.dilation_w + 1;
  // Per-thread scratch, grown on first use, never per call.
  thread_local std::vector<float> window, acc;
  p.window = grown(window, rows_in * cols_in);
  p.acc = grown(acc, rows * cols_in);
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      p.plane = x + (n * g.channels + c) * g.in_h * g.in_w;
      p.kernel = w + c * g.k_h * g.k_w;
      p.bias = bias ? bias[c] : 0.0f;
      p.out = args.output.data + (n * g.out_channels + c) * g.out_h * g.out_w;
      p.residual = residual ? residual + (n * g.out_channels + c) * g.out_h * g.out_w : nullptr;
      depthwise_plane(p);
    }
}

}  // namespace tessera::kernels::cpu
