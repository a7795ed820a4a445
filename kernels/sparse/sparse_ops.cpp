// "cpu.matmul_sparse" and "cpu.gemm_sparse": MatMul and Gemm with a constant
// sparse weight on kernels/sparse/sparse_gemm.hpp. The layout is chosen and
// B packed once at prepare time; a tile is one sparse_gemm_tile() call per
// batch index (MatMul) or one call (Gemm).
#include "kernels/sparse/sparse_ops.hpp"

#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/int8_ops.hpp"
#include "kernels/sparse/sparse_gemm.hpp"

namespace tessera::kernels::sparse {
namespace {

constexpr std::string_view kMatMulVariant = "cpu.matmul_sparse";
constexpr std::string_view kGemmVariant = "cpu.gemm_sparse";

struct MatMulSparsePrepared {
  SparseMatrix b;
};

struct GemmSparsePrepared {
  SparseMatrix b;  // alpha·op(B) as [K, N]
  int64_t rows = 0, depth = 0, cols = 0;
  cpu::PreparedGemmC c;
};

// nullopt when the layout is expected to beat the dense SGEMM and the
// int8 kernel that an 8-bit weight would otherwise run (int8_cost: these
// variants rank above the int8 ones), else why not. A weight both pruned
// and annotated 8 bits runs whichever is faster: unstructured 90% sparse
// as CSR (~0.17x the dense time) rather than dense int8 (0.65x on AVX2),
// 32x32 blocks at 95% as int8 blocks.
std::optional<std::string> sparse_enough(const SparseLayoutChoice& choice,
                                         std::optional<double> int8) {
  if (choice.relative_cost < 1.0 && int8 && *int8 <= choice.relative_cost) {
    char why[96];
    std::snprintf(why, sizeof why, "; the 8-bit weight's int8 kernel is faster (est. %.2fx)",
                  *int8);
    return choice.summary + why;
  }
  if (choice.relative_cost < 1.0) return std::nullopt;
  char crossovers[160];
  std::snprintf(crossovers, sizeof crossovers,
                "CSR pays below %.0f%% density, 16x1 blocks below %.0f%% and 32x32 blocks below "
                "%.0f%% block coverage",
                100.0 * csr_density_crossover(), 100.0 * bsr_density_crossover(2),
                100.0 * bsr_density_crossover(3));
  return choice.summary + ": not sparse enough to beat the dense kernel (" + crossovers + ")";
}

SparseLayoutChoice gemm_layout(const cpu::GemmWeight& w) {
  return choose_sparse_layout(w.data, w.k, w.n, w.ldb, w.transposed);
}

}  // namespace

std::optional<std::string> matmul_sparse_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs) {
  if (auto why = cpu::matmul_applies(op, inputs)) return why;
  const graph::Shape& b = *inputs[1].shape;
  return sparse_enough(choose_sparse_layout(inputs[1].data, b[0], b[1], b[1], false),
                       cpu::int8_cost(op, inputs[1].data, b[0], b[1], b[1], false));
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
  if (auto why = cpu::gemm_constant_b_applies(op, inputs)) return why;
  const cpu::GemmWeight w = cpu::gemm_weight(op, inputs);
  return sparse_enough(gemm_layout(w), cpu::int8_cost(op, w.data, w.k, w.n, w.ldb, w.transposed));
}

PreparedOp prepare_gemm_sparse(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = cpu::gemm_constant_b_applies(op, inputs)) cpu::fail_op(kGemmVariant, &op, *why);
  auto prep = std::make_shared<GemmSparsePrepared>();
  const cpu::GemmWeight w = cpu::gemm_weight(op, inputs);
  prep->rows = (*inputs[0].shape)[0];
  prep->depth = w.k;
  prep->cols = w.n;
  prep->b = pack_sparse_b(w.data, w.k, w.n, w.ldb, w.transposed, gemm_layout(w).layout);
  prep->c = cpu::prepare_gemm_c(op, inputs, prep->rows, prep->cols);
  return prep;
}

void gemm_sparse(const TileArgs& args) {
  const auto* prep = static_cast<const GemmSparsePrepared*>(args.prepared);
  const int64_t m = prep ? prep->rows : 0, k = prep ? prep->depth : 0, n = prep ? prep->cols : 0;
  static const cpu::PreparedGemmC kNoC;
  cpu::run_prepared_gemm(kGemmVariant, args, m, k, n, prep ? prep->c : kNoC,
                         [&](const GemmTile& tile, const GemmEpilogue& ep) {
                           sparse_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n,
                                            tile, ep);
                         });
}

}  // namespace tessera::kernels::sparse
