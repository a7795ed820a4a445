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

// elementwise_ops.cpp — "cpu.binary": Add, Mul, Sub, Div, Max and Min where
// each operand is the output's shape (leading 1s allowed), a scalar (one
// element), or one non-trivial dim that is not the last, e.g. [C,1,1]
// against [N,C,H,W]. Bitwise equal to the reference. Any uniform layout.
// "cpu.binary_broadcast" (the same kernel; NCHW only, since its operands'
// periods are logical): as cpu.binary, plus operands that are leading 1s
// followed by exactly the output's trailing dims, read as a vector repeating
// along the span (bias [768] -> [1,128,768], mask [1,1,1,128] ->
// [1,12,128,128]); applies only when there is such an operand.
void binary(const TileArgs& args);
std::optional<std::string> binary_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);
std::optional<std::string> binary_broadcast_applies(const graph::Operator& op,
                                                    std::span<const ConstTensorView> inputs);

// elementwise_ops.cpp — "cpu.broadcast": any numpy broadcast of the binary
// ops above and of Where (condition != 0 picks X, else Y), walked row by
// row along the output's last dim, where every operand is a vector or one
// value; for the patterns the two variants above do not take (BERT batch
// 8's mask [8,1,1,384] -> [8,12,384,384], GPT-2's Where(mask [1,1,T,T],
// scores [1,12,T,T], scalar)). Bitwise equal to the reference. NCHW only.
void broadcast(const TileArgs& args);
std::optional<std::string> broadcast_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);

// elementwise_ops.cpp — "cpu.unary": Relu, Clip, Sigmoid, Exp, Erf, Tanh,
// Gelu, Sqrt, Neg, Abs, Reciprocal, LeakyRelu, HardSigmoid and HardSwish
// with input and output of one shape. Relu, Clip and the algebraic ones are
// bitwise equal to the reference; Exp, Erf, Tanh, Gelu and Sigmoid use
// vector_math.hpp's polynomials (within 2^-21, Sigmoid 2^-20, relative of the
// C library; the fused epilogues' bits; the same bits on every ISA with FMA).
void unary(const TileArgs& args);
std::optional<std::string> unary_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs);

// elementwise_ops.cpp — "cpu.pow": Pow with a constant scalar exponent 2 or
// 3, as x*x and x*x*x (ONNX Runtime's special cases): within 2 ulp of the
// reference's std::pow, not bitwise.
void pow(const TileArgs& args);
std::optional<std::string> pow_applies(const graph::Operator& op,
                                       std::span<const ConstTensorView> inputs);

// pool_ops.cpp — "cpu.maxpool": 1-D/2-D MaxPool, any kernel, stride,
// padding and dilation (ceil_mode through the output shape), vectorised over
// the output width. Bitwise equal to the reference.
void max_pool(const TileArgs& args);
std::optional<std::string> max_pool_applies(const graph::Operator& op,
                                            std::span<const ConstTensorView> inputs);

// pool_ops.cpp — "cpu.average_pool": 1-D/2-D AveragePool without dilations,
// any kernel, stride and padding, count_include_pad either way; NHWC
// vectorised over the channels. Bitwise equal to the reference.
void average_pool(const TileArgs& args);
std::optional<std::string> average_pool_applies(const graph::Operator& op,
                                                std::span<const ConstTensorView> inputs);

// pool_ops.cpp — "cpu.global_average_pool": sums each plane of 64 or more
// elements in 16 lanes (then pairwise), so it differs from the reference's
// sequential sum by rounding only; the same for every tiling. Smaller
// planes are summed in order (bitwise equal to the reference).
void global_average_pool(const TileArgs& args);
std::optional<std::string> global_average_pool_applies(const graph::Operator& op,
                                                       std::span<const ConstTensorView> inputs);

// transformer_ops.cpp — "cpu.softmax": Softmax on any axis (opset 13, and
// the opset < 13 joint form), vector max / exp-sum / scale over contiguous
// rows; a strided axis is gathered per row. Within rounding of the reference
// (vector exp, 16-lane sums); the same bits for every tiling, and on every
// ISA with FMA.
void softmax(const TileArgs& args);
std::optional<std::string> softmax_applies(const graph::Operator& op,
                                           std::span<const ConstTensorView> inputs);

// transformer_ops.cpp — "cpu.layer_norm": LayerNormalization with Scale and
// B of the normalised shape; mean and variance in float (two passes, 16-lane
// sums), like ONNX Runtime's float accumulation (the reference sums in
// double). The same bits for every tiling and ISA.
void layer_norm(const TileArgs& args);
std::optional<std::string> layer_norm_applies(const graph::Operator& op,
                                              std::span<const ConstTensorView> inputs);

// transformer_ops.cpp — "cpu.transpose": contiguous runs when the innermost
// dim stays (BERT's [1,128,12,64] -> [1,12,128,64]), else the ISA's register
// blocks of a 2-D transpose (VectorOps::transpose). Bitwise equal to the
// reference.
void transpose(const TileArgs& args);
std::optional<std::string> transpose_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);

// transformer_ops.cpp — "cpu.slice": the same strided copy from the slice's
// first element (GPT-2's split of the fused QKV projection: contiguous runs
// of 768 floats, where the reference copies element by element). Bitwise
// equal to the reference.
void slice(const TileArgs& args);
std::optional<std::string> slice_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs);

// transformer_ops.cpp — "cpu.gather": Gather along any axis but the data's
// last, each output row (a run of the data after the axis) copied whole
// with its index checked once (embedding lookups). Bitwise equal to the
// reference, with its out-of-range message.
void gather(const TileArgs& args);
std::optional<std::string> gather_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);

// concat.cpp — "cpu.concat": each input's part of the tile copied in runs
// along the output's innermost dims in memory (one memcpy per run where the
// input is stored in the same order, merging the dims the tile covers whole;
// a strided gather otherwise), where the reference computes every element's
// index and source. Any layouts, mixed too. Bitwise equal (a copy).
void concat(const TileArgs& args);
std::optional<std::string> concat_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);

// resample_ops.cpp — "cpu.pad" (every mode) and "cpu.resize" (nearest; linear
// stays on the reference): the reference's per-dim source indices
// (graph/source_index.hpp), walked in runs along the output's innermost dim
// in memory, so they run NHWC as well as NCHW (input and output alike) and
// a detector's maps need not turn NCHW around them; runs of consecutive
// sources (an NHWC pixel's channels) are one memcpy. Bitwise equal.
void pad(const TileArgs& args);
std::optional<std::string> pad_applies(const graph::Operator& op,
                                       std::span<const ConstTensorView> inputs);
void resize(const TileArgs& args);
std::optional<std::string> resize_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::cpu
