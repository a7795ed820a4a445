// Reference 2-D transposed convolution (ONNX ConvTranspose): groups,
// strides, dilations, pads (end pads lowered by output_padding, maybe below
// zero), optional bias. Input pixel i feeds output pixels i·stride −
// pad_begin + k·dilation; each output element gathers its contributions in
// the fixed order (input channel, kh, kw) in float, then adds the bias, so
// any tiling gives the same bits. NCHW.
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void conv_transpose(const TileArgs& args) {
  check_tile_args(args, 2, 3);
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& w_shape = *args.inputs[1].shape;
  const graph::Shape& y_shape = *args.output.shape;
  if (x_shape.size() != 4 || w_shape.size() != 4 || y_shape.size() != 4 || a.group < 1 ||
      x_shape[1] % a.group != 0 || w_shape[0] != x_shape[1] || y_shape[1] != w_shape[1] * a.group ||
      a.strides.size() != 2 || a.dilations.size() != 2 || a.pads.size() != 4 ||
      a.activation != graph::Activation::None)
    fail(args, "inconsistent shapes or attributes (input " + graph::shape_to_string(x_shape) +
                   ", weight " + graph::shape_to_string(w_shape) + ", output " +
                   graph::shape_to_string(y_shape) + ")");
  const int64_t in_per_group = x_shape[1] / a.group, out_per_group = w_shape[1];
  const int64_t h = x_shape[2], w = x_shape[3], k_h = w_shape[2], k_w = w_shape[3];
  const float* x = args.inputs[0].data;
  const float* weight = args.inputs[1].data;
  const float* bias = args.input_count == 3 ? args.inputs[2].data : nullptr;
  float* y = args.output.data;
  const graph::Region& r = *args.region;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t oc = r.begin[1]; oc < r.end[1]; ++oc) {
      const int64_t g = oc / out_per_group, ocg = oc % out_per_group;
      for (int64_t oy = r.begin[2]; oy < r.end[2]; ++oy)
        for (int64_t ox = r.begin[3]; ox < r.end[3]; ++ox) {
          float sum = 0.0f;
          for (int64_t icg = 0; icg < in_per_group; ++icg) {
            const int64_t ic = g * in_per_group + icg;
            for (int64_t ky = 0; ky < k_h; ++ky) {
              const int64_t at_y = oy + a.pads[0] - ky * a.dilations[0];  // iy · stride
              if (at_y < 0 || at_y % a.strides[0] != 0 || at_y / a.strides[0] >= h) continue;
              const int64_t iy = at_y / a.strides[0];
              for (int64_t kx = 0; kx < k_w; ++kx) {
                const int64_t at_x = ox + a.pads[1] - kx * a.dilations[1];
                if (at_x < 0 || at_x % a.strides[1] != 0 || at_x / a.strides[1] >= w) continue;
                const int64_t ix = at_x / a.strides[1];
                sum += x[((n * x_shape[1] + ic) * h + iy) * w + ix] *
                       weight[((ic * out_per_group + ocg) * k_h + ky) * k_w + kx];
              }
            }
          }
          if (bias) sum += bias[oc];
          y[((n * y_shape[1] + oc) * y_shape[2] + oy) * y_shape[3] + ox] = sum;
        }
    }
}

}  // namespace tessera::kernels::reference
