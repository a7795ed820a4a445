#pragma once
// "cpu.matmul_int8", "cpu.gemm_int8" and "cpu.conv_int8": MatMul / Gemm / Conv with a constant B
// whose TeSA bit width is 8 or less (the user's annotation, SparTA §3.3 bit
// rounding) on kernels/cpu/gemm_int8.hpp. B (alpha·op(B) for Gemm) is
// quantized once at prepare time. The "_blocks" variants store only B's
// 32×32 blocks that hold a nonzero (block-pruned weights at 8 bits).
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::cpu {

// What every int8 variant needs beyond its op's own checks: the op's weight
// annotated 8 bits or fewer, a CPU with an int8 kernel that beats float32,
// and K short enough for exact s32 sums. nullopt if so, else why not.
std::optional<std::string> int8_weight_allowed(const graph::Operator& op, int64_t k);

// The time of the int8 variant that would take the op's weight B [K, N]
// (b[k·ldb + n], or b[n·ldb + k] transposed), relative to the float32
// SGEMM's: the dense layout's int8_relative_cost(), or that times the 32×32
// block coverage where the block layout pays. nullopt where no int8 variant
// applies (int8_weight_allowed()). The sparse float32 MatMul and Gemm rank
// above the int8 ones and yield to them by this cost.
std::optional<double> int8_cost(const graph::Operator& op, const float* b, int64_t k, int64_t n,
                                int64_t ldb, bool transposed);

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

// "cpu.conv_int8" (conv_gemm.cpp): cpu.conv_gemm's implicit GEMM with the
// weights W' [OC, kH·kW·C] quantized and each chunk's product on the int8
// GEMM; everything else (patches, layouts, epilogue) is cpu.conv_gemm's.
void conv_int8(const TileArgs& args);
PreparedOp prepare_conv_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_int8_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::cpu
