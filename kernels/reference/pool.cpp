// Reference pooling: MaxPool (with dilations), AveragePool and
// GlobalAveragePool. 1-D pooling runs as 2-D with H = 1. Input and output
// are indexed through their layouts' strides (NCHW or NHWC).
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

// One pooling problem seen as 2-D, whatever the spatial rank (1 or 2).
struct PoolGeometry {
  int64_t channels, in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  int64_t pad_top, pad_left, pad_bottom, pad_right;
  // The output region's spatial ranges ([0, 1) for the H of a 1-D pool).
  int64_t oh_begin, oh_end, ow_begin, ow_end;
  // Element strides of X and Y: image, channel, row, column (row 0 for 1-D).
  int64_t x_n, x_c, x_h, x_w, y_n, y_c, y_h, y_w;
};

PoolGeometry pool_geometry(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::OpAttributes& attrs = args.op->attrs;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const size_t rank = x_shape.size();
  const size_t spatial = rank - 2;
  if ((rank != 3 && rank != 4) || y_shape.size() != rank || attrs.kernel_shape.size() != spatial ||
      y_shape[0] != x_shape[0] || y_shape[1] != x_shape[1])
    fail(args, "only 1-D and 2-D pooling is supported (input " + graph::shape_to_string(x_shape) +
                   ", output " + graph::shape_to_string(y_shape) + ")");
  const bool is_1d = rank == 3;
  PoolGeometry g{};
  g.channels = x_shape[1];
  g.in_h = is_1d ? 1 : x_shape[2];
  g.in_w = x_shape[rank - 1];
  g.out_h = is_1d ? 1 : y_shape[2];
  g.out_w = y_shape[rank - 1];
  g.kernel_h = is_1d ? 1 : attrs.kernel_shape[0];
  g.kernel_w = attrs.kernel_shape[spatial - 1];
  g.stride_h = is_1d ? 1 : attr_at(attrs.strides, 0, 1);
  g.stride_w = attr_at(attrs.strides, spatial - 1, 1);
  g.dilation_h = is_1d ? 1 : attr_at(attrs.dilations, 0, 1);
  g.dilation_w = attr_at(attrs.dilations, spatial - 1, 1);
  g.pad_top = is_1d ? 0 : attr_at(attrs.pads, 0, 0);
  g.pad_left = attr_at(attrs.pads, spatial - 1, 0);
  g.pad_bottom = is_1d ? 0 : attr_at(attrs.pads, spatial, 0);
  g.pad_right = attr_at(attrs.pads, 2 * spatial - 1, 0);
  if (g.kernel_h < 1 || g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 ||
      g.dilation_w < 1)
    fail(args, "kernel_shape, strides and dilations must be positive");
  const graph::Region& r = *args.region;
  g.oh_begin = is_1d ? 0 : r.begin[2];
  g.oh_end = is_1d ? 1 : r.end[2];
  g.ow_begin = r.begin[rank - 1];
  g.ow_end = r.end[rank - 1];
  const std::vector<int64_t> xs = layout_strides_of(args.inputs[0]);
  const std::vector<int64_t> ys = layout_strides_of(args.output);
  g.x_n = xs[0], g.x_c = xs[1], g.x_h = is_1d ? 0 : xs[2], g.x_w = xs[rank - 1];
  g.y_n = ys[0], g.y_c = ys[1], g.y_h = is_1d ? 0 : ys[2], g.y_w = ys[rank - 1];
  return g;
}

}  // namespace

void max_pool(const TileArgs& args) {
  const PoolGeometry g = pool_geometry(args);
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      const float* plane = args.inputs[0].data + n * g.x_n + c * g.x_c;
      float* out_plane = args.output.data + n * g.y_n + c * g.y_c;
      for (int64_t oh = g.oh_begin; oh < g.oh_end; ++oh) {
        for (int64_t ow = g.ow_begin; ow < g.ow_end; ++ow) {
          // Padding never wins: it is skipped, as if it held -inf. A window of
          // padding only yields lowest(), as ONNX Runtime's does.
          float best = std::numeric_limits<float>::lowest();
          for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
            const int64_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
            if (ih < 0 || ih >= g.in_h) continue;
            for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
              const int64_t iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
              if (iw < 0 || iw >= g.in_w) continue;
              const float v = plane[ih * g.x_h + iw * g.x_w];
              if (v > best) best = v;
            }
          }
          out_plane[oh * g.y_h + ow * g.y_w] = best;
        }
      }
    }
  }
}

void average_pool(const TileArgs& args) {
  const PoolGeometry g = pool_geometry(args);
  if (g.dilation_h != 1 || g.dilation_w != 1)
    fail(args, "AveragePool with dilations is not supported");
  const bool count_include_pad = args.op->attrs.count_include_pad;
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      const float* plane = args.inputs[0].data + n * g.x_n + c * g.x_c;
      float* out_plane = args.output.data + n * g.y_n + c * g.y_c;
      for (int64_t oh = g.oh_begin; oh < g.oh_end; ++oh) {
        // ONNX Runtime's window: the end is clipped to the padded extent
        // (that clipped size is the count_include_pad divisor), then both ends
        // to the real input.
        const int64_t h_start = oh * g.stride_h - g.pad_top;
        const int64_t h_end = std::min(h_start + g.kernel_h, g.in_h + g.pad_bottom);
        const int64_t h_lo = std::max<int64_t>(h_start, 0), h_hi = std::min(h_end, g.in_h);
        for (int64_t ow = g.ow_begin; ow < g.ow_end; ++ow) {
          const int64_t w_start = ow * g.stride_w - g.pad_left;
          const int64_t w_end = std::min(w_start + g.kernel_w, g.in_w + g.pad_right);
          const int64_t w_lo = std::max<int64_t>(w_start, 0), w_hi = std::min(w_end, g.in_w);
          float sum = 0.0f;
          for (int64_t ih = h_lo; ih < h_hi; ++ih)
            for (int64_t iw = w_lo; iw < w_hi; ++iw) sum += plane[ih * g.x_h + iw * g.x_w];
          const int64_t divisor = count_include_pad ? (h_end - h_start) * (w_end - w_start)
                                                    : (h_hi - h_lo) * (w_hi - w_lo);
          out_plane[oh * g.y_h + ow * g.y_w] = sum / static_cast<float>(divisor);
        }
      }
    }
  }
}

void global_average_pool(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  bool ok = x_shape.size() >= 2 && y_shape.size() == x_shape.size() && y_shape[0] == x_shape[0] &&
            y_shape[1] == x_shape[1];
  for (size_t d = 2; ok && d < y_shape.size(); ++d) ok = y_shape[d] == 1;
  if (!ok)
    fail(args, "output " + graph::shape_to_string(y_shape) + " does not fit input " +
                   graph::shape_to_string(x_shape));
  const int64_t channels = x_shape[1];
  int64_t spatial_size = 1;
  for (size_t d = 2; d < x_shape.size(); ++d) spatial_size *= x_shape[d];
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  // NHWC keeps the spatial positions in the same (row-major) order, C apart;
  // the output [N, C, 1, ...] has the same bytes in either layout.
  const std::vector<int64_t> xs = layout_strides_of(args.inputs[0]);
  const int64_t step = xs.back();
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    for (int64_t c = r.begin[1]; c < r.end[1]; ++c) {
      const float* plane = args.inputs[0].data + n * xs[0] + c * xs[1];
      float sum = 0.0f;
      for (int64_t i = 0; i < spatial_size; ++i) sum += plane[i * step];
      args.output.data[n * channels + c] = sum / static_cast<float>(spatial_size);
    }
  }
}

}  // namespace tessera::kernels::reference
