// Reference MatMul with numpy semantics: batch dims broadcast, a 1-D A is a
// row vector [1, K] and a 1-D B a column vector [K, 1], their unit dim
// dropped from the output. Each output element sums over k in ascending order,
// then adds the fused bias (input 2, [N]: graph/fuse_matmul_bias.hpp) if
// any, then the fused residual (input 3, the output's shape:
// graph/fuse_residual.hpp) if any, then applies the fused activation: the
// same rounding as MatMul, Add, Add, activation run one after the other.
#include <algorithm>

#include "kernels/activation.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void matmul(const TileArgs& args) {
  const bool has_residual = args.op && args.op->attrs.fused_residual;
  check_tile_args(args, has_residual ? 4 : 2, has_residual ? 4 : 3);
  const graph::Shape& a_shape = *args.inputs[0].shape;
  const graph::Shape& b_shape = *args.inputs[1].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const size_t a_rank = a_shape.size(), b_rank = b_shape.size();
  if (a_rank == 0 || b_rank == 0) fail(args, "MatMul operands must have rank >= 1");
  const int64_t rows = a_rank == 1 ? 1 : a_shape[a_rank - 2];
  const int64_t depth = a_shape[a_rank - 1];
  const int64_t b_depth = b_rank == 1 ? b_shape[0] : b_shape[b_rank - 2];
  const int64_t cols = b_rank == 1 ? 1 : b_shape[b_rank - 1];
  const graph::Shape a_batch(a_shape.begin(), a_shape.end() - std::min<size_t>(a_rank, 2));
  const graph::Shape b_batch(b_shape.begin(), b_shape.end() - std::min<size_t>(b_rank, 2));
  const size_t batch_rank = std::max(a_batch.size(), b_batch.size());
  graph::Shape batch(batch_rank, 1);
  bool ok = depth == b_depth;
  for (const graph::Shape* s : {&a_batch, &b_batch}) {
    const size_t shift = batch_rank - s->size();
    for (size_t d = 0; d < s->size(); ++d) {
      const int64_t size = (*s)[d];
      if (batch[d + shift] == 1)
        batch[d + shift] = size;
      else if (size != 1 && size != batch[d + shift])
        ok = false;
    }
  }
  graph::Shape expected = batch;
  if (a_rank > 1) expected.push_back(rows);
  if (b_rank > 1) expected.push_back(cols);
  if (!ok || expected != y_shape)
    fail(args, "A " + graph::shape_to_string(a_shape) + " and B " +
                   graph::shape_to_string(b_shape) + " do not give output " +
                   graph::shape_to_string(y_shape));
  const float* bias = args.input_count >= 3 ? args.inputs[2].data : nullptr;
  const float* residual = has_residual ? args.inputs[3].data : nullptr;
  if (residual && *args.inputs[3].shape != y_shape)
    fail(args, "fused residual " + graph::shape_to_string(*args.inputs[3].shape) +
                   " is not the output's shape " + graph::shape_to_string(y_shape));
  if (args.input_count >= 3 && (b_rank != 2 || *args.inputs[2].shape != graph::Shape{cols}))
    fail(args, "fused bias " + graph::shape_to_string(*args.inputs[2].shape) +
                   " is not [N] for a 2-D B " + graph::shape_to_string(b_shape));

  // Walk the batch part of the region; one trailing unit dim lets
  // for_each_row visit every batch index (also when there are none).
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  graph::Region batch_region;
  batch_region.begin.assign(r.begin.begin(), r.begin.begin() + batch_rank);
  batch_region.end.assign(r.end.begin(), r.end.begin() + batch_rank);
  batch_region.begin.push_back(0);
  batch_region.end.push_back(1);
  size_t next = batch_rank;
  const int64_t i_begin = a_rank > 1 ? r.begin[next] : 0;
  const int64_t i_end = a_rank > 1 ? r.end[next++] : 1;
  const int64_t j_begin = b_rank > 1 ? r.begin[next] : 0;
  const int64_t j_end = b_rank > 1 ? r.end[next] : 1;

  std::vector<int64_t> y_strides = graph::shape_strides(batch);
  std::vector<int64_t> a_strides = broadcast_strides(a_batch, batch);
  std::vector<int64_t> b_strides = broadcast_strides(b_batch, batch);
  for (size_t d = 0; d < batch_rank; ++d) {
    y_strides[d] *= rows * cols;
    a_strides[d] *= rows * depth;
    b_strides[d] *= depth * cols;
  }
  y_strides.push_back(0);
  a_strides.push_back(0);
  b_strides.push_back(0);

  const float* a = args.inputs[0].data;
  const float* b = args.inputs[1].data;
  float* y = args.output.data;
  for_each_row<3>(batch_region, {y_strides.data(), a_strides.data(), b_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 3>& offsets, int64_t) {
                    const float* a_mat = a + offsets[1];
                    const float* b_mat = b + offsets[2];
                    for (int64_t i = i_begin; i < i_end; ++i) {
                      // The output row accumulates; per element still in k order.
                      float* row = y + offsets[0] + i * cols;
                      std::fill(row + j_begin, row + j_end, 0.0f);
                      for (int64_t k = 0; k < depth; ++k) {
                        const float a_ik = a_mat[i * depth + k];
                        const float* b_k = b_mat + k * cols;
                        for (int64_t j = j_begin; j < j_end; ++j) row[j] += a_ik * b_k[j];
                      }
                      if (bias)
                        for (int64_t j = j_begin; j < j_end; ++j) row[j] += bias[j];
                      if (residual) {
                        const float* res = residual + offsets[0] + i * cols;
                        for (int64_t j = j_begin; j < j_end; ++j) row[j] += res[j];
                      }
                      apply_activation(args.op->attrs, row + j_begin, j_end - j_begin);
                    }
                  });
}

}  // namespace tessera::kernels::reference
