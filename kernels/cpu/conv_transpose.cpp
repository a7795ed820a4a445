// "cpu.conv_transpose": 2-D ConvTranspose (NCHW) as one GEMM per input row
// and a scatter of its columns (col2im) on the packed SGEMM:
//
//   cols[ix, (ocg, ky, kx)] = Σ_ic X[n, g·Cg + ic, iy, ix] · W[g·Cg + ic, ocg, ky, kx]
//
// A is X read in place (gemm_tile_indirect: the channel planes are k offsets
// c·H·W from a row's first pixel, no copy); B is each group's weights
// [Cg, Mg·kh·kw], packed at prepare. A tile sets its output to the bias,
// then for each image, group and input row that reaches its rows, computes
// the row's columns for its own output channels over the input pixels that
// reach its columns, and adds each into the output element it lands on
// (oy = iy·stride − pad + ky·dilation) when that is in the tile. Every
// output element receives its contributions in (iy, ix) order and each
// column is a fixed-order sum over C, whatever the tiling, so tilings agree
// bitwise. The work per input pixel is the dense GEMM's; the scatter is one
// add per product column.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.conv_transpose";

struct ConvTransposePrepared {
  std::vector<PackedMatrix> groups;  // W_g [Cg, Mg·kh·kw]
};

// Input positions [lo, hi) along one dim whose taps can land in output
// positions [o0, o1): i·stride − pad + k·dilation for k < kernel.
std::pair<int64_t, int64_t> reaching_inputs(int64_t o0, int64_t o1, int64_t size, int64_t kernel,
                                            int64_t stride, int64_t pad, int64_t dilation) {
  using reference::ceil_div, reference::floor_div;
  const int64_t lo = std::max<int64_t>(0, ceil_div(o0 + pad - (kernel - 1) * dilation, stride));
  const int64_t hi = std::min(size, floor_div(o1 - 1 + pad, stride) + 1);
  return {lo, std::max(lo, hi)};
}

}  // namespace

std::optional<std::string> conv_transpose_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::ConvTranspose) return "not a ConvTranspose";
  if (inputs.size() < 2 || inputs.size() > 3) return "expected 2 or 3 inputs";
  if (!inputs[1].data) return "W is not a constant";
  const graph::Shape& x = *inputs[0].shape;
  const graph::Shape& w = *inputs[1].shape;
  if (x.size() != 4 || w.size() != 4) return "not a 2-D transposed convolution";
  if (op.attrs.activation != graph::Activation::None) return "has a fused activation";
  if (x[1] % op.attrs.group != 0 || w[0] != x[1]) return "W does not fit X's channels";
  if (x[1] * x[2] * x[3] > std::numeric_limits<int32_t>::max())
    return "X's channel planes pass int32 offsets";
  return std::nullopt;
}

PreparedOp prepare_conv_transpose(const graph::Operator& op,
                                  std::span<const ConstTensorView> inputs) {
  if (std::optional<std::string> why = conv_transpose_applies(op, inputs))
    fail_op(kVariant, &op, *why);
  const graph::Shape& w = *inputs[1].shape;
  const int64_t group = op.attrs.group, in_per_group = w[0] / group;
  const int64_t columns = w[1] * w[2] * w[3];
  auto prepared = std::make_shared<ConvTransposePrepared>();
  for (int64_t g = 0; g < group; ++g)
    prepared->groups.push_back(pack_b(inputs[1].data + g * in_per_group * columns, in_per_group,
                                      columns, columns, /*transposed=*/false));
  return prepared;
}

void conv_transpose(const TileArgs& args) {
  check_dense_tile_args(kVariant, args, 2, 3, /*needs_prepared=*/true);
  const graph::OpAttributes& a = args.op->attrs;
  const auto& prepared = *static_cast<const ConvTransposePrepared*>(args.prepared);
  const graph::Shape& xs = *args.inputs[0].shape;
  const graph::Shape& ws = *args.inputs[1].shape;
  const graph::Shape& ys = *args.output.shape;
  const int64_t channels = xs[1], h = xs[2], w = xs[3];
  const int64_t in_per_group = channels / a.group, out_per_group = ws[1];
  const int64_t k_h = ws[2], k_w = ws[3], taps = k_h * k_w, columns = out_per_group * taps;
  const int64_t out_h = ys[2], out_w = ys[3];
  const graph::Region& r = *args.region;
  const float* x = args.inputs[0].data;
  const float* bias = args.input_count == 3 ? args.inputs[2].data : nullptr;
  float* y = args.output.data;
  auto out_at = [&](int64_t n, int64_t oc, int64_t oy, int64_t ox) {
    return y + ((n * ys[1] + oc) * out_h + oy) * out_w + ox;
  };
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t oc = r.begin[1]; oc < r.end[1]; ++oc)
      for (int64_t oy = r.begin[2]; oy < r.end[2]; ++oy)
        std::fill(out_at(n, oc, oy, r.begin[3]), out_at(n, oc, oy, r.end[3]),
                  bias ? bias[oc] : 0.0f);

  thread_local std::vector<int32_t> k_offsets;
  k_offsets.resize(static_cast<size_t>(in_per_group));
  for (int64_t c = 0; c < in_per_group; ++c)
    k_offsets[static_cast<size_t>(c)] = static_cast<int32_t>(c * h * w);
  const auto [iy0, iy1] =
      reaching_inputs(r.begin[2], r.end[2], h, k_h, a.strides[0], a.pads[0], a.dilations[0]);
  const auto [ix0, ix1] =
      reaching_inputs(r.begin[3], r.end[3], w, k_w, a.strides[1], a.pads[1], a.dilations[1]);
  if (iy0 >= iy1 || ix0 >= ix1) return;  // only the bias reaches the tile
  const int64_t stride_h = a.strides[0], stride_w = a.strides[1];
  const int64_t pad_h = a.pads[0], pad_w = a.pads[1];
  const int64_t dilation_h = a.dilations[0], dilation_w = a.dilations[1];
  // Whole input rows are consecutive pixels of a channel plane, so a tile
  // whose inputs span the width takes several rows per GEMM call: B is
  // streamed once per call, and one row of 28 pixels is a short M for it.
  // The product block stays below kProductFloats (1 MiB).
  constexpr int64_t kProductFloats = int64_t{1} << 18;
  const bool whole_rows = ix0 == 0 && ix1 == w;
  const int64_t rows_per_call =
      whole_rows ? std::clamp<int64_t>(kProductFloats / (w * columns), 1, iy1 - iy0) : 1;
  thread_local std::vector<float> scratch;
  float* cols = grown(scratch, (rows_per_call - 1) * w * columns + ix1 * columns);
  const int64_t g0 = r.begin[1] / out_per_group, g1 = (r.end[1] - 1) / out_per_group + 1;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t g = g0; g < g1; ++g) {
      // The tile's output channels within group g, as product columns.
      const int64_t oc_lo = std::max(r.begin[1], g * out_per_group);
      const int64_t oc_hi = std::min(r.end[1], (g + 1) * out_per_group);
      for (int64_t iy_first = iy0; iy_first < iy1; iy_first += rows_per_call) {
        const int64_t rows = std::min(rows_per_call, iy1 - iy_first);
        // Pixel m of the call: input row iy_first + m / w, column m % w.
        const float* a = x + ((n * channels + g * in_per_group) * h + iy_first) * w;
        const GemmTile tile{.m0 = ix0,
                            .m1 = (rows - 1) * w + ix1,
                            .n0 = (oc_lo - g * out_per_group) * taps,
                            .n1 = (oc_hi - g * out_per_group) * taps};
        gemm_tile_indirect(a, 1, k_offsets.data(), prepared.groups[static_cast<size_t>(g)], cols,
                           columns, tile);
        for (int64_t iy = iy_first; iy < iy_first + rows; ++iy) {
          const float* row_cols = cols + ((iy - iy_first) * w + ix0) * columns;
          // Channel by channel, so that each output row is written left to
          // right while the row's few columns of the product stay in L1.
          for (int64_t oc = oc_lo; oc < oc_hi; ++oc)
            for (int64_t ky = 0; ky < k_h; ++ky) {
              const int64_t oy = iy * stride_h - pad_h + ky * dilation_h;
              if (oy < r.begin[2] || oy >= r.end[2]) continue;
              float* out_row = out_at(n, oc, oy, 0);
              const float* col = row_cols + (oc - g * out_per_group) * taps + ky * k_w;
              for (int64_t ix = ix0; ix < ix1; ++ix, col += columns)
                for (int64_t kx = 0; kx < k_w; ++kx) {
                  const int64_t ox = ix * stride_w - pad_w + kx * dilation_w;
                  if (ox >= r.begin[3] && ox < r.end[3]) out_row[ox] += col[kx];
                }
            }
        }
      }
    }
}

}  // namespace tessera::kernels::cpu
