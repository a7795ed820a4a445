// Reference BatchNormalization, inference form: per channel (dim 1)
// y = scale * (x - mean) / sqrt(var + epsilon) + B.
#include <cmath>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void batch_normalization(const TileArgs& args) {
  check_tile_args(args, 5, 5);
  const graph::Shape& shape = *args.output.shape;
  if (*args.inputs[0].shape != shape || shape.size() < 2)
    fail(args, "input " + graph::shape_to_string(*args.inputs[0].shape) + " and output " +
                   graph::shape_to_string(shape) + " must be equal, of rank >= 2");
  const int64_t channels = shape[1];
  for (size_t i = 1; i < 5; ++i)
    if (*args.inputs[i].shape != graph::Shape{channels})
      fail(args, "input " + std::to_string(i) + " " +
                     graph::shape_to_string(*args.inputs[i].shape) +
                     " is not [C] with C = " + std::to_string(channels));
  const float* x = args.inputs[0].data;
  const float* scale = args.inputs[1].data;
  const float* bias = args.inputs[2].data;
  const float* mean = args.inputs[3].data;
  const float* var = args.inputs[4].data;
  const float epsilon = args.op->attrs.epsilon;
  const auto normalize = [&](float v, int64_t c) {
    return scale[c] * (v - mean[c]) / std::sqrt(var[c] + epsilon) + bias[c];
  };
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  float* y = args.output.data;
  const bool channel_is_row = shape.size() == 2;  // [N, C]: rows run along channels
  for_each_row<1>(*args.region, {strides.data()},
                  [&](const int64_t* index, const std::array<int64_t, 1>& offsets, int64_t length) {
                    const float* src = x + offsets[0];
                    float* dst = y + offsets[0];
                    if (channel_is_row) {
                      for (int64_t i = 0; i < length; ++i) dst[i] = normalize(src[i], index[1] + i);
                    } else {
                      for (int64_t i = 0; i < length; ++i) dst[i] = normalize(src[i], index[1]);
                    }
                  });
}

}  // namespace tessera::kernels::reference
