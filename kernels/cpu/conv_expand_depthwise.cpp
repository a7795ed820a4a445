// "cpu.conv_expand_depthwise": an inverted residual block's 1x1 expansion
// and the depthwise conv that reads it, as one tile kernel
// (graph/fuse_expand_depthwise.hpp). NHWC only. Per tile, its output rows
// go in chunks; for each chunk the expanded input rows it reads, only the
// tile's channels and only the columns it reads, are computed by the packed
// SGEMM (bias and the expansion's activation in its epilogue) into a
// per-thread band, and the NHWC depthwise kernel (conv_depthwise_nhwc.hpp)
// runs over the band as if it were the image. The rows two chunks share
// are moved to the band's front, not computed twice. The band is sized to
// stay in L2, so the expanded tensor (MobileNetV2's first block: 112×112×96)
// never goes to memory: the unfused pair wrote it out (with a read for
// ownership of every line) and read it back.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/aligned_scratch.hpp"
#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/conv_depthwise_nhwc.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.conv_expand_depthwise";

// The band of expanded rows: a quarter of the L2 (cache_sizes.hpp), beside
// the packed expansion weights and the depthwise output rows. bench_conv on
// this module's MobileNetV2 layers measured 128, 256 and 512 KiB bands alike
// (1 MiB L2).
int64_t band_bytes() {
  return cache_sizes().l2 / 4;
}

struct ExpandDepthwisePrepared {
  PackedMatrix expand;        // EW viewed [C, Cin], packed as the transposed B (K = Cin, N = C)
  ConvGeometry geometry;      // the depthwise conv's, over the C expanded channels
  TapMajorWeights depthwise;  // W tap-major, as the NHWC depthwise kernel reads it
};

std::optional<std::string> applies_with(const graph::Operator& op,
                                        std::span<const ConstTensorView> inputs, ConvGeometry& g) {
  if (op.type != graph::OpType::Conv) return "not a Conv";
  if (!op.attrs.fused_expand) return "no fused 1x1 expansion";
  if (auto why = refuse_fused_input_scale(op)) return why;
  const size_t count = graph::conv_input_count(op.attrs).max;
  if (inputs.size() != count) return "expected " + std::to_string(count) + " inputs";
  for (const ConstTensorView& input : inputs)
    if (!input.shape) return "an input has no shape";
  const size_t e = graph::expand_weight_input(op.attrs);
  const graph::Shape& x = *inputs[0].shape;
  const graph::Shape& ew = *inputs[e].shape;
  if (x.size() != 4 || ew.size() != 4 || ew[1] != x[1] || ew[2] != 1 || ew[3] != 1 ||
      *inputs[e + 1].shape != graph::Shape{ew[0]})
    return "expansion weight " + graph::shape_to_string(ew) + " does not fit input " +
           graph::shape_to_string(x);
  if (!inputs[e].data || !inputs[e + 1].data) return "expansion weights are not constant";
  if (auto why = conv_geometry(op, {x[0], ew[0], x[2], x[3]}, *inputs[1].shape, g)) return why;
  if (g.group != g.channels || g.out_channels != g.channels)
    return "not depthwise (group " + std::to_string(g.group) + ", C " + std::to_string(g.channels) +
           ")";
  if (*inputs[2].shape != graph::Shape{g.out_channels})
    return "bias shape " + graph::shape_to_string(*inputs[2].shape) + " is not [C]";
  // Layouts are known from the second kernel choice on (the first sees all
  // tensors NCHW): this kernel walks X, Y and the residual as NHWC.
  for (size_t i = 0; i < e; ++i)
    if (i != 1 && i != 2 && inputs[i].layout != graph::Layout::NHWC)
      return "needs NHWC activations (input " + std::to_string(i) + " is NCHW)";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> conv_expand_depthwise_applies(const graph::Operator& op,
                                                         std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  return applies_with(op, inputs, g);
}

PreparedOp prepare_conv_expand_depthwise(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs) {
  auto prep = std::make_shared<ExpandDepthwisePrepared>();
  // Prepared before layouts are final: only the shapes matter here.
  std::vector<ConstTensorView> nhwc(inputs.begin(), inputs.end());
  for (ConstTensorView& v : nhwc) v.layout = graph::Layout::NHWC;
  if (auto why = applies_with(op, nhwc, prep->geometry)) fail_op(kVariant, &op, *why);
  const graph::Shape& ew = *inputs[graph::expand_weight_input(op.attrs)].shape;
  const int64_t channels = ew[0], cin = ew[1];
  prep->expand = pack_b(inputs[graph::expand_weight_input(op.attrs)].data, cin, channels, cin,
                        /*transposed=*/true, gemm_microkernel_for_columns(channels));
  const ConvGeometry& g = prep->geometry;
  prep->depthwise = tap_major_weights(inputs[1].data, g.k_h * g.k_w, g.channels);
  return prep;
}

void conv_expand_depthwise(const TileArgs& args) {
  const size_t count = args.op ? graph::conv_input_count(args.op->attrs).max : 0;
  check_dense_tile_args(kVariant, args, count, count, /*needs_prepared=*/true);
  const auto& prep = *static_cast<const ExpandDepthwisePrepared*>(args.prepared);
  const ConvGeometry& g = prep.geometry;
  const graph::OpAttributes& attrs = args.op->attrs;
  const size_t e = graph::expand_weight_input(attrs);
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const int64_t cin = prep.expand.k(), channels = g.channels;
  if (x_shape != graph::Shape{g.batch, cin, g.in_h, g.in_w} ||
      y_shape != graph::Shape{g.batch, channels, g.out_h, g.out_w})
    fail_op(kVariant, args.op,
            "shapes differ from the prepared ones (input " + graph::shape_to_string(x_shape) +
                ", output " + graph::shape_to_string(y_shape) + ")");
  const float* residual = attrs.fused_residual ? args.inputs[3].data : nullptr;
  if (residual && *args.inputs[3].shape != y_shape)
    fail_op(kVariant, args.op,
            "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                " differs from the output shape " + graph::shape_to_string(y_shape));
  if (args.inputs[0].layout != graph::Layout::NHWC || args.output.layout != graph::Layout::NHWC ||
      (residual && args.inputs[3].layout != graph::Layout::NHWC))
    fail_op(kVariant, args.op, "input, output and residual must be NHWC");
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  const int64_t c0 = r.begin[1], c1 = r.end[1];
  const int64_t oh0 = r.begin[2], oh1 = r.end[2], ow0 = r.begin[3], ow1 = r.end[3];
  // The input columns the tile's outputs read, inside the image.
  const int64_t iw_lo = std::clamp<int64_t>(ow0 * g.stride_w - g.pad_left, 0, g.in_w);
  const int64_t iw_hi = std::clamp<int64_t>(
      (ow1 - 1) * g.stride_w - g.pad_left + (g.k_w - 1) * g.dilation_w + 1, iw_lo, g.in_w);
  const int64_t band_cols = iw_hi - iw_lo, row_floats = std::max<int64_t>(1, band_cols) * channels;
  // Output rows per chunk: as many as keep the band within band_bytes().
  const int64_t span_h = (g.k_h - 1) * g.dilation_h + 1;
  const int64_t band_rows_max = std::max(span_h, band_bytes() / 4 / row_floats);
  const int64_t chunk =
      std::clamp<int64_t>((band_rows_max - span_h) / g.stride_h + 1, 1, oh1 - oh0);
  const int64_t band_capacity = (chunk - 1) * g.stride_h + span_h;
  // 64-byte aligned: in a std::vector (16-byte aligned) every vector load of
  // the depthwise taps and store of the GEMM split across two cache lines,
  // and EfficientNet-B0's fused blocks ran slower than the unfused pairs.
  thread_local AlignedScratch band_buffer;
  float* band = band_buffer.at_least(band_capacity * row_floats);

  const GemmEpilogue expand_epilogue{.bias = args.inputs[e + 1].data,
                                     .bias_kind = GemmBias::kPerColumn,
                                     .activation = gemm_activation(attrs.expand_activation),
                                     .clip_min = attrs.expand_clip_min,
                                     .clip_max = attrs.expand_clip_max};
  // The depthwise conv over the band: its rows and columns are the image's
  // from (need_lo, iw_lo) on, so the band is an image whose top and left
  // padding grew by as much; taps outside it are outside the image for this
  // chunk's outputs (the band holds every in-image row and column they read).
  ConvGeometry band_g = g;
  band_g.batch = 1;
  band_g.in_w = band_cols;
  band_g.pad_left = g.pad_left + iw_lo;
  DepthwiseNhwcTile t;
  t.x = band;
  t.bias = args.inputs[2].data;
  t.g = &band_g;
  t.attrs = &attrs;
  t.n = 0;
  t.c0 = c0, t.c1 = c1;
  set_tile_weights(t, prep.depthwise, args.inputs[1].data, g.k_h * g.k_w);
  t.ow0 = ow0, t.ow1 = ow1;

  const int64_t image_floats = g.out_h * g.out_w * channels;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    const float* x = args.inputs[0].data + n * g.in_h * g.in_w * cin;
    // Image rows [have_lo, have_hi) are in the band, from its first row.
    int64_t have_lo = 0, have_hi = 0;
    for (int64_t oh = oh0; oh < oh1; oh += chunk) {
      const int64_t oe = std::min(oh1, oh + chunk);
      const int64_t need_lo = std::clamp<int64_t>(oh * g.stride_h - g.pad_top, 0, g.in_h);
      const int64_t need_hi = std::clamp<int64_t>(
          (oe - 1) * g.stride_h - g.pad_top + (g.k_h - 1) * g.dilation_h + 1, need_lo, g.in_h);
      int64_t from = need_lo;
      if (need_lo >= have_lo && need_lo < have_hi) {
        const int64_t kept = std::min(need_hi, have_hi) - need_lo;
        std::memmove(band, band + (need_lo - have_lo) * row_floats,
                     static_cast<size_t>(kept * row_floats) * sizeof(float));
        from = need_lo + kept;
      }
      // Expanded rows [from, need_hi): one GEMM over whole rows, or one per
      // row where the tile reads only some of the columns.
      if (from < need_hi) {
        float* out = band + (from - need_lo) * row_floats;
        if (band_cols == g.in_w) {
          gemm_tile(x + from * g.in_w * cin, cin, prep.expand, out, channels,
                    {.m0 = 0, .m1 = (need_hi - from) * g.in_w, .n0 = c0, .n1 = c1},
                    expand_epilogue);
        } else {
          for (int64_t ih = from; ih < need_hi; ++ih)
            gemm_tile(x + (ih * g.in_w + iw_lo) * cin, cin, prep.expand,
                      out + (ih - from) * row_floats, channels,
                      {.m0 = 0, .m1 = band_cols, .n0 = c0, .n1 = c1}, expand_epilogue);
        }
      }
      have_lo = need_lo;
      have_hi = need_hi;
      band_g.in_h = need_hi - need_lo;
      band_g.pad_top = g.pad_top + need_lo;
      t.y = args.output.data + n * image_floats;
      t.residual = residual ? residual + n * image_floats : nullptr;
      t.oh0 = oh, t.oh1 = oe;
      depthwise_nhwc_tile(t);
    }
  }
}

}  // namespace tessera::kernels::cpu
