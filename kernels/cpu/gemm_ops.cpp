// "cpu.gemm" and "cpu.matmul": ONNX Gemm and MatMul with constant B on the
// packed SGEMM (kernels/cpu/gemm.hpp). B is packed once at prepare time,
// alpha folded into it; a tile of the output is one gemm_tile() call per
// chunk of rows, A read in place (Gemm's trans_a: A^T rows gathered into a
// per-thread panel first).
#include <algorithm>
#include <memory>
#include <vector>

#include "graph/error.hpp"
#include "kernels/activation.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kGemmVariant = "cpu.gemm";
constexpr std::string_view kMatMulVariant = "cpu.matmul";
constexpr std::string_view kMatMulBatchedVariant = "cpu.matmul_batched";

// A trans_a panel holds at most this many floats (512 KiB, in L2).
constexpr int64_t kTransposedPanelFloats = int64_t{1} << 17;
constexpr int64_t kMinPanelRows = 16;

// How beta·C enters the epilogue.
enum class GemmCForm {
  kNone,
  kPerColumn,  // C is [N] or [1, N]; or a scalar, materialised as [N] at prepare
  kPerRow,     // C is [M, 1]
  kFull,       // C is [M, N]: the epilogue's residual
  kScalar,     // a scalar C that is not constant: added after the GEMM
};

struct GemmPrepared {
  PackedMatrix b;  // alpha·op(B) as [K, N]
  int64_t rows = 0, depth = 0, cols = 0;
  GemmCForm c_form = GemmCForm::kNone;
  // beta·C when C is constant (per column [N], per row [M] or full [M, N]);
  // empty when C is read from the tile's input at run time.
  std::vector<float> c_scaled;
};

struct MatMulPrepared {
  PackedMatrix b;  // [K, N]
};

std::optional<std::string> gemm_applies_with(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs, int64_t& rows,
                                             int64_t& depth, int64_t& cols, GemmCForm& c_form) {
  if (op.type != graph::OpType::Gemm) return "not a Gemm";
  // A fused residual (graph/fuse_residual.hpp) is input 3, after C.
  const size_t count = op.attrs.fused_residual ? 4 : 3;
  if (inputs.size() < (op.attrs.fused_residual ? 4 : 2) || inputs.size() > count)
    return op.attrs.fused_residual ? "expected 4 inputs (A, B, C, residual)"
                                   : "expected 2 or 3 inputs";
  for (const ConstTensorView& input : inputs)
    if (!input.shape) return "an input has no shape";
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  if (a.size() != 2 || b.size() != 2)
    return "A and B must be 2-D (A " + graph::shape_to_string(a) + ", B " +
           graph::shape_to_string(b) + ")";
  const graph::OpAttributes& attrs = op.attrs;
  rows = attrs.trans_a ? a[1] : a[0];
  depth = attrs.trans_a ? a[0] : a[1];
  cols = attrs.trans_b ? b[0] : b[1];
  if ((attrs.trans_b ? b[1] : b[0]) != depth)
    return "A " + graph::shape_to_string(a) + " and B " + graph::shape_to_string(b) +
           " do not multiply";
  if (!inputs[1].data) return "B is not constant";
  if (op.attrs.fused_residual && *inputs[3].shape != graph::Shape{rows, cols})
    return "fused residual " + graph::shape_to_string(*inputs[3].shape) + " is not [" +
           std::to_string(rows) + "," + std::to_string(cols) + "]";
  c_form = GemmCForm::kNone;
  if (inputs.size() >= 3) {
    const graph::Shape& c = *inputs[2].shape;
    if (c.size() > 2) return "C " + graph::shape_to_string(c) + " has rank > 2";
    const int64_t c_rows = c.size() == 2 ? c[0] : 1;
    const int64_t c_cols = c.empty() ? 1 : c.back();
    if ((c_rows != 1 && c_rows != rows) || (c_cols != 1 && c_cols != cols))
      return "C " + graph::shape_to_string(c) + " does not broadcast to [" + std::to_string(rows) +
             "," + std::to_string(cols) + "]";
    if (c_rows == 1 && c_cols == 1)
      c_form = inputs[2].data ? GemmCForm::kPerColumn : GemmCForm::kScalar;
    else if (c_rows == 1)
      c_form = GemmCForm::kPerColumn;
    else if (c_cols == 1)
      c_form = GemmCForm::kPerRow;
    else
      c_form = GemmCForm::kFull;
    // Both would be the epilogue's one residual operand.
    if (c_form == GemmCForm::kFull && op.attrs.fused_residual)
      return "C is a full [M, N] matrix and there is a fused residual";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> matmul_bias_problem(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  if (op.attrs.fused_residual ? inputs.size() != 4 : inputs.size() != 2 && inputs.size() != 3)
    return op.attrs.fused_residual ? "expected 4 inputs (A, B, bias, residual)"
                                   : "expected 2 or 3 inputs";
  for (const ConstTensorView& input : inputs)
    if (!input.shape) return "an input has no shape";
  if (inputs.size() >= 3) {
    const graph::Shape& b = *inputs[1].shape;
    if (b.size() != 2 || *inputs[2].shape != graph::Shape{b[1]})
      return "fused bias " + graph::shape_to_string(*inputs[2].shape) + " is not [N] for B " +
             graph::shape_to_string(b);
    if (inputs.size() == 4) {  // the residual: A's shape with N columns, like the output
      graph::Shape y = *inputs[0].shape;
      if (!y.empty()) y.back() = b[1];
      if (*inputs[3].shape != y)
        return "fused residual " + graph::shape_to_string(*inputs[3].shape) + " is not " +
               graph::shape_to_string(y);
    }
  }
  return std::nullopt;
}

GemmEpilogue matmul_epilogue(const TileArgs& args) {
  const graph::OpAttributes& attrs = args.op->attrs;
  GemmEpilogue ep = activation_epilogue(attrs);
  if (args.input_count >= 3) {  // the fused bias [N], indexed by absolute column like C
    ep.bias = args.inputs[2].data;
    ep.bias_kind = GemmBias::kPerColumn;
  }
  if (args.input_count == 4) {  // the fused residual, the output's shape (row-major like Y)
    ep.residual = args.inputs[3].data;
    ep.ld_residual = args.output.shape->back();
  }
  return ep;
}

namespace {

// Rows per gemm_tile() call: all of them when A is read in place, else as
// many as fit the transposed panel.
int64_t rows_per_call(bool transposed_a, int64_t depth, int64_t rows) {
  if (!transposed_a) return std::max<int64_t>(rows, 1);
  return std::max(kMinPanelRows, kTransposedPanelFloats / std::max<int64_t>(depth, 1));
}

}  // namespace

std::optional<std::string> gemm_applies(const graph::Operator& op,
                                        std::span<const ConstTensorView> inputs) {
  int64_t rows = 0, depth = 0, cols = 0;
  GemmCForm form = GemmCForm::kNone;
  return gemm_applies_with(op, inputs, rows, depth, cols, form);
}

PreparedOp prepare_gemm(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  auto prep = std::make_shared<GemmPrepared>();
  if (auto why = gemm_applies_with(op, inputs, prep->rows, prep->depth, prep->cols, prep->c_form))
    fail_op(kGemmVariant, &op, *why);
  const graph::OpAttributes& attrs = op.attrs;
  const int64_t k = prep->depth, n = prep->cols, m = prep->rows;
  const graph::Shape& b_shape = *inputs[1].shape;
  const int64_t ldb = b_shape[1];
  if (attrs.alpha == 1.0f) {
    prep->b = pack_b(inputs[1].data, k, n, ldb, attrs.trans_b, gemm_microkernel_for_shape(m, n));
  } else {
    std::vector<float> scaled(inputs[1].data, inputs[1].data + b_shape[0] * b_shape[1]);
    for (float& v : scaled) v *= attrs.alpha;
    prep->b = pack_b(scaled.data(), k, n, ldb, attrs.trans_b, gemm_microkernel_for_shape(m, n));
  }
  if (inputs.size() >= 3 && inputs[2].data) {
    const float* c = inputs[2].data;
    const float beta = attrs.beta;
    const bool scalar = graph::shape_numel(*inputs[2].shape) == 1;
    switch (prep->c_form) {
      case GemmCForm::kPerColumn:
        prep->c_scaled.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) prep->c_scaled[j] = beta * c[scalar ? 0 : j];
        break;
      case GemmCForm::kPerRow:
        prep->c_scaled.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) prep->c_scaled[i] = beta * c[i];
        break;
      case GemmCForm::kFull:
        prep->c_scaled.assign(c, c + m * n);
        for (float& v : prep->c_scaled) v *= beta;
        break;
      case GemmCForm::kNone:
      case GemmCForm::kScalar:
        break;
    }
  }
  return prep;
}

void gemm(const TileArgs& args) {
  const bool has_residual = args.op && args.op->attrs.fused_residual;
  check_dense_tile_args(kGemmVariant, args, has_residual ? 4 : 2, has_residual ? 4 : 3,
                        /*needs_prepared=*/true);
  const auto& prep = *static_cast<const GemmPrepared*>(args.prepared);
  const graph::OpAttributes& attrs = args.op->attrs;
  const int64_t m = prep.rows, k = prep.depth, n = prep.cols;
  const graph::Shape& a_shape = *args.inputs[0].shape;
  if (a_shape.size() != 2 || (attrs.trans_a ? a_shape[1] : a_shape[0]) != m ||
      (attrs.trans_a ? a_shape[0] : a_shape[1]) != k || *args.output.shape != graph::Shape{m, n})
    fail_op(kGemmVariant, args.op,
            "shapes differ from the prepared ones (A " + graph::shape_to_string(a_shape) + ", Y " +
                graph::shape_to_string(*args.output.shape) + ")");
  if ((prep.c_form != GemmCForm::kNone) != (args.input_count >= 3))
    fail_op(kGemmVariant, args.op, "C present at prepare time but not now, or the reverse");
  const float* residual = has_residual ? args.inputs[3].data : nullptr;
  if (residual && (*args.inputs[3].shape != graph::Shape{m, n} || prep.c_form == GemmCForm::kFull))
    fail_op(kGemmVariant, args.op,
            "fused residual " + graph::shape_to_string(*args.inputs[3].shape) +
                " is not [M, N], or C is [M, N] too");
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  // beta·C: the prepared copy when C is constant, else C itself when beta is
  // 1; otherwise (a run-time C with beta != 1, or a run-time scalar) the
  // GEMM runs bare and C and the activation are applied afterwards.
  const float* c_in = args.input_count >= 3 ? args.inputs[2].data : nullptr;
  const float* c_eff = !prep.c_scaled.empty() ? prep.c_scaled.data()
                       : (c_in && attrs.beta == 1.0f && prep.c_form != GemmCForm::kScalar)
                           ? c_in
                           : nullptr;
  const bool after_pass = c_in && !c_eff;
  GemmEpilogue ep;
  if (!after_pass) {
    ep = activation_epilogue(attrs);
    if (prep.c_form == GemmCForm::kPerColumn) {
      ep.bias = c_eff;
      ep.bias_kind = GemmBias::kPerColumn;
    } else if (prep.c_form == GemmCForm::kPerRow) {
      ep.bias = c_eff;
      ep.bias_kind = GemmBias::kPerRow;
    } else if (prep.c_form == GemmCForm::kFull) {
      ep.residual = c_eff;
      ep.ld_residual = n;
    }
    if (residual) {  // after C, before the activation (the reference's order)
      ep.residual = residual;
      ep.ld_residual = n;
    }
  }

  const int64_t i0 = r.begin[0], i1 = r.end[0], j0 = r.begin[1], j1 = r.end[1];
  const float* a = args.inputs[0].data;
  float* y = args.output.data;
  if (!attrs.trans_a) {
    gemm_tile(a, k, prep.b, y, n, {.m0 = i0, .m1 = i1, .n0 = j0, .n1 = j1}, ep);
  } else {
    // A is [K, M]: gather the chunk's rows of A^T, then offset C, the row
    // bias and the residual to the chunk's first row.
    thread_local std::vector<float> panel;
    const int64_t step = rows_per_call(true, k, m);
    float* at = grown(panel, std::min(step, i1 - i0) * k);
    for (int64_t i = i0; i < i1; i += step) {
      const int64_t count = std::min(step, i1 - i);
      transpose_panel(a + i, m, k, count, at, k);
      GemmEpilogue chunk_ep = ep;
      if (ep.bias_kind == GemmBias::kPerRow) chunk_ep.bias = ep.bias + i;
      if (ep.residual) chunk_ep.residual = ep.residual + i * n;
      gemm_tile(at, k, prep.b, y + i * n, n, {.m0 = 0, .m1 = count, .n0 = j0, .n1 = j1}, chunk_ep);
    }
  }

  if (after_pass) {
    const graph::Shape& c_shape = *args.inputs[2].shape;
    const int64_t c_row = c_shape.size() == 2 && c_shape[0] != 1 ? c_shape.back() : 0;
    const int64_t c_col = !c_shape.empty() && c_shape.back() != 1 ? 1 : 0;
    const float beta = attrs.beta;
    const GemmEpilogue activation = activation_epilogue(attrs);
    for (int64_t i = i0; i < i1; ++i) {
      float* row = y + i * n;
      for (int64_t j = j0; j < j1; ++j) row[j] += beta * c_in[i * c_row + j * c_col];
      if (residual)
        for (int64_t j = j0; j < j1; ++j) row[j] += residual[i * n + j];
      apply_activation_span(activation, row + j0, j1 - j0);
    }
  }
}

std::optional<std::string> matmul_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::MatMul) return "not a MatMul";
  if (auto why = matmul_bias_problem(op, inputs)) return why;
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  if (a.size() < 2) return "A has rank " + std::to_string(a.size()) + " (needs rank >= 2)";
  if (b.size() != 2)
    return "B " + graph::shape_to_string(b) + " is not 2-D (batched B uses the reference kernel)";
  if (a.back() != b[0])
    return "A " + graph::shape_to_string(a) + " and B " + graph::shape_to_string(b) +
           " do not multiply";
  if (!inputs[1].data) return "B is not constant";
  return std::nullopt;
}

PreparedOp prepare_matmul(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_applies(op, inputs)) fail_op(kMatMulVariant, &op, *why);
  auto prep = std::make_shared<MatMulPrepared>();
  const graph::Shape& b = *inputs[1].shape;
  const int64_t rows = graph::shape_numel(*inputs[0].shape) / std::max<int64_t>(b[0], 1);
  prep->b = pack_b(inputs[1].data, b[0], b[1], b[1], /*transposed=*/false,
                   gemm_microkernel_for_shape(rows, b[1]));
  return prep;
}

void matmul(const TileArgs& args) {
  const auto* prep = static_cast<const MatMulPrepared*>(args.prepared);
  const int64_t k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_matmul(kMatMulVariant, args, k, n,
                      [&](const GemmTile& tile, const GemmEpilogue& ep) {
                        gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile, ep);
                      });
}

std::optional<std::string> matmul_batched_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::MatMul) return "not a MatMul";
  if (auto why = matmul_bias_problem(op, inputs)) return why;
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  if (a.size() < 2 || a.size() != b.size())
    return "A " + graph::shape_to_string(a) + " and B " + graph::shape_to_string(b) +
           " are not of the same rank >= 2";
  if (a.back() != b[b.size() - 2])
    return "A " + graph::shape_to_string(a) + " and B " + graph::shape_to_string(b) +
           " do not multiply";
  for (size_t d = 0; d + 2 < a.size(); ++d)
    if (b[d] != a[d] && b[d] != 1)
      return "B " + graph::shape_to_string(b) + " broadcasts over A " + graph::shape_to_string(a) +
             " in a way this variant does not take";
  return std::nullopt;
}

void matmul_batched(const TileArgs& args) {
  check_dense_tile_args(kMatMulBatchedVariant, args, 2, 4, /*needs_prepared=*/false);
  const graph::Shape& a_shape = *args.inputs[0].shape;
  const graph::Shape& b_shape = *args.inputs[1].shape;
  if (auto why = matmul_batched_applies(*args.op, {args.inputs, args.input_count}))
    fail_op(kMatMulBatchedVariant, args.op, *why);
  const size_t rank = a_shape.size();
  const int64_t m = a_shape[rank - 2], k = a_shape[rank - 1], n = b_shape[rank - 1];
  graph::Shape expected = a_shape;
  expected.back() = n;
  if (*args.output.shape != expected)
    fail_op(kMatMulBatchedVariant, args.op,
            "output " + graph::shape_to_string(*args.output.shape) + " is not " +
                graph::shape_to_string(expected));
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const GemmEpilogue ep = matmul_epilogue(args);
  // Walk the region's batch box; each batch index is one [M, K]·[K, N]
  // product whose B (broadcast where B's dim is 1) is packed for this tile.
  const GemmTile rows_cols{.m0 = r.begin[rank - 2],
                           .m1 = r.end[rank - 2],
                           .n0 = r.begin[rank - 1],
                           .n1 = r.end[rank - 1]};
  for_each_batch_index(r, rank - 2, [&](const std::vector<int64_t>& index) {
    int64_t flat_a = 0, flat_b = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      flat_a = flat_a * a_shape[d] + index[d];
      flat_b = flat_b * b_shape[d] + (b_shape[d] == 1 ? 0 : index[d]);
    }
    thread_local PackedMatrix b;  // this thread's, repacked per batch index
    pack_b_into(b, args.inputs[1].data + flat_b * k * n, k, n, n, /*transposed=*/false,
                gemm_default_microkernel());
    GemmEpilogue batch_ep = ep;  // the residual, like Y, at this batch index's matrix
    if (ep.residual) batch_ep.residual = ep.residual + flat_a * m * n;
    gemm_tile(args.inputs[0].data + flat_a * m * k, k, b, args.output.data + flat_a * m * n, n,
              rows_cols, batch_ep);
  });
}

}  // namespace tessera::kernels::cpu
