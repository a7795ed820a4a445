#include "kernels/cpu/int8_ops.hpp"

#include <cstdio>
#include <memory>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_int8.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kMatMul = "cpu.matmul_int8";
constexpr std::string_view kMatMulBlocks = "cpu.matmul_int8_blocks";
constexpr std::string_view kGemm = "cpu.gemm_int8";
constexpr std::string_view kGemmBlocks = "cpu.gemm_int8_blocks";

// The 32×32-block layout pays below this block coverage: a stored block
// costs what the dense layout pays for the same elements, plus its k offset
// and the strip loop (bench_int8 measures both layouts on one weight).
constexpr double kBlockCoverageCrossover = 0.75;

struct MatMulInt8Prepared {
  QuantizedMatrix b;
};

struct GemmInt8Prepared {
  QuantizedMatrix b;  // alpha·op(B) as [K, N]
  int64_t rows = 0;
  PreparedGemmC c;
};

std::optional<std::string> sparse_enough(const float* b, int64_t k, int64_t n, int64_t ldb,
                                         bool transposed) {
  const double coverage = int8_block_coverage(b, k, n, ldb, transposed);
  if (coverage < kBlockCoverageCrossover) return std::nullopt;
  char why[128];
  std::snprintf(why, sizeof why, "32x32 block coverage %.0f%% (the block layout pays below %.0f%%)",
                100.0 * coverage, 100.0 * kBlockCoverageCrossover);
  return std::string(why);
}

QuantizedMatrix quantize_or_fail(std::string_view variant, const graph::Operator& op,
                                 const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                                 Int8Layout layout) {
  try {
    return quantize_b(b, k, n, ldb, transposed, layout);
  } catch (const std::invalid_argument& e) {
    fail_op(variant, &op, e.what());
  }
}

PreparedOp prepare_matmul(std::string_view variant, const graph::Operator& op,
                          std::span<const ConstTensorView> inputs, Int8Layout layout) {
  if (auto why = matmul_applies(op, inputs)) fail_op(variant, &op, *why);
  const graph::Shape& b = *inputs[1].shape;
  auto prep = std::make_shared<MatMulInt8Prepared>();
  prep->b = quantize_or_fail(variant, op, inputs[1].data, b[0], b[1], b[1], false, layout);
  return prep;
}

void run_matmul(std::string_view variant, const TileArgs& args) {
  const auto* prep = static_cast<const MatMulInt8Prepared*>(args.prepared);
  const int64_t k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_matmul(variant, args, k, n, [&](const GemmTile& tile, const GemmEpilogue& ep) {
    int8_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile, ep);
  });
}

PreparedOp prepare_gemm(std::string_view variant, const graph::Operator& op,
                        std::span<const ConstTensorView> inputs, Int8Layout layout) {
  if (auto why = gemm_constant_b_applies(op, inputs)) fail_op(variant, &op, *why);
  const GemmWeight w = gemm_weight(op, inputs);
  auto prep = std::make_shared<GemmInt8Prepared>();
  prep->b = quantize_or_fail(variant, op, w.data, w.k, w.n, w.ldb, w.transposed, layout);
  prep->rows = (*inputs[0].shape)[0];
  prep->c = prepare_gemm_c(op, inputs, prep->rows, w.n);
  return prep;
}

void run_gemm(std::string_view variant, const TileArgs& args) {
  static const PreparedGemmC kNoC;
  const auto* prep = static_cast<const GemmInt8Prepared*>(args.prepared);
  const int64_t m = prep ? prep->rows : 0, k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_gemm(variant, args, m, k, n, prep ? prep->c : kNoC,
                    [&](const GemmTile& tile, const GemmEpilogue& ep) {
                      int8_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile,
                                     ep);
                    });
}

}  // namespace

// What every int8 variant needs beyond its op's own checks.
std::optional<std::string> int8_weight_allowed(const graph::Operator& op, int64_t k) {
  if (op.attrs.weight_bits > 8)
    return "the weight is " + std::to_string(op.attrs.weight_bits) +
           "-bit (annotate \"bits\": 8 in --sparsity FILE.json to allow int8)";
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni) && !int8_isa_supported(Int8Isa::kAvx2))
    return "this CPU has neither AVX-512 VNNI nor AVX2 (the portable int8 path is slower than "
           "float32)";
  if (k >= (int64_t{1} << 16)) return "K >= 65536 could overflow s32 sums";
  return std::nullopt;
}

std::optional<double> int8_cost(const graph::Operator& op, const float* b, int64_t k, int64_t n,
                                int64_t ldb, bool transposed) {
  if (int8_weight_allowed(op, k)) return std::nullopt;
  const double dense = int8_relative_cost(int8_isa());
  const double coverage = int8_block_coverage(b, k, n, ldb, transposed);
  return coverage < kBlockCoverageCrossover ? dense * coverage : dense;
}

std::optional<std::string> matmul_int8_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_applies(op, inputs)) return why;
  return int8_weight_allowed(op, (*inputs[1].shape)[0]);
}
PreparedOp prepare_matmul_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  return prepare_matmul(kMatMul, op, inputs, Int8Layout::kDense);
}
void matmul_int8(const TileArgs& args) {
  run_matmul(kMatMul, args);
}

std::optional<std::string> matmul_int8_blocks_applies(const graph::Operator& op,
                                                      std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_int8_applies(op, inputs)) return why;
  const graph::Shape& b = *inputs[1].shape;
  return sparse_enough(inputs[1].data, b[0], b[1], b[1], false);
}
PreparedOp prepare_matmul_int8_blocks(const graph::Operator& op,
                                      std::span<const ConstTensorView> inputs) {
  return prepare_matmul(kMatMulBlocks, op, inputs, Int8Layout::kBlocks32);
}
void matmul_int8_blocks(const TileArgs& args) {
  run_matmul(kMatMulBlocks, args);
}

std::optional<std::string> gemm_int8_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_constant_b_applies(op, inputs)) return why;
  const graph::Shape& b = *inputs[1].shape;
  return int8_weight_allowed(op, op.attrs.trans_b ? b[1] : b[0]);
}
PreparedOp prepare_gemm_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  return prepare_gemm(kGemm, op, inputs, Int8Layout::kDense);
}
void gemm_int8(const TileArgs& args) {
  run_gemm(kGemm, args);
}

std::optional<std::string> gemm_int8_blocks_applies(const graph::Operator& op,
                                                    std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_int8_applies(op, inputs)) return why;
  const GemmWeight w = gemm_weight(op, inputs);
  return sparse_enough(w.data, w.k, w.n, w.ldb, w.transposed);
}
PreparedOp prepare_gemm_int8_blocks(const graph::Operator& op,
                                    std::span<const ConstTensorView> inputs) {
  return prepare_gemm(kGemmBlocks, op, inputs, Int8Layout::kBlocks32);
}
void gemm_int8_blocks(const TileArgs& args) {
  run_gemm(kGemmBlocks, args);
}

}  // namespace tessera::kernels::cpu
