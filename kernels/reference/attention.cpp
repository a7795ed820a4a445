// Reference FusedAttention (graph/fuse_attention.hpp): per output row, the
// row of scores Q·KT (each element summed over k in ascending order), then
// softmax(alpha * scores + mask) as the reference Softmax with a fused scale
// and mask forms and normalises it, then that row times V (summed over the
// scores in ascending order): the same bits as reference MatMul, Softmax and
// MatMul run one after the other.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/op_shape.hpp"
#include "graph/shape.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void fused_attention(const TileArgs& args) {
  check_tile_args(args, 3, 4);
  const graph::Shape& q_shape = *args.inputs[0].shape;
  const graph::Shape& kt_shape = *args.inputs[1].shape;
  const graph::Shape& v_shape = *args.inputs[2].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const size_t rank = q_shape.size();
  if (!graph::attention_operands_fit(q_shape, kt_shape, v_shape))
    fail(args, "Q " + graph::shape_to_string(q_shape) + ", K^T " +
                   graph::shape_to_string(kt_shape) + " and V " + graph::shape_to_string(v_shape) +
                   " are not [..., M, D], [..., D, S], [..., S, DV]");
  const int64_t m = q_shape[rank - 2], d = q_shape[rank - 1], s = kt_shape[rank - 1];
  const int64_t dv = v_shape[rank - 1];
  graph::Shape expected = q_shape;
  expected.back() = dv;
  if (y_shape != expected)
    fail(args, "output " + graph::shape_to_string(y_shape) + " is not " +
                   graph::shape_to_string(expected));
  graph::Shape scores = q_shape;
  scores.back() = s;
  const float* mask = args.input_count == 4 ? args.inputs[3].data : nullptr;
  if (mask && !graph::broadcasts_to(*args.inputs[3].shape, scores))
    fail(args, "mask " + graph::shape_to_string(*args.inputs[3].shape) +
                   " does not broadcast to the scores " + graph::shape_to_string(scores));
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  if (s == 0) {  // no scores: each output is an empty sum
    const std::vector<int64_t> y_strides = graph::shape_strides(y_shape);
    for_each_row<1>(r, {y_strides.data()},
                    [&](const int64_t*, const std::array<int64_t, 1>& at, int64_t length) {
                      std::fill(args.output.data + at[0], args.output.data + at[0] + length, 0.0f);
                    });
    return;
  }
  const float alpha = args.op->attrs.alpha;
  const bool nan_to_zero = args.op->attrs.nan_probabilities_to_zero;
  const std::vector<int64_t> score_strides = graph::shape_strides(scores);
  const std::vector<int64_t> mask_strides =
      mask ? broadcast_strides(*args.inputs[3].shape, scores) : std::vector<int64_t>(rank, 0);
  const int64_t mask_step = mask_strides[rank - 1];
  graph::Region rows = r;  // the tile's rows of scores, whole
  rows.begin[rank - 1] = 0;
  rows.end[rank - 1] = s;
  const int64_t n0 = r.begin[rank - 1], n1 = r.end[rank - 1];
  std::vector<float> p(static_cast<size_t>(s));
  for_each_row<2>(rows, {score_strides.data(), mask_strides.data()},
                  [&](const int64_t* index, const std::array<int64_t, 2>& at, int64_t) {
                    const int64_t flat = at[0] / std::max<int64_t>(1, m * s);
                    const int64_t i = index[rank - 2];
                    const float* q = args.inputs[0].data + (flat * m + i) * d;
                    const float* kt = args.inputs[1].data + flat * d * s;
                    const float* v = args.inputs[2].data + flat * s * dv;
                    std::fill(p.begin(), p.end(), 0.0f);
                    for (int64_t k = 0; k < d; ++k)
                      for (int64_t j = 0; j < s; ++j) p[j] += q[k] * kt[k * s + j];
                    float max = -std::numeric_limits<float>::infinity();
                    for (int64_t j = 0; j < s; ++j) {
                      float z = alpha * p[j];
                      if (mask) z += mask[at[1] + j * mask_step];
                      p[j] = z;
                      max = std::max(max, z);
                    }
                    float sum = 0.0f;
                    for (int64_t j = 0; j < s; ++j) sum += std::exp(p[j] - max);
                    for (int64_t j = 0; j < s; ++j) {
                      p[j] = std::exp(p[j] - max) / sum;
                      if (nan_to_zero && std::isnan(p[j])) p[j] = 0.0f;
                    }
                    float* y = args.output.data + (flat * m + i) * dv;
                    std::fill(y + n0, y + n1, 0.0f);
                    for (int64_t j = 0; j < s; ++j)
                      for (int64_t n = n0; n < n1; ++n) y[n] += p[j] * v[j * dv + n];
                  });
}

}  // namespace tessera::kernels::reference
