#pragma once
// "cpu.matmul_int8" and "cpu.gemm_int8": MatMul / Gemm with a constant B
// whose TeSA bit width is 8 or less (the user's annotation, SparTA §3.3 bit
// rounding) on kernels/cpu/gemm_int8.hpp. B (alpha·op(B) for Gemm) is
// quantized once at prepare time. The "_blocks" variants store only B's
// 32×32 blocks that hold a nonzero (block-pruned weights at 8 bits).
#include <optional>
#include <span>
#include <string>

#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::cpu {

void matmul_int8(const TileArgs& args);
PreparedOp prepare_matmul_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> matmul_int8_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs);

void gemm_int8(const TileArgs& args);
PreparedOp prepare_gemm_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> gemm_int8_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);

void matmul_int8_blocks(const TileArgs& args);
PreparedOp prepare_matmul_int8_blocks(const graph::Operator& op,
                                      std::span<const ConstTensorView> inputs);
std::optional<std::string> matmul_int8_blocks_applies(const graph::Operator& op,
                                                      std::span<const ConstTensorView> inputs);
void gemm_int8_blocks(const TileArgs& args);
PreparedOp prepare_gemm_int8_blocks(const graph::Operator& op,
                                    std::span<const ConstTensorView> inputs);
std::optional<std::string> gemm_int8_blocks_applies(const graph::Operator& op,
                                                    std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::cpu
