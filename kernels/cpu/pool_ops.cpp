// "cpu.maxpool", "cpu.average_pool" and "cpu.global_average_pool". NCHW:
// MaxPool splits each
// output row into the interior, where every tap of the window lies inside
// the input row, and the borders: the interior is one branch-free max loop
// per tap over the output width (vectorised; strided loads when stride > 1),
// the borders take the reference's bounds-checked path. Taps are visited in
// the reference's order with its comparison, so results are bitwise equal.
// The row loops are compiled for AVX-512, AVX2 and the baseline (GCC
// target_clones, as in conv_depthwise.cpp).
// NHWC: MaxPool (input and output NHWC: LayoutSupport::Uniform) keeps one
// output pixel's channels as the vector and visits the in-bounds taps in the
// reference's order; AveragePool and GlobalAveragePool sum the pixels in
// the reference's order with the channels as the vector, so they are bitwise
// equal to it. (NCHW AveragePool sums each window in the reference's order.)
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "graph/error.hpp"
#include "kernels/cpu/simple_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TESSERA_POOL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_POOL_CLONES
#endif

constexpr std::string_view kMaxPool = "cpu.maxpool";
constexpr std::string_view kAveragePool = "cpu.average_pool";
constexpr std::string_view kGlobalAveragePool = "cpu.global_average_pool";

[[noreturn]] void fail(const TileArgs& args, std::string_view variant, const std::string& what) {
  const std::string name = args.op ? args.op->name : std::string("?");
  throw Error(std::string(variant) + " kernel for operator '" + name + "': " + what);
}

void check_args(const TileArgs& args, std::string_view variant) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape ||
      args.input_count != 1 || !args.inputs[0].data || !args.inputs[0].shape)
    fail(args, variant, "missing operator, region, output or input");
  if (!graph::region_inside(*args.region, *args.output.shape))
    fail(args, variant,
         "region " + graph::region_to_string(*args.region) + " is not inside the output " +
             graph::shape_to_string(*args.output.shape));
}

int64_t attr_at(const std::vector<int64_t>& values, size_t i, int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

// A 1-D or 2-D pooling problem seen as 2-D (H = 1 for 1-D).
struct PoolGeometry {
  int64_t channels = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

std::optional<std::string> pool_reason(const graph::Operator& op, const graph::Shape& x,
                                       const graph::Shape* y) {
  const size_t rank = x.size();
  if (rank != 3 && rank != 4) return "runs 1-D and 2-D pooling only";
  if (op.attrs.kernel_shape.size() != rank - 2) return "kernel_shape does not match the input rank";
  if (y && (y->size() != rank || (*y)[0] != x[0] || (*y)[1] != x[1]))
    return "output shape does not fit the input";
  return std::nullopt;
}

PoolGeometry pool_geometry(const graph::Operator& op, const graph::Shape& x,
                           const graph::Shape& y) {
  const graph::OpAttributes& a = op.attrs;
  const bool is_1d = x.size() == 3;
  const size_t spatial = x.size() - 2;
  PoolGeometry g;
  g.channels = x[1];
  g.in_h = is_1d ? 1 : x[2];
  g.in_w = x.back();
  g.out_h = is_1d ? 1 : y[2];
  g.out_w = y.back();
  g.kernel_h = is_1d ? 1 : a.kernel_shape[0];
  g.kernel_w = a.kernel_shape[spatial - 1];
  g.stride_h = is_1d ? 1 : attr_at(a.strides, 0, 1);
  g.stride_w = attr_at(a.strides, spatial - 1, 1);
  g.dilation_h = is_1d ? 1 : attr_at(a.dilations, 0, 1);
  g.dilation_w = attr_at(a.dilations, spatial - 1, 1);
  g.pad_top = is_1d ? 0 : attr_at(a.pads, 0, 0);
  g.pad_left = attr_at(a.pads, spatial - 1, 0);
  g.pad_bottom = is_1d ? 0 : attr_at(a.pads, spatial, 0);
  g.pad_right = attr_at(a.pads, 2 * spatial - 1, 0);
  return g;
}

// Output columns [ow0, ow1) of output row `oh` of one plane.
TESSERA_POOL_CLONES
void max_pool_row(const float* __restrict plane, float* __restrict out_row, const PoolGeometry& g,
                  int64_t oh, int64_t ow0, int64_t ow1) {
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  const int64_t sw = g.stride_w, dw = g.dilation_w, pl = g.pad_left;
  // Interior: ow·sw − pl >= 0 and ow·sw − pl + (kw−1)·dw <= in_w − 1.
  const int64_t last_tap = (g.kernel_w - 1) * dw;
  int64_t lo = (pl + sw - 1) / sw;
  const int64_t hi_num = g.in_w - 1 - last_tap + pl;
  int64_t hi = hi_num < 0 ? 0 : hi_num / sw + 1;
  lo = std::clamp(lo, ow0, ow1);
  hi = std::clamp(hi, lo, ow1);
  // The borders: the reference's loop, padding skipped.
  auto border = [&](int64_t ow) {
    float best = kLowest;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = ow * sw - pl + kw * dw;
        if (iw < 0 || iw >= g.in_w) continue;
        const float v = plane[ih * g.in_w + iw];
        if (v > best) best = v;
      }
    }
    out_row[ow] = best;
  };
  for (int64_t ow = ow0; ow < lo; ++ow) border(ow);
  for (int64_t ow = hi; ow < ow1; ++ow) border(ow);
  if (lo == hi) return;
  for (int64_t ow = lo; ow < hi; ++ow) out_row[ow] = kLowest;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const int64_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
    if (ih < 0 || ih >= g.in_h) continue;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      // Input column of output ow for this tap: ow·sw + shift, never < 0 here.
      const float* row = plane + ih * g.in_w;
      const int64_t shift = kw * dw - pl;
      if (sw == 1) {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const float v = row[ow + shift];
          out_row[ow] = v > out_row[ow] ? v : out_row[ow];
        }
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const float v = row[ow * sw + shift];
          out_row[ow] = v > out_row[ow] ? v : out_row[ow];
        }
      }
    }
  }
}

// A plane's sum in 16 fixed lanes, then pairwise: vectorisable without
// reassociation, and the same for every tiling.
// Planes under 64 elements (e.g. 7×7) are summed in order, as the reference
// does: there the lanes' reduction costs more than it saves.
TESSERA_POOL_CLONES
float plane_sum(const float* __restrict x, int64_t n) {
  if (n < 64) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    return sum;
  }
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
  for (int j = 0; i + j < n; ++j) lanes[j] += x[i + j];
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  return lanes[0];
}

// NHWC: output pixels [ow0, ow1) of output row `oh` of image `n`, channels
// [c0, c1). `x` and `y` point at the whole tensors.
TESSERA_POOL_CLONES
void max_pool_nhwc_row(const float* __restrict x, float* __restrict y, const PoolGeometry& g,
                       int64_t n, int64_t oh, int64_t ow0, int64_t ow1, int64_t c0, int64_t c1) {
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  const int64_t c = g.channels, width = c1 - c0;
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    float* __restrict out = y + ((n * g.out_h + oh) * g.out_w + ow) * c + c0;
    for (int64_t i = 0; i < width; ++i) out[i] = kLowest;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const int64_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const int64_t iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
        if (iw < 0 || iw >= g.in_w) continue;
        const float* __restrict in = x + ((n * g.in_h + ih) * g.in_w + iw) * c + c0;
        for (int64_t i = 0; i < width; ++i) out[i] = in[i] > out[i] ? in[i] : out[i];
      }
    }
  }
}

// NHWC: out[i] = mean over the image's pixels of channel c0 + i, summed in
// pixel order (the reference's order).
TESSERA_POOL_CLONES
void global_average_nhwc(const float* __restrict image, int64_t pixels, int64_t channels,
                         int64_t c0, int64_t c1, float* __restrict out) {
  const int64_t width = c1 - c0;
  for (int64_t i = 0; i < width; ++i) out[i] = 0.0f;
  for (int64_t p = 0; p < pixels; ++p) {
    const float* __restrict px = image + p * channels + c0;
    for (int64_t i = 0; i < width; ++i) out[i] += px[i];
  }
  const float count = static_cast<float>(pixels);
  for (int64_t i = 0; i < width; ++i) out[i] /= count;
}

// An AveragePool window along one axis, as ONNX Runtime (and the reference)
// takes it: the end clipped to the padded extent (that size is the
// count_include_pad divisor), then both ends to the input.
struct AverageWindow {
  int64_t lo = 0, hi = 0, padded = 0;
};

AverageWindow average_window(int64_t o, int64_t stride, int64_t pad_begin, int64_t kernel,
                             int64_t in, int64_t pad_end) {
  const int64_t start = o * stride - pad_begin;
  const int64_t end = std::min(start + kernel, in + pad_end);
  return {std::max<int64_t>(start, 0), std::min(end, in), end - start};
}

float average_divisor(const AverageWindow& h, const AverageWindow& w, bool count_include_pad) {
  return static_cast<float>(count_include_pad ? h.padded * w.padded
                                              : (h.hi - h.lo) * (w.hi - w.lo));
}

// NHWC AveragePool: output pixels [ow0, ow1) of output row `oh` of image
// `n`, channels [c0, c1). Each window is summed in the reference's order
// (rows, then columns) into the output, the channels as the vector, as
// global_average_nhwc does. (Blocks of 64 channels summed in a local array
// ran 0.225 ms per EfficientNet-B0 run against 0.175 for its squeeze pools:
// GCC kept the array on the stack.)
TESSERA_POOL_CLONES
void average_pool_nhwc_row(const float* __restrict x, float* __restrict y, const PoolGeometry& g,
                           bool count_include_pad, int64_t n, int64_t oh, int64_t ow0, int64_t ow1,
                           int64_t c0, int64_t c1) {
  const int64_t c = g.channels, width = c1 - c0;
  const AverageWindow wh =
      average_window(oh, g.stride_h, g.pad_top, g.kernel_h, g.in_h, g.pad_bottom);
  for (int64_t ow = ow0; ow < ow1; ++ow) {
    const AverageWindow ww =
        average_window(ow, g.stride_w, g.pad_left, g.kernel_w, g.in_w, g.pad_right);
    float* __restrict out = y + ((n * g.out_h + oh) * g.out_w + ow) * c + c0;
    for (int64_t i = 0; i < width; ++i) out[i] = 0.0f;
    for (int64_t ih = wh.lo; ih < wh.hi; ++ih)
      for (int64_t iw = ww.lo; iw < ww.hi; ++iw) {
        const float* __restrict in = x + ((n * g.in_h + ih) * g.in_w + iw) * c + c0;
        for (int64_t i = 0; i < width; ++i) out[i] += in[i];
      }
    const float divisor = average_divisor(wh, ww, count_include_pad);
    for (int64_t i = 0; i < width; ++i) out[i] /= divisor;
  }
}

bool is_nhwc(const graph::Shape& shape, graph::Layout layout) {
  return shape.size() == 4 && layout == graph::Layout::NHWC;
}

// What cpu.maxpool and cpu.average_pool check and read of a tile before
// their loops: the geometry, the tile's output rows [oh0, oh1) and columns
// [ow0, ow1), and whether it is NHWC (input and output alike, or a
// one-pixel output, which has the same bytes either way). Nothing for an
// empty region.
struct PoolTile {
  PoolGeometry g;
  int64_t oh0 = 0, oh1 = 0, ow0 = 0, ow1 = 0;
  bool nhwc = false;
};

std::optional<PoolTile> pool_tile(const TileArgs& args, std::string_view variant) {
  check_args(args, variant);
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  if (const std::optional<std::string> why = pool_reason(*args.op, x_shape, &y_shape))
    fail(args, variant, *why);
  PoolTile t;
  t.g = pool_geometry(*args.op, x_shape, y_shape);
  const PoolGeometry& g = t.g;
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 ||
      g.dilation_w < 1)
    fail(args, variant, "kernel_shape, strides and dilations must be positive");
  const graph::Region& r = *args.region;
  if (r.empty()) return std::nullopt;
  const bool is_1d = x_shape.size() == 3;
  t.oh0 = is_1d ? 0 : r.begin[2];
  t.oh1 = is_1d ? 1 : r.end[2];
  t.ow0 = r.begin.back();
  t.ow1 = r.end.back();
  t.nhwc = is_nhwc(x_shape, args.inputs[0].layout);
  if (t.nhwc != is_nhwc(y_shape, args.output.layout) && !(t.nhwc && g.out_h * g.out_w == 1))
    fail(args, variant, "input and output must share one layout (NCHW or NHWC)");
  return t;
}

}  // namespace

std::optional<std::string> max_pool_applies(const graph::Operator& op,
                                            std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::MaxPool) return "cpu.maxpool runs MaxPool only";
  if (inputs.size() != 1 || !inputs[0].shape) return "cpu.maxpool needs one input with a shape";
  if (const std::optional<std::string> why = pool_reason(op, *inputs[0].shape, nullptr))
    return "cpu.maxpool " + *why;
  return std::nullopt;
}

void max_pool(const TileArgs& args) {
  const std::optional<PoolTile> t = pool_tile(args, kMaxPool);
  if (!t) return;
  const PoolGeometry& g = t->g;
  const graph::Region& r = *args.region;
  if (t->nhwc) {
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
      for (int64_t oh = t->oh0; oh < t->oh1; ++oh)
        max_pool_nhwc_row(args.inputs[0].data, args.output.data, g, n, oh, t->ow0, t->ow1,
                          r.begin[1], r.end[1]);
    return;
  }
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      const float* plane = args.inputs[0].data + (n * g.channels + c) * g.in_h * g.in_w;
      float* out_plane = args.output.data + (n * g.channels + c) * g.out_h * g.out_w;
      for (int64_t oh = t->oh0; oh < t->oh1; ++oh)
        max_pool_row(plane, out_plane + oh * g.out_w, g, oh, t->ow0, t->ow1);
    }
}

std::optional<std::string> average_pool_applies(const graph::Operator& op,
                                                std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::AveragePool) return "cpu.average_pool runs AveragePool only";
  if (inputs.size() != 1 || !inputs[0].shape)
    return "cpu.average_pool needs one input with a shape";
  for (int64_t d : op.attrs.dilations)
    if (d != 1) return "cpu.average_pool runs AveragePool without dilations only";
  if (const std::optional<std::string> why = pool_reason(op, *inputs[0].shape, nullptr))
    return "cpu.average_pool " + *why;
  return std::nullopt;
}

void average_pool(const TileArgs& args) {
  const std::optional<PoolTile> t = pool_tile(args, kAveragePool);
  if (!t) return;
  const PoolGeometry& g = t->g;
  if (g.dilation_h != 1 || g.dilation_w != 1)
    fail(args, kAveragePool, "AveragePool with dilations is not supported");
  const bool count_include_pad = args.op->attrs.count_include_pad;
  const graph::Region& r = *args.region;
  if (t->nhwc) {
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
      for (int64_t oh = t->oh0; oh < t->oh1; ++oh)
        average_pool_nhwc_row(args.inputs[0].data, args.output.data, g, count_include_pad, n, oh,
                              t->ow0, t->ow1, r.begin[1], r.end[1]);
    return;
  }
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      const float* plane = args.inputs[0].data + (n * g.channels + c) * g.in_h * g.in_w;
      float* out_plane = args.output.data + (n * g.channels + c) * g.out_h * g.out_w;
      for (int64_t oh = t->oh0; oh < t->oh1; ++oh) {
        const AverageWindow wh =
            average_window(oh, g.stride_h, g.pad_top, g.kernel_h, g.in_h, g.pad_bottom);
        for (int64_t ow = t->ow0; ow < t->ow1; ++ow) {
          const AverageWindow ww =
              average_window(ow, g.stride_w, g.pad_left, g.kernel_w, g.in_w, g.pad_right);
          float sum = 0.0f;
          for (int64_t ih = wh.lo; ih < wh.hi; ++ih)
            for (int64_t iw = ww.lo; iw < ww.hi; ++iw) sum += plane[ih * g.in_w + iw];
          out_plane[oh * g.out_w + ow] = sum / average_divisor(wh, ww, count_include_pad);
        }
      }
    }
}

std::optional<std::string> global_average_pool_applies(const graph::Operator& op,
                                                       std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::GlobalAveragePool)
    return "cpu.global_average_pool runs GlobalAveragePool only";
  if (inputs.size() != 1 || !inputs[0].shape || inputs[0].shape->size() < 2)
    return "cpu.global_average_pool needs one input of rank >= 2";
  return std::nullopt;
}

void global_average_pool(const TileArgs& args) {
  check_args(args, kGlobalAveragePool);
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  bool ok = x_shape.size() >= 2 && y_shape.size() == x_shape.size() && y_shape[0] == x_shape[0] &&
            y_shape[1] == x_shape[1];
  for (size_t d = 2; ok && d < y_shape.size(); ++d) ok = y_shape[d] == 1;
  if (!ok)
    fail(args, kGlobalAveragePool,
         "output " + graph::shape_to_string(y_shape) + " does not fit input " +
             graph::shape_to_string(x_shape));
  const int64_t channels = x_shape[1];
  int64_t spatial_size = 1;
  for (size_t d = 2; d < x_shape.size(); ++d) spatial_size *= x_shape[d];
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  // The output [N, C, 1, 1] has the same bytes in either layout.
  if (is_nhwc(x_shape, args.inputs[0].layout)) {
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
      global_average_nhwc(args.inputs[0].data + n * spatial_size * channels, spatial_size, channels,
                          r.begin[1], r.end[1], args.output.data + n * channels + r.begin[1]);
    return;
  }
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c)
      args.output.data[n * channels + c] =
          plane_sum(args.inputs[0].data + (n * channels + c) * spatial_size, spatial_size) /
          static_cast<float>(spatial_size);
}

}  // namespace tessera::kernels::cpu
