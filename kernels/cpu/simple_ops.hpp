#pragma once
// CPU tile-kernel variants of the simple (memory-bound) ops: elementwise
// Add/Mul/Relu/Clip/Sigmoid and pooling. Their inner loops run over whole
// contiguous spans of the tile (trailing dims the region covers fully are
// merged), compiled for AVX-512, AVX2 and the baseline (GCC target_clones).
// Every output element is computed by the same arithmetic whatever the tile
// boundaries, so results never depend on the tiling or the thread count.
// None needs preparing; applies() says why a variant cannot run an op.
#include <optional>
#include <span>
#include <string>

#include "graph/operator.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::cpu {

// elementwise_ops.cpp — "cpu.binary": Add and Mul where each operand is the
// output's shape (leading 1s allowed), a scalar (one element), or one
// non-trivial dim that is not the last, e.g. [C,1,1] against [N,C,H,W].
// Bitwise equal to the reference.
void binary(const TileArgs& args);
std::optional<std::string> binary_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);

// elementwise_ops.cpp — "cpu.unary": Relu, Clip and Sigmoid with input and
// output of one shape. Bitwise equal to the reference (Sigmoid keeps
// std::exp, so it gains only the loop overhead).
void unary(const TileArgs& args);
std::optional<std::string> unary_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs);

// pool_ops.cpp — "cpu.maxpool": 1-D/2-D MaxPool, any kernel, stride,
// padding and dilation (ceil_mode through the output shape), vectorised over
// the output width. Bitwise equal to the reference.
void max_pool(const TileArgs& args);
std::optional<std::string> max_pool_applies(const graph::Operator& op,
                                            std::span<const ConstTensorView> inputs);

// pool_ops.cpp — "cpu.global_average_pool": sums each plane of 64 or more
// elements in 16 lanes (then pairwise), so it differs from the reference's
// sequential sum by rounding only; the same for every tiling. Smaller
// planes are summed in order (bitwise equal to the reference).
void global_average_pool(const TileArgs& args);
std::optional<std::string> global_average_pool_applies(const graph::Operator& op,
                                                       std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::cpu
