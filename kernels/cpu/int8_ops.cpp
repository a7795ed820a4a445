#include "kernels/cpu/int8_ops.hpp"

#include <memory>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_int8.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.matmul_int8";

struct MatMulInt8Prepared {
  QuantizedMatrix b;
};

}  // namespace

std::optional<std::string> matmul_int8_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  if (op.attrs.weight_bits > 8)
    return "the weight is " + std::to_string(op.attrs.weight_bits) +
           "-bit (annotate \"bits\": 8 in --sparsity FILE.json to allow int8)";
  if (auto why = matmul_applies(op, inputs)) return why;
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni))
    return "this CPU has no AVX-512 VNNI (the portable int8 path is slower than float32)";
  if ((*inputs[1].shape)[0] >= (int64_t{1} << 16)) return "K >= 65536 could overflow s32 sums";
  return std::nullopt;
}

PreparedOp prepare_matmul_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = matmul_applies(op, inputs)) fail_op(kVariant, &op, *why);
  const graph::Shape& b = *inputs[1].shape;
  auto prep = std::make_shared<MatMulInt8Prepared>();
  try {
    prep->b = quantize_b(inputs[1].data, b[0], b[1], b[1], false);
  } catch (const std::invalid_argument& e) {
    fail_op(kVariant, &op, e.what());
  }
  return prep;
}

void matmul_int8(const TileArgs& args) {
  const auto* prep = static_cast<const MatMulInt8Prepared*>(args.prepared);
  const int64_t k = prep ? prep->b.k() : 0, n = prep ? prep->b.n() : 0;
  run_prepared_matmul(kVariant, args, k, n, [&](const GemmTile& tile, const GemmEpilogue& ep) {
    int8_gemm_tile(args.inputs[0].data, k, prep->b, args.output.data, n, tile, ep);
  });
}

}  // namespace tessera::kernels::cpu
