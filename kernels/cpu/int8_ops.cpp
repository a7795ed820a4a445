#include "kernels/cpu/int8_ops.hpp"

#include <memory>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_int8.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.matmul_int8";
constexpr std::string_view kGemmVariant = "cpu.gemm_int8";

struct MatMulInt8Prepared {
  QuantizedMatrix b;
};

struct GemmInt8Prepared {
  QuantizedMatrix b;  // alpha·op(B) as [K, N]
  int64_t rows = 0;
  PreparedGemmC c;
};

// What both variants need beyond their op's own checks.
std::optional<std::string> int8_allowed(const graph::Operator& op, int64_t k) {
  if (op.attrs.weight_bits > 8)
    return "the weight is " + std::to_string(op.attrs.weight_bits) +
           "-bit (annotate \"bits\": 8 in --sparsity FILE.json to allow int8)";
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni))
    return "this CPU has no AVX-512 VNNI (the portable int8 path is slower than float32)";
  if (k >= (int64_t{1} << 16)) return "K >= 65536 could overflow s32 sums";
  return std::nullopt;
}

QuantizedMatrix quantize_or_fail(std::string_view variant, const graph::Operator& op,
                                 const float* b, int64_t k, int64_t n, int64_t ldb,
                                 bool transposed) {
  try {
    return quantize_b(b, k, n, ldb, transposed);
  } catch (const std::invalid_argument& e) {
    fail_op(variant, &op, e.what());
  }
}

}  // namespace

std::optional<std::string> matmul_int8_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_applies(op, inputs)) return why;
  return int8_allowed(op, (*inputs[1].shape)[0]);
}

PreparedOp prepare_matmul_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_applies(op, inputs)) fail_op(kVariant, &op, *why);
  const graph::Shape& b = *inputs[1].shape;
  auto prep = std::make_shared<MatMulInt8Prepared>();
  prep->b = quantize_or_fail(kVariant, op, inputs[1].data, b[0], b[1], b[1], false);
  return prep;
}

void matmul_int8(const TileArgs& args) {
  const auto* prep = static_cast<const MatMulInt8Prepared*>(args.prepared);
  const int64_t k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_matmul(kVariant, args, k, n, [&](const GemmTile& tile, const GemmEpilogue& ep) {
    int8_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile, ep);
  });
}

std::optional<std::string> gemm_int8_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_constant_b_applies(op, inputs)) return why;
  const graph::Shape& b = *inputs[1].shape;
  return int8_allowed(op, op.attrs.trans_b ? b[1] : b[0]);
}

PreparedOp prepare_gemm_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = gemm_constant_b_applies(op, inputs)) fail_op(kGemmVariant, &op, *why);
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  const bool trans_b = op.attrs.trans_b;
  const int64_t k = trans_b ? b[1] : b[0], n = trans_b ? b[0] : b[1];
  std::vector<float> copy;
  const float* weight =
      alpha_scaled_weight(inputs[1].data, static_cast<size_t>(b[0] * b[1]), op.attrs.alpha, copy);
  auto prep = std::make_shared<GemmInt8Prepared>();
  prep->b = quantize_or_fail(kGemmVariant, op, weight, k, n, b[1], trans_b);
  prep->rows = a[0];
  prep->c = prepare_gemm_c(op, inputs, a[0], n);
  return prep;
}

void gemm_int8(const TileArgs& args) {
  static const PreparedGemmC kNoC;
  const auto* prep = static_cast<const GemmInt8Prepared*>(args.prepared);
  const int64_t m = prep ? prep->rows : 0, k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_gemm(kGemmVariant, args, m, k, n, prep ? prep->c : kNoC,
                    [&](const GemmTile& tile, const GemmEpilogue& ep) {
                      int8_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile,
                                     ep);
                    });
}

}  // namespace tessera::kernels::cpu
