// The tile kernel registry: an explicit table of (op type, variant, kernel).
// Deliberately no self-registering static initialisers: tessera_kernels is a
// static archive, and the linker drops objects nothing references. A new
// variant (SIMD, sparse, device) is one more line here.
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/int8_ops.hpp"
#include "kernels/cpu/simple_ops.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/sparse/conv_spardr.hpp"
#include "kernels/sparse/sparse_ops.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {
namespace {

using graph::OpType;

constexpr std::string_view kReference = "reference";
// Layout contracts (kernels/tile_kernel.hpp): the reference kernels index
// every operand through its own layout's strides.
constexpr LayoutSupport kAnyLayout = LayoutSupport::Any;
constexpr LayoutSupport kUniformLayout = LayoutSupport::Uniform;

// The reference variants never need preparing and always apply: they are the
// fallback the compiler names when a faster variant does not apply.
constexpr TileKernelVariant kKernelTable[] = {
    {OpType::Conv, kReference, reference::conv, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Gemm, kReference, reference::gemm},
    {OpType::MatMul, kReference, reference::matmul},
    {OpType::FusedAttention, kReference, reference::fused_attention},
    {OpType::Relu, kReference, reference::relu, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Clip, kReference, reference::clip, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Sigmoid, kReference, reference::sigmoid, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Add, kReference, reference::add, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Mul, kReference, reference::mul, nullptr, nullptr, 0, kAnyLayout},
    {OpType::MaxPool, kReference, reference::max_pool, nullptr, nullptr, 0, kAnyLayout},
    {OpType::AveragePool, kReference, reference::average_pool, nullptr, nullptr, 0, kAnyLayout},
    {OpType::GlobalAveragePool, kReference, reference::global_average_pool, nullptr, nullptr, 0,
     kAnyLayout},
    {OpType::Flatten, kReference, reference::flatten},
    {OpType::Reshape, kReference, reference::reshape},
    {OpType::Concat, kReference, reference::concat, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Softmax, kReference, reference::softmax},
    {OpType::LogSoftmax, kReference, reference::softmax},
    {OpType::BatchNormalization, kReference, reference::batch_normalization},
    {OpType::Transpose, kReference, reference::transpose},
    {OpType::Gather, kReference, reference::gather},
    {OpType::Sub, kReference, reference::sub},
    {OpType::Div, kReference, reference::div},
    {OpType::Pow, kReference, reference::pow},
    {OpType::Sqrt, kReference, reference::sqrt},
    {OpType::Erf, kReference, reference::erf},
    {OpType::Tanh, kReference, reference::tanh},
    {OpType::Where, kReference, reference::where},
    {OpType::Expand, kReference, reference::expand},
    {OpType::ReduceMean, kReference, reference::reduce},
    {OpType::ReduceSum, kReference, reference::reduce},
    {OpType::ReduceMax, kReference, reference::reduce},
    {OpType::ReduceMin, kReference, reference::reduce},
    {OpType::ReduceProd, kReference, reference::reduce},
    {OpType::ReduceSumSquare, kReference, reference::reduce},
    {OpType::ReduceL1, kReference, reference::reduce},
    {OpType::ReduceL2, kReference, reference::reduce},
    {OpType::ReduceLogSum, kReference, reference::reduce},
    {OpType::ReduceLogSumExp, kReference, reference::reduce},
    {OpType::LayerNormalization, kReference, reference::layer_normalization},
    {OpType::RMSNormalization, kReference, reference::layer_normalization},
    {OpType::ConvTranspose, kReference, reference::conv_transpose},
    {OpType::Slice, kReference, reference::slice},
    {OpType::Gelu, kReference, reference::gelu},
    {OpType::LeakyRelu, kReference, reference::leaky_relu, nullptr, nullptr, 0, kAnyLayout},
    {OpType::HardSigmoid, kReference, reference::hard_sigmoid, nullptr, nullptr, 0, kAnyLayout},
    {OpType::HardSwish, kReference, reference::hard_swish, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Neg, kReference, reference::neg, nullptr, nullptr, 0, kAnyLayout},
    {OpType::IsNaN, kReference, reference::is_nan, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Cast, kReference, reference::cast},
    {OpType::ToIndex, kReference, reference::to_index},
    {OpType::CumSum, kReference, reference::cumsum},
    {OpType::Sin, kReference, reference::sin, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Cos, kReference, reference::cos, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Floor, kReference, reference::floor, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Ceil, kReference, reference::ceil, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Round, kReference, reference::round, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Sign, kReference, reference::sign, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Equal, kReference, reference::compare},
    {OpType::Less, kReference, reference::compare},
    {OpType::LessOrEqual, kReference, reference::compare},
    {OpType::Greater, kReference, reference::compare},
    {OpType::GreaterOrEqual, kReference, reference::compare},
    {OpType::Exp, kReference, reference::exp, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Log, kReference, reference::log, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Reciprocal, kReference, reference::reciprocal, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Abs, kReference, reference::abs, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Softplus, kReference, reference::softplus, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Max, kReference, reference::max, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Min, kReference, reference::min, nullptr, nullptr, 0, kAnyLayout},
    {OpType::Pad, kReference, reference::pad},
    {OpType::Resize, kReference, reference::resize},
    // CPU variants on the packed SGEMM (kernels/cpu/dense_ops.hpp):
    // {type, name, run, prepare, applies, preference, layouts}.
    {OpType::ConvTranspose, "cpu.conv_transpose", cpu::conv_transpose, cpu::prepare_conv_transpose,
     cpu::conv_transpose_applies, 10},
    {OpType::Conv, "cpu.conv_gemm", cpu::conv_gemm, cpu::prepare_conv_gemm, cpu::conv_gemm_applies,
     10, kAnyLayout},
    // X, Y and the residual share one layout (the weights are read in their
    // own: kernels/layout_assignment.cpp).
    {OpType::Conv, "cpu.conv_depthwise", cpu::conv_depthwise, cpu::prepare_conv_depthwise,
     cpu::conv_depthwise_applies, 11, kUniformLayout},
    // A depthwise conv with its 1x1 expansion fused in (NHWC only; the
    // applies check refuses NCHW operands).
    {OpType::Conv, "cpu.conv_expand_depthwise", cpu::conv_expand_depthwise,
     cpu::prepare_conv_expand_depthwise, cpu::conv_expand_depthwise_applies, 11, kUniformLayout},
    // 3x3 stride-1 convs where Winograd F(4x4, 3x3) beats the implicit GEMM
    // (kernels/cpu/conv_winograd.cpp); the report says why it did not apply.
    {OpType::Conv, "cpu.conv_winograd", cpu::conv_winograd, cpu::prepare_conv_winograd,
     cpu::conv_winograd_applies, 12, kAnyLayout, /*report_when_skipped=*/true},
    // The same on small maps (10x10 to 13x13) with F(2x2, 3x3); never on the
    // maps cpu.conv_winograd takes.
    {OpType::Conv, "cpu.conv_winograd_2x2", cpu::conv_winograd_2x2, cpu::prepare_conv_winograd_2x2,
     cpu::conv_winograd_2x2_applies, 12, kAnyLayout, /*report_when_skipped=*/true},
    {OpType::Gemm, "cpu.gemm", cpu::gemm, cpu::prepare_gemm, cpu::gemm_applies, 10},
    {OpType::MatMul, "cpu.matmul", cpu::matmul, cpu::prepare_matmul, cpu::matmul_applies, 10},
    // Attention's activation-times-activation products: B packed per tile.
    {OpType::MatMul, "cpu.matmul_batched", cpu::matmul_batched, nullptr,
     cpu::matmul_batched_applies, 9},
    {OpType::FusedAttention, "cpu.attention", cpu::attention, cpu::prepare_attention,
     cpu::attention_applies, 10},
    // Memory-bound ops over contiguous spans (kernels/cpu/simple_ops.hpp).
    {OpType::Add, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    {OpType::Mul, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    {OpType::Relu, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Clip, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Sigmoid, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    // Transformer ops (kernels/cpu/simple_ops.hpp; vector loops per ISA in
    // kernels/cpu/vector_ops.hpp).
    {OpType::Sub, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    {OpType::Div, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    {OpType::Max, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    {OpType::Min, "cpu.binary", cpu::binary, nullptr, cpu::binary_applies, 10, kUniformLayout},
    // Trailing-dims broadcasts (bias, attention mask): periods are logical,
    // so NCHW only; below cpu.binary, applying only where it does not.
    {OpType::Add, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    {OpType::Mul, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    {OpType::Sub, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    {OpType::Div, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    {OpType::Max, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    {OpType::Min, "cpu.binary_broadcast", cpu::binary, nullptr, cpu::binary_broadcast_applies, 9},
    // Any other broadcast (NCHW only), row by row; below both of the above.
    {OpType::Add, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Mul, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Sub, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Div, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Max, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Min, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 8},
    {OpType::Where, "cpu.broadcast", cpu::broadcast, nullptr, cpu::broadcast_applies, 10},
    {OpType::Exp, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Erf, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Tanh, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Gelu, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Sqrt, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Neg, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Abs, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Reciprocal, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::LeakyRelu, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::HardSigmoid, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::HardSwish, "cpu.unary", cpu::unary, nullptr, cpu::unary_applies, 10, kUniformLayout},
    {OpType::Pow, "cpu.pow", cpu::pow, nullptr, cpu::pow_applies, 10, kUniformLayout},
    {OpType::Softmax, "cpu.softmax", cpu::softmax, nullptr, cpu::softmax_applies, 10},
    {OpType::LayerNormalization, "cpu.layer_norm", cpu::layer_norm, nullptr,
     cpu::layer_norm_applies, 10},
    {OpType::RMSNormalization, "cpu.layer_norm", cpu::layer_norm, nullptr, cpu::layer_norm_applies,
     10},
    {OpType::Transpose, "cpu.transpose", cpu::transpose, nullptr, cpu::transpose_applies, 10},
    {OpType::Slice, "cpu.slice", cpu::slice, nullptr, cpu::slice_applies, 10},
    {OpType::Gather, "cpu.gather", cpu::gather, nullptr, cpu::gather_applies, 10},
    {OpType::Concat, "cpu.concat", cpu::concat, nullptr, cpu::concat_applies, 10, kAnyLayout},
    {OpType::Pad, "cpu.pad", cpu::pad, nullptr, cpu::pad_applies, 10, kUniformLayout},
    {OpType::Resize, "cpu.resize", cpu::resize, nullptr, cpu::resize_applies, 10, kUniformLayout},
    {OpType::MaxPool, "cpu.maxpool", cpu::max_pool, nullptr, cpu::max_pool_applies, 10,
     kUniformLayout},
    {OpType::AveragePool, "cpu.average_pool", cpu::average_pool, nullptr, cpu::average_pool_applies,
     10, kUniformLayout},
    {OpType::GlobalAveragePool, "cpu.global_average_pool", cpu::global_average_pool, nullptr,
     cpu::global_average_pool_applies, 10, kAnyLayout},
    // Sparse-weight variants (kernels/sparse/sparse_ops.hpp): above the dense
    // and the int8 ones, applying only when the weight is sparse enough to
    // beat both (an 8-bit weight's int8 kernel by its cost, int8_cost()).
    {OpType::Gemm, "cpu.gemm_sparse", sparse::gemm_sparse, sparse::prepare_gemm_sparse,
     sparse::gemm_sparse_applies, 32, LayoutSupport::NchwOnly, /*report_when_skipped=*/true},
    // Only where the user allowed 8-bit weights (SparTA §3.3 bit rounding).
    {OpType::MatMul, "cpu.matmul_int8", cpu::matmul_int8, cpu::prepare_matmul_int8,
     cpu::matmul_int8_applies, 30, LayoutSupport::NchwOnly, false, /*serves_8bit_weights=*/true},
    {OpType::Gemm, "cpu.gemm_int8", cpu::gemm_int8, cpu::prepare_gemm_int8, cpu::gemm_int8_applies,
     30, LayoutSupport::NchwOnly, false, /*serves_8bit_weights=*/true},
    {OpType::MatMul, "cpu.matmul_int8_blocks", cpu::matmul_int8_blocks,
     cpu::prepare_matmul_int8_blocks, cpu::matmul_int8_blocks_applies, 31, LayoutSupport::NchwOnly,
     false, /*serves_8bit_weights=*/true},
    {OpType::Gemm, "cpu.gemm_int8_blocks", cpu::gemm_int8_blocks, cpu::prepare_gemm_int8_blocks,
     cpu::gemm_int8_blocks_applies, 31, LayoutSupport::NchwOnly, false,
     /*serves_8bit_weights=*/true},
    // Above the dense convs (it refuses those Winograd runs faster), below
    // cpu.conv_sparse: a weight sparse enough for that kernel runs faster
    // sparse (ResNet-50 pruned to 90%: 3.9x faster than ORT at 1 thread) than
    // dense at 8 bits (1.2-1.3x the float32 conv_gemm on AVX2), and exactly.
    {OpType::Conv, "cpu.conv_int8", cpu::conv_int8, cpu::prepare_conv_int8, cpu::conv_int8_applies,
     15, kAnyLayout, false, /*serves_8bit_weights=*/true},
    {OpType::MatMul, "cpu.matmul_sparse", sparse::matmul_sparse, sparse::prepare_matmul_sparse,
     sparse::matmul_sparse_applies, 32, LayoutSupport::NchwOnly, /*report_when_skipped=*/true},
    // SparDR sparse conv (kernels/sparse/conv_spardr.hpp): above every dense
    // conv, applying only below its measured density crossover.
    {OpType::Conv, "cpu.conv_sparse", sparse::conv_sparse, sparse::prepare_conv_sparse,
     sparse::conv_sparse_applies, 20, kAnyLayout, /*report_when_skipped=*/true},
};

}  // namespace

const TileKernelVariant* find_tile_kernel_variant(graph::OpType type, std::string_view name) {
  for (const TileKernelVariant& entry : kKernelTable)
    if (entry.type == type && entry.name == name) return &entry;
  return nullptr;
}

TileKernel find_tile_kernel(graph::OpType type, std::string_view variant) {
  const TileKernelVariant* entry = find_tile_kernel_variant(type, variant);
  return entry ? entry->run : nullptr;
}

std::vector<std::string> tile_kernel_variants(graph::OpType type) {
  std::vector<std::string> variants;
  // The reference first, then the others in table order.
  for (const TileKernelVariant& entry : kKernelTable)
    if (entry.type == type && entry.name == kReference) variants.emplace_back(entry.name);
  for (const TileKernelVariant& entry : kKernelTable)
    if (entry.type == type && entry.name != kReference) variants.emplace_back(entry.name);
  return variants;
}

}  // namespace tessera::kernels
