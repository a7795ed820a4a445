// Reference Gemm: Y = alpha * op(A) * op(B) + beta * C (ONNX Gemm). Each
// output element sums over k in ascending order, then scales and adds C,
// then the fused residual (input 3, [M, N]: graph/fuse_residual.hpp) if any,
// then the fused activation.
#include <algorithm>

#include "kernels/activation.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {

void gemm(const TileArgs& args) {
  const bool has_residual = args.op && args.op->attrs.fused_residual;
  check_tile_args(args, has_residual ? 4 : 2, has_residual ? 4 : 3);
  const graph::OpAttributes& attrs = args.op->attrs;
  const graph::Shape& a_shape = *args.inputs[0].shape;
  const graph::Shape& b_shape = *args.inputs[1].shape;
  const graph::Shape& y_shape = *args.output.shape;
  if (a_shape.size() != 2 || b_shape.size() != 2 || y_shape.size() != 2)
    fail(args, "A, B and Y must be 2-D (A " + graph::shape_to_string(a_shape) + ", B " +
                   graph::shape_to_string(b_shape) + ")");
  const int64_t rows = attrs.trans_a ? a_shape[1] : a_shape[0];
  const int64_t depth = attrs.trans_a ? a_shape[0] : a_shape[1];
  const int64_t b_depth = attrs.trans_b ? b_shape[1] : b_shape[0];
  const int64_t cols = attrs.trans_b ? b_shape[0] : b_shape[1];
  if (depth != b_depth || y_shape != graph::Shape{rows, cols})
    fail(args, "A " + graph::shape_to_string(a_shape) + " and B " +
                   graph::shape_to_string(b_shape) + " do not give output " +
                   graph::shape_to_string(y_shape));
  // op(A)(i, k) = a[i * a_row + k * a_depth]; op(B)(k, j) = b[k * b_depth_step + j * b_col].
  const int64_t a_row = attrs.trans_a ? 1 : depth, a_depth = attrs.trans_a ? rows : 1;
  const int64_t b_depth_step = attrs.trans_b ? 1 : cols, b_col = attrs.trans_b ? depth : 1;

  const float* c = nullptr;
  int64_t c_row = 0, c_col = 0;  // broadcast strides of C over [M, N]
  const float* residual = has_residual ? args.inputs[3].data : nullptr;
  if (residual && *args.inputs[3].shape != y_shape)
    fail(args, "fused residual " + graph::shape_to_string(*args.inputs[3].shape) +
                   " is not the output's shape " + graph::shape_to_string(y_shape));
  if (args.input_count >= 3) {
    const graph::Shape& c_shape = *args.inputs[2].shape;
    if (c_shape.size() > 2) fail(args, "C " + graph::shape_to_string(c_shape) + " has rank > 2");
    const graph::Shape target{rows, cols};
    for (size_t d = 0; d < c_shape.size(); ++d)
      if (c_shape[d] != 1 && c_shape[d] != target[d + 2 - c_shape.size()])
        fail(args, "C " + graph::shape_to_string(c_shape) + " does not broadcast to " +
                       graph::shape_to_string(target));
    const std::vector<int64_t> strides = broadcast_strides(c_shape, target);
    c_row = strides[0];
    c_col = strides[1];
    c = args.inputs[2].data;
  }

  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const int64_t j_begin = r.begin[1], j_end = r.end[1];
  const float* a = args.inputs[0].data;
  const float* b = args.inputs[1].data;
  const float alpha = attrs.alpha, beta = attrs.beta;
  for (int64_t i = r.begin[0]; i < r.end[0]; ++i) {
    float* row = args.output.data + i * cols;
    if (b_col == 1) {
      // B rows are contiguous: the output row is the accumulator, and per
      // element the sum is still taken in ascending k.
      std::fill(row + j_begin, row + j_end, 0.0f);
      for (int64_t k = 0; k < depth; ++k) {
        const float a_ik = a[i * a_row + k * a_depth];
        const float* b_k = b + k * b_depth_step;
        for (int64_t j = j_begin; j < j_end; ++j) row[j] += a_ik * b_k[j];
      }
    } else {
      // B transposed: a dot product over contiguous k, the same sum order.
      for (int64_t j = j_begin; j < j_end; ++j) {
        const float* b_j = b + j * b_col;
        float sum = 0.0f;
        for (int64_t k = 0; k < depth; ++k) sum += a[i * a_row + k * a_depth] * b_j[k];
        row[j] = sum;
      }
    }
    if (c) {
      const float* c_i = c + i * c_row;
      for (int64_t j = j_begin; j < j_end; ++j) row[j] = alpha * row[j] + beta * c_i[j * c_col];
    } else {
      for (int64_t j = j_begin; j < j_end; ++j) row[j] = alpha * row[j];
    }
    if (residual)
      for (int64_t j = j_begin; j < j_end; ++j) row[j] += residual[i * cols + j];
    apply_activation(attrs, row + j_begin, j_end - j_begin);
  }
}

}  // namespace tessera::kernels::reference
