// "cpu.matmul_sparse" and "cpu.gemm_sparse": MatMul and Gemm with a constant
// sparse weight on kernels/sparse/sparse_gemm.hpp. The layout is chosen and
// B packed once at prepare time; a tile is one sparse_gemm_tile() call per
// batch index (MatMul) or one call (Gemm).
#include "kernels/sparse/sparse_ops.hpp"

#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/sparse/sparse_gemm.hpp"

namespace tessera::kernels::sparse {
namespace {

constexpr std::string_view kMatMulVariant = "cpu.matmul_sparse";
constexpr std::string_view kGemmVariant = "cpu.gemm_sparse";

struct MatMulSparsePrepared {
  SparseMatrix b;
};

// How beta·C enters the epilogue (all constant, prepared once).
enum class GemmCForm { kNone, kPerColumn, kPerRow, kFull };

struct GemmSparsePrepared {
  SparseMatrix b;  // alpha·op(B) as [K, N]
  int64_t rows = 0, depth = 0, cols = 0;
  GemmCForm c_form = GemmCForm::kNone;
  std::vector<float> c_scaled;  // beta·C: [N], [M] or [M, N]
};

// nullopt when the layout is expected to beat the dense SGEMM, else why not.
std::optional<std::string> sparse_enough(const SparseLayoutChoice& choice) {
  if (choice.relative_cost < 1.0) return std::nullopt;
  char crossovers[160];
  std::snprintf(crossovers, sizeof crossovers,
                "CSR pays below %.0f%% density, 16x1 blocks below %.0f%% and 32x32 blocks below "
                "%.0f%% block coverage",
                100.0 * csr_density_crossover(), 100.0 * bsr_density_crossover(2),
                100.0 * bsr_density_crossover(3));
  return choice.summary + ": not sparse enough to beat the dense kernel (" + crossovers + ")";
}

// B · alpha as [K, N] (or [N, K] when transposed), copied only when alpha != 1.
const float* scaled_weight(const float* b, size_t count, float alpha, std::vector<float>& copy) {
  if (alpha == 1.0f) return b;
  copy.assign(b, b + count);
  for (float& v : copy) v *= alpha;
  return copy.data();
}

std::optional<std::string> gemm_shape_applies(const graph::Operator& op,
                                              std::span<const ConstTensorView> inputs) {
  if (auto why = cpu::gemm_applies(op, inputs)) return why;
  if (op.attrs.trans_a) return "trans_a is not supported (the dense kernel transposes A)";
  if (inputs.size() >= 3 && !inputs[2].data) return "C is not constant";
  return std::nullopt;
}

SparseLayoutChoice gemm_layout(const graph::Operator& op, std::span<const ConstTensorView> inputs,
                               std::vector<float>& copy, const float*& weight) {
  const graph::Shape& b = *inputs[1].shape;
  weight = scaled_weight(inputs[1].data, static_cast<size_t>(b[0] * b[1]), op.attrs.alpha, copy);
  const int64_t k = op.attrs.trans_b ? b[1] : b[0], n = op.attrs.trans_b ? b[0] : b[1];
  return choose_sparse_layout(weight, k, n, b[1], op.attrs.trans_b);
}

}  // namespace

std::optional<std::string> matmul_sparse_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs) {
  if (auto why = cpu::matmul_applies(op, inputs)) return why;
  const graph::Shape& b = *inputs[1].shape;
  return sparse_enough(choose_sparse_layout(inputs[1].data, b[0], b[1], b[1], false));
}

PreparedOp prepare_matmul_sparse(const graph::Operator& op,
                                 std::span<const ConstTensorView> inputs) {
  if (auto why = cpu::matmul_applies(op, inputs)) cpu::fail_op(kMatMulVariant, &op, *why);
  const graph::Shape& b = *inputs[1].shape;
  const SparseLayoutChoice choice = choose_sparse_layout(inputs[1].data, b[0], b[1], b[1], false);
  auto prep = std::make_shared<MatMulSparsePrepared>();
  prep->b = pack_sparse_b(inputs[1].data, b[0], b[1], b[1], false, choice.layout);
  return prep;
}

void matmul_sparse(const TileArgs& args) {
  const auto* prep = static_cast<const MatMulSparsePrepared*>(args.prepared);
  const int64_t k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  cpu::run_prepared_matmul(
      kMatMulVariant, args, k, n, [&](const GemmTile& tile, const GemmEpilogue& ep) {
        sparse_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile, ep);
      });
}

std::optional<std::string> gemm_sparse_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_shape_applies(op, inputs)) return why;
  std::vector<float> copy;
  const float* weight = nullptr;
  return sparse_enough(gemm_layout(op, inputs, copy, weight));
}

PreparedOp prepare_gemm_sparse(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_shape_applies(op, inputs)) cpu::fail_op(kGemmVariant, &op, *why);
  auto prep = std::make_shared<GemmSparsePrepared>();
  const graph::OpAttributes& attrs = op.attrs;
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  prep->rows = a[0];
  prep->depth = a[1];
  prep->cols = attrs.trans_b ? b[0] : b[1];
  std::vector<float> copy;
  const float* weight = nullptr;
  const SparseLayoutChoice choice = gemm_layout(op, inputs, copy, weight);
  prep->b = pack_sparse_b(weight, prep->depth, prep->cols, b[1], attrs.trans_b, choice.layout);
  if (inputs.size() >= 3) {
    const graph::Shape& c_shape = *inputs[2].shape;
    const float* c = inputs[2].data;
    const int64_t m = prep->rows, n = prep->cols;
    const int64_t c_rows = c_shape.size() == 2 ? c_shape[0] : 1;
    const int64_t c_cols = c_shape.empty() ? 1 : c_shape.back();
    const float beta = attrs.beta;
    // gemm_applies() checked that C broadcasts to [M, N].
    if (c_rows == 1) {
      prep->c_form = GemmCForm::kPerColumn;
      prep->c_scaled.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) prep->c_scaled[j] = beta * c[c_cols == 1 ? 0 : j];
    } else if (c_cols == 1) {
      prep->c_form = GemmCForm::kPerRow;
      prep->c_scaled.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) prep->c_scaled[i] = beta * c[i];
    } else {
      prep->c_form = GemmCForm::kFull;
      prep->c_scaled.assign(c, c + m * n);
      for (float& v : prep->c_scaled) v *= beta;
    }
  }
  return prep;
}

void gemm_sparse(const TileArgs& args) {
  const bool has_residual = args.op && args.op->attrs.fused_residual;
  cpu::check_dense_tile_args(kGemmVariant, args, has_residual ? 4 : 2, has_residual ? 4 : 3,
                             /*needs_prepared=*/true);
  const auto& prep = *static_cast<const GemmSparsePrepared*>(args.prepared);
  const int64_t m = prep.rows, k = prep.depth, n = prep.cols;
  const graph::Shape& a_shape = *args.inputs[0].shape;
  if (a_shape != graph::Shape{m, k} || *args.output.shape != graph::Shape{m, n})
    cpu::fail_op(kGemmVariant, args.op,
                 "shapes differ from the prepared ones (A " + graph::shape_to_string(a_shape) +
                     ", Y " + graph::shape_to_string(*args.output.shape) + ")");
  if ((prep.c_form != GemmCForm::kNone) != (args.input_count >= 3))
    cpu::fail_op(kGemmVariant, args.op, "C present at prepare time but not now, or the reverse");
  // The fused residual (input 3, [M, N]); cpu::gemm_applies() ruled out a
  // full [M, N] C beside it, which would take the same epilogue slot.
  const float* residual = has_residual ? args.inputs[3].data : nullptr;
  if (residual && (*args.inputs[3].shape != graph::Shape{m, n} || prep.c_form == GemmCForm::kFull))
    cpu::fail_op(kGemmVariant, args.op,
                 "fused residual " + graph::shape_to_string(*args.inputs[3].shape) +
                     " is not [M, N], or C is [M, N] too");
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const graph::OpAttributes& attrs = args.op->attrs;
  GemmEpilogue ep{.activation = cpu::gemm_activation(attrs.activation),
                  .clip_min = attrs.clip_min,
                  .clip_max = attrs.clip_max};
  const float* c = prep.c_scaled.data();
  if (prep.c_form == GemmCForm::kPerColumn) {
    ep.bias = c;
    ep.bias_kind = cpu::GemmBias::kPerColumn;
  } else if (prep.c_form == GemmCForm::kPerRow) {
    ep.bias = c;
    ep.bias_kind = cpu::GemmBias::kPerRow;
  } else if (prep.c_form == GemmCForm::kFull) {
    ep.residual = c;
    ep.ld_residual = n;
  }
  if (residual) {
    ep.residual = residual;
    ep.ld_residual = n;
  }
  sparse_gemm_tile(args.inputs[0].data, k, prep.b, args.output.data, n,
                   {.m0 = r.begin[0], .m1 = r.end[0], .n0 = r.begin[1], .n1 = r.end[1]}, ep);
}

}  // namespace tessera::kernels::sparse
