// Helpers shared by the dense CPU variants: the NCHW <-> pixel-major
// transposes around the SGEMM, the activation mapping and argument checks.
#include <algorithm>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/dense_ops.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tessera::kernels::cpu {

void tap_range(int64_t first, int64_t dilation, int64_t k, int64_t size, int64_t& lo, int64_t& hi) {
  lo = first >= 0 ? 0 : (-first + dilation - 1) / dilation;
  hi = first > size - 1 ? 0 : std::min(k, (size - 1 - first) / dilation + 1);
  lo = std::min(lo, hi);
}

void transpose_panel(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                     int64_t ld_dst) {
  int64_t i = 0;
#if defined(__SSE2__)
  // Two or three rows into packed pixels (an RGB image's planes into the
  // interleaved rows a stem conv gathers from): four columns at a time, the
  // missing rows zero, each column stored as four floats whose surplus the
  // next column's store overwrites. The last group is scalar, so nothing
  // lands past column `cols`. One element per cycle scalar cost MobileNetV2's
  // stem about a third of its time.
  if ((rows == 2 || rows == 3) && ld_dst == rows) {
    const __m128 zero = _mm_setzero_ps();
    int64_t j = 0;
    for (; j + 4 < cols; j += 4) {
      __m128 r0 = _mm_loadu_ps(src + j);
      __m128 r1 = _mm_loadu_ps(src + ld_src + j);
      __m128 r2 = rows == 3 ? _mm_loadu_ps(src + 2 * ld_src + j) : zero;
      __m128 r3 = zero;
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* d = dst + j * rows;
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + rows, r1);
      _mm_storeu_ps(d + 2 * rows, r2);
      _mm_storeu_ps(d + 3 * rows, r3);
    }
    for (; j < cols; ++j)
      for (int64_t ii = 0; ii < rows; ++ii) dst[j * rows + ii] = src[ii * ld_src + j];
    return;
  }
  // 4×4 blocks in registers: four row loads, four column stores, where a
  // scalar loop would do one strided store per element.
  for (; i + 4 <= rows; i += 4) {
    const float* s = src + i * ld_src;
    int64_t j = 0;
    for (; j + 4 <= cols; j += 4) {
      __m128 r0 = _mm_loadu_ps(s + j);
      __m128 r1 = _mm_loadu_ps(s + ld_src + j);
      __m128 r2 = _mm_loadu_ps(s + 2 * ld_src + j);
      __m128 r3 = _mm_loadu_ps(s + 3 * ld_src + j);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* d = dst + j * ld_dst + i;
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + ld_dst, r1);
      _mm_storeu_ps(d + 2 * ld_dst, r2);
      _mm_storeu_ps(d + 3 * ld_dst, r3);
    }
    for (; j < cols; ++j)
      for (int64_t ii = 0; ii < 4; ++ii) dst[j * ld_dst + i + ii] = s[ii * ld_src + j];
  }
#endif
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

GemmActivation gemm_activation(graph::Activation activation) {
  switch (activation) {
    case graph::Activation::None:
      return GemmActivation::kNone;
    case graph::Activation::Relu:
      return GemmActivation::kRelu;
    case graph::Activation::Clip:
      return GemmActivation::kClip;
    case graph::Activation::Sigmoid:
      return GemmActivation::kSigmoid;
    case graph::Activation::Gelu:
      return GemmActivation::kGelu;
    case graph::Activation::GeluTanh:
      return GemmActivation::kGeluTanh;
    case graph::Activation::Silu:
      return GemmActivation::kSilu;
    case graph::Activation::LeakyRelu:
      return GemmActivation::kLeakyRelu;
  }
  throw Error("unknown fused activation " + std::to_string(static_cast<int>(activation)));
}

GemmEpilogue activation_epilogue(const graph::OpAttributes& attrs) {
  return GemmEpilogue{.activation = gemm_activation(attrs.activation),
                      .clip_min = attrs.clip_min,
                      .clip_max = attrs.clip_max,
                      .leaky_alpha = attrs.leaky_relu_alpha};
}

void fail_op(std::string_view variant, const graph::Operator* op, const std::string& what) {
  const std::string name = op ? op->name : std::string("?");
  throw Error(std::string(variant) + " kernel for operator '" + name + "': " + what);
}

void check_dense_tile_args(std::string_view variant, const TileArgs& args, size_t min_inputs,
                           size_t max_inputs, bool needs_prepared) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape)
    fail_op(variant, args.op, "missing operator, region or output");
  if (needs_prepared && !args.prepared)
    fail_op(variant, args.op, "the op was not prepared (prepare() was not called at load)");
  if (args.input_count < min_inputs || args.input_count > max_inputs)
    fail_op(variant, args.op,
            "expected " + std::to_string(min_inputs) + ".." + std::to_string(max_inputs) +
                " inputs, got " + std::to_string(args.input_count));
  for (size_t i = 0; i < args.input_count; ++i)
    if (!args.inputs[i].data || !args.inputs[i].shape)
      fail_op(variant, args.op, "input " + std::to_string(i) + " has no data or shape");
  if (!graph::region_inside(*args.region, *args.output.shape))
    fail_op(variant, args.op,
            "region " + graph::region_to_string(*args.region) + " is not inside the output " +
                graph::shape_to_string(*args.output.shape));
}

namespace {

int64_t attr_or(const std::vector<int64_t>& values, size_t i, int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

}  // namespace

std::optional<std::string> conv_geometry(const graph::Operator& op, const graph::Shape& x_shape,
                                         const graph::Shape& w_shape, ConvGeometry& g) {
  const size_t rank = x_shape.size();
  if ((rank != 3 && rank != 4) || w_shape.size() != rank)
    return "only 1-D and 2-D convolutions (input " + graph::shape_to_string(x_shape) + ", weight " +
           graph::shape_to_string(w_shape) + ")";
  const graph::OpAttributes& attrs = op.attrs;
  const bool is_1d = rank == 3;
  const size_t spatial = rank - 2;
  g.rank = rank;
  g.batch = x_shape[0];
  g.channels = x_shape[1];
  g.in_h = is_1d ? 1 : x_shape[2];
  g.in_w = x_shape[rank - 1];
  g.out_channels = w_shape[0];
  g.group_channels = w_shape[1];
  g.k_h = is_1d ? 1 : w_shape[2];
  g.k_w = w_shape[rank - 1];
  g.group = attrs.group;
  g.stride_h = is_1d ? 1 : attr_or(attrs.strides, 0, 1);
  g.stride_w = attr_or(attrs.strides, spatial - 1, 1);
  g.dilation_h = is_1d ? 1 : attr_or(attrs.dilations, 0, 1);
  g.dilation_w = attr_or(attrs.dilations, spatial - 1, 1);
  g.pad_top = is_1d ? 0 : attr_or(attrs.pads, 0, 0);
  g.pad_left = attr_or(attrs.pads, spatial - 1, 0);
  const int64_t pad_bottom = is_1d ? 0 : attr_or(attrs.pads, spatial, 0);
  const int64_t pad_right = attr_or(attrs.pads, 2 * spatial - 1, 0);
  if (g.group < 1 || g.channels != g.group_channels * g.group || g.out_channels % g.group != 0 ||
      g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1 || g.k_h < 1 ||
      g.k_w < 1 || g.pad_top < 0 || g.pad_left < 0 || pad_bottom < 0 || pad_right < 0)
    return "inconsistent shapes or attributes (input " + graph::shape_to_string(x_shape) +
           ", weight " + graph::shape_to_string(w_shape) + ", group " + std::to_string(g.group) +
           ")";
  const int64_t span_h = g.in_h + g.pad_top + pad_bottom - g.dilation_h * (g.k_h - 1) - 1;
  const int64_t span_w = g.in_w + g.pad_left + pad_right - g.dilation_w * (g.k_w - 1) - 1;
  if (span_h < 0 || span_w < 0) return "the kernel is larger than the padded input";
  g.out_h = span_h / g.stride_h + 1;
  g.out_w = span_w / g.stride_w + 1;
  return std::nullopt;
}

std::optional<std::string> gemm_constant_b_applies(const graph::Operator& op,
                                                   std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_applies(op, inputs)) return why;
  if (op.attrs.trans_a) return "trans_a is not supported (the dense kernel transposes A)";
  if (inputs.size() >= 3 && !inputs[2].data) return "C is not constant";
  return std::nullopt;
}

GemmWeight gemm_weight(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  const graph::Shape& b = *inputs[1].shape;
  GemmWeight w;
  w.transposed = op.attrs.trans_b;
  w.k = w.transposed ? b[1] : b[0];
  w.n = w.transposed ? b[0] : b[1];
  w.ldb = b[1];
  w.data = inputs[1].data;
  if (op.attrs.alpha != 1.0f) {
    w.copy.assign(w.data, w.data + b[0] * b[1]);
    for (float& v : w.copy) v *= op.attrs.alpha;
    w.data = w.copy.data();
  }
  return w;
}

PreparedGemmC prepare_gemm_c(const graph::Operator& op, std::span<const ConstTensorView> inputs,
                             int64_t m, int64_t n) {
  PreparedGemmC out;
  if (inputs.size() < 3) return out;
  const graph::Shape& c_shape = *inputs[2].shape;
  const float* c = inputs[2].data;
  const int64_t c_rows = c_shape.size() == 2 ? c_shape[0] : 1;
  const int64_t c_cols = c_shape.empty() ? 1 : c_shape.back();
  const float beta = op.attrs.beta;
  if (c_rows == 1) {
    out.form = PreparedGemmC::Form::kPerColumn;
    out.scaled.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) out.scaled[j] = beta * c[c_cols == 1 ? 0 : j];
  } else if (c_cols == 1) {
    out.form = PreparedGemmC::Form::kPerRow;
    out.scaled.resize(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) out.scaled[i] = beta * c[i];
  } else {
    out.form = PreparedGemmC::Form::kFull;
    out.scaled.assign(c, c + m * n);
    for (float& v : out.scaled) v *= beta;
  }
  return out;
}

}  // namespace tessera::kernels::cpu
