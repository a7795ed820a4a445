// Reference convolution: 2-D (and 1-D, as 2-D with H = 1), groups,
// strides, dilations, asymmetric pads, optional bias, optional fused
// residual, optional fused input scale (X[n, c] * S[n, c] rounded first, as
// the Mul it replaces did), optional fused 1x1 expansion (each expanded
// value computed as the reference 1x1 conv would, into a per-image buffer,
// before the depthwise taps read it). Each output element accumulates in
// float in the fixed order (c, kh, kw), then adds the bias, then the
// residual, then the activation.
// X, Y and the residual are indexed through their layouts' strides (NCHW or
// NHWC, graph/layout.hpp), so the arithmetic is the same in every layout.
#include <algorithm>
#include <vector>

#include "kernels/activation.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void conv(const TileArgs& args) {
  const bool fused_residual = args.op && args.op->attrs.fused_residual;
  const bool fused_scale = args.op && args.op->attrs.fused_input_scale;
  const bool fused_expand = args.op && args.op->attrs.fused_expand;
  const graph::InputCount count =
      args.op ? graph::conv_input_count(args.op->attrs) : graph::InputCount{2, 3};
  check_tile_args(args, count.min, count.max);
  const graph::OpAttributes& attrs = args.op->attrs;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& w_shape = *args.inputs[1].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const size_t rank = x_shape.size();
  if ((rank != 3 && rank != 4) || w_shape.size() != rank || y_shape.size() != rank)
    fail(args, "only 1-D and 2-D convolutions are supported (input " +
                   graph::shape_to_string(x_shape) + ", weight " + graph::shape_to_string(w_shape) +
                   ")");
  const bool is_1d = rank == 3;
  // With a fused expansion the conv reads EW's channels, computed from X's.
  const size_t expand_at = fused_expand ? graph::expand_weight_input(attrs) : 0;
  const graph::Shape* ew_shape = fused_expand ? args.inputs[expand_at].shape : nullptr;
  if (fused_expand && (rank != 4 || ew_shape->size() != 4 || (*ew_shape)[1] != x_shape[1] ||
                       *args.inputs[expand_at + 1].shape != graph::Shape{(*ew_shape)[0]}))
    fail(args, "fused expansion weight " + graph::shape_to_string(*ew_shape) +
                   " does not fit input " + graph::shape_to_string(x_shape));
  const int64_t batch = x_shape[0], channels = fused_expand ? (*ew_shape)[0] : x_shape[1];
  const int64_t in_h = is_1d ? 1 : x_shape[2], in_w = x_shape[rank - 1];
  const int64_t out_channels = w_shape[0], group_channels = w_shape[1];
  const int64_t k_h = is_1d ? 1 : w_shape[2], k_w = w_shape[rank - 1];
  const int64_t group = attrs.group;
  const size_t spatial = rank - 2;
  const int64_t stride_h = is_1d ? 1 : attr_at(attrs.strides, 0, 1);
  const int64_t stride_w = attr_at(attrs.strides, spatial - 1, 1);
  const int64_t dilation_h = is_1d ? 1 : attr_at(attrs.dilations, 0, 1);
  const int64_t dilation_w = attr_at(attrs.dilations, spatial - 1, 1);
  const int64_t pad_top = is_1d ? 0 : attr_at(attrs.pads, 0, 0);
  const int64_t pad_left = attr_at(attrs.pads, spatial - 1, 0);
  if (group < 1 || channels != group_channels * group || out_channels % group != 0 ||
      y_shape[0] != batch || y_shape[1] != out_channels || stride_h < 1 || stride_w < 1 ||
      dilation_h < 1 || dilation_w < 1)
    fail(args, "inconsistent shapes or attributes (input " + graph::shape_to_string(x_shape) +
                   ", weight " + graph::shape_to_string(w_shape) + ", output " +
                   graph::shape_to_string(y_shape) + ", group " + std::to_string(group) + ")");
  const float* bias = nullptr;
  if (args.input_count >= 3) {
    if (*args.inputs[2].shape != graph::Shape{out_channels})
      fail(args, "bias shape " + graph::shape_to_string(*args.inputs[2].shape) + " is not [M]");
    bias = args.inputs[2].data;
  }
  const float* residual = nullptr;
  std::vector<int64_t> r_strides;
  if (fused_residual) {
    if (*args.inputs[3].shape != y_shape)
      fail(args, "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                     " differs from the output shape " + graph::shape_to_string(y_shape));
    residual = args.inputs[3].data;
    r_strides = layout_strides_of(args.inputs[3]);
  }
  // The scale of image n, channel c: scale[n * scale_n + c].
  const float* scale = nullptr;
  int64_t scale_n = 0;
  if (fused_scale) {
    const ConstTensorView& sv = args.inputs[args.input_count - 1];
    const graph::Shape& ss = *sv.shape;
    if (ss.size() != rank || (ss[0] != batch && ss[0] != 1) || ss[1] != channels ||
        graph::shape_numel(ss) != ss[0] * channels)
      fail(args, "input scale shape " + graph::shape_to_string(ss) + " is not [N or 1, C, 1, 1]");
    scale = sv.data;
    scale_n = ss[0] == 1 ? 0 : channels;
  }
  const int64_t out_per_group = out_channels / group;
  // Strides by logical dim; the 1-D form has no H stride (H = 1).
  std::vector<int64_t> xs = layout_strides_of(args.inputs[0]);
  // The expanded image, planar [C, H, W]: only the tile's channels and the
  // rows its outputs read are computed.
  std::vector<float> expanded;
  const std::vector<int64_t> x_in_strides = xs;
  if (fused_expand) {
    expanded.assign(static_cast<size_t>(channels * in_h * in_w), 0.0f);
    xs = {0, in_h * in_w, in_w, 1};
  }
  const std::vector<int64_t> ys = layout_strides_of(args.output);
  const int64_t x_sc = xs[1], x_sh = is_1d ? 0 : xs[2], x_sw = xs[rank - 1];
  const int64_t y_sc = ys[1], y_sh = is_1d ? 0 : ys[2], y_sw = ys[rank - 1];
  const int64_t r_sh = residual && !is_1d ? r_strides[2] : 0;

  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const int64_t oh_begin = is_1d ? 0 : r.begin[2], oh_end = is_1d ? 1 : r.end[2];
  const int64_t ow_begin = r.begin[rank - 1], ow_end = r.end[rank - 1];
  const float* x = fused_expand ? expanded.data() : args.inputs[0].data;
  const float* w = args.inputs[1].data;

  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    if (fused_expand) {
      const int64_t ih_lo = std::max<int64_t>(0, oh_begin * stride_h - pad_top);
      const int64_t ih_hi =
          std::min(in_h, (oh_end - 1) * stride_h - pad_top + (k_h - 1) * dilation_h + 1);
      const float* ew = args.inputs[expand_at].data;
      const float* eb = args.inputs[expand_at + 1].data;
      const float* xn = args.inputs[0].data + n * x_in_strides[0];
      const int64_t cin = x_shape[1];
      for (int64_t c = r.begin[1]; c < r.end[1]; ++c)
        for (int64_t ih = ih_lo; ih < ih_hi; ++ih)
          for (int64_t iw = 0; iw < in_w; ++iw) {
            float v = 0.0f;
            for (int64_t ci = 0; ci < cin; ++ci)
              v += ew[c * cin + ci] *
                   xn[ci * x_in_strides[1] + ih * x_in_strides[2] + iw * x_in_strides[3]];
            v += eb[c];
            expanded[static_cast<size_t>((c * in_h + ih) * in_w + iw)] = activate(
                attrs.expand_activation, v, attrs.expand_clip_min, attrs.expand_clip_max, 0.0f);
          }
    }
    for (int64_t m = r.begin[1]; m < r.end[1]; ++m) {
      const int64_t first_channel = (m / out_per_group) * group_channels;
      for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
        // The output row doubles as the accumulator: per element the sum is
        // still taken in (c, kh, kw) order, whatever part of the row we own.
        float* row = args.output.data + n * ys[0] + m * y_sc + oh * y_sh;
        for (int64_t ow = ow_begin; ow < ow_end; ++ow) row[ow * y_sw] = 0.0f;
        for (int64_t c = 0; c < group_channels; ++c) {
          const float* plane = x + n * xs[0] + (first_channel + c) * x_sc;
          const float* kernel = w + (m * group_channels + c) * k_h * k_w;
          const float sc = scale ? scale[n * scale_n + first_channel + c] : 1.0f;  // x * 1 is x

          for (int64_t kh = 0; kh < k_h; ++kh) {
            const int64_t ih = oh * stride_h - pad_top + kh * dilation_h;
            if (ih < 0 || ih >= in_h) continue;
            const float* in_row = plane + ih * x_sh;
            for (int64_t kw = 0; kw < k_w; ++kw) {
              const float weight = kernel[kh * k_w + kw];
              // iw = ow * stride_w + shift must lie in [0, in_w).
              const int64_t shift = kw * dilation_w - pad_left;
              const int64_t lo = std::max(ow_begin, ceil_div(-shift, stride_w));
              const int64_t hi = std::min(ow_end, floor_div(in_w - 1 - shift, stride_w) + 1);
              // Unit strides (NCHW, stride 1): a loop the compiler vectorises.
              if (stride_w == 1 && x_sw == 1 && y_sw == 1 && lo < hi) {
                const float* src = in_row + lo + shift;  // lo + shift >= 0
                float* dst = row + lo;
                for (int64_t i = 0; i < hi - lo; ++i) dst[i] += weight * (src[i] * sc);
              } else {
                for (int64_t ow = lo; ow < hi; ++ow)
                  row[ow * y_sw] += weight * (in_row[(ow * stride_w + shift) * x_sw] * sc);
              }
            }
          }
        }
        const float* res_row =
            residual ? residual + n * r_strides[0] + m * r_strides[1] + oh * r_sh : nullptr;
        for (int64_t ow = ow_begin; ow < ow_end; ++ow) {
          float& v = row[ow * y_sw];
          if (bias) v += bias[m];
          if (res_row) v += res_row[ow * r_strides[rank - 1]];
          v = activate(attrs.activation, v, attrs.clip_min, attrs.clip_max, attrs.leaky_relu_alpha);
        }
      }
    }
  }
}

}  // namespace tessera::kernels::reference
