#pragma once
// The scalar reference tile kernels: plain C++, float32, row-major dense
// tensors in ONNX logical layout (NCHW for 4-D). They are the ground truth
// that every faster variant (SIMD, sparse, device) is tested against.
//
// Every kernel computes exactly the elements of `*args.region` of its output
// and writes nothing else. The arithmetic for one output element never
// depends on the region (each element accumulates over its reduction indices
// in a fixed order), so any tiling of the output gives bitwise identical
// results — the property ASPEN's tile-wise dataflow execution relies on.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::reference {

// conv.cpp — 2-D (and 1-D) convolution with groups, strides, dilations, pads
// and optional bias. Inputs X [N,C,H,W], W [M,C/group,kH,kW], B [M].
void conv(const TileArgs& args);

// conv_transpose.cpp — 2-D ConvTranspose with groups, strides, dilations,
// pads (possibly negative at the end: output_padding), optional bias.
void conv_transpose(const TileArgs& args);

// gemm.cpp — Y = alpha * op(A) * op(B) + beta * C, C optional and
// unidirectionally broadcastable to [M,N].
void gemm(const TileArgs& args);

// matmul.cpp — numpy matmul: batch broadcasting and 1-D operands.
void matmul(const TileArgs& args);

// elementwise.cpp — unary and multidirectionally broadcasting binary ops.
void relu(const TileArgs& args);
void sigmoid(const TileArgs& args);
void clip(const TileArgs& args);
void add(const TileArgs& args);
void mul(const TileArgs& args);

// pool.cpp — MaxPool (with dilations), AveragePool (ONNX Runtime's
// count_include_pad semantics), GlobalAveragePool.
void max_pool(const TileArgs& args);
void average_pool(const TileArgs& args);
void global_average_pool(const TileArgs& args);

// shape_ops.cpp — Flatten and Reshape (same row-major data), Concat.
void flatten(const TileArgs& args);
void reshape(const TileArgs& args);
void concat(const TileArgs& args);

// softmax.cpp — numerically stable softmax along attrs.axis, or over the
// dims [axis, rank) jointly when attrs.softmax_coerce_2d.
void softmax(const TileArgs& args);  // and LogSoftmax

// attention.cpp — FusedAttention: softmax(alpha · Q·KT + mask) · V, with the
// bits of the MatMul, Softmax and MatMul it replaced.
void fused_attention(const TileArgs& args);

// batch_norm.cpp — inference-form batch normalization over channel dim 1.
void batch_normalization(const TileArgs& args);

// elementwise.cpp — Sub, Div, Pow (broadcasting like Add), Sqrt, Erf, Tanh,
// Gelu (exact or tanh form) and Where (condition non-zero = true).
void sub(const TileArgs& args);
void div(const TileArgs& args);
void pow(const TileArgs& args);
void sqrt(const TileArgs& args);
void erf(const TileArgs& args);
void tanh(const TileArgs& args);
void gelu(const TileArgs& args);
void where(const TileArgs& args);

// index_ops.cpp — Transpose, Gather (indices from an int64 input or the
// attributes), Expand (broadcast), Slice (strided box).
void transpose(const TileArgs& args);
void gather(const TileArgs& args);

// A Gather tile's index maps, shared with cpu.gather: per output dim, its
// stride into the output, the data (0 over the indices' dims) and the
// indices (0 elsewhere); output element i reads data[offset + index ·
// axis_stride] with index = indices[its indices offset] (negative counts
// from the end; range checked by the caller). Returns why the shapes and
// attributes do not fit, or nothing.
struct GatherMaps {
  const int64_t* indices = nullptr;
  std::vector<int64_t> out_strides, data_strides, indices_strides;
  int64_t axis_size = 0, axis_stride = 0;
  // The message for an index outside [-axis_size, axis_size).
  std::string out_of_range(int64_t index, int64_t axis) const {
    return "index " + std::to_string(index) + " is out of range for axis " + std::to_string(axis) +
           " of size " + std::to_string(axis_size);
  }
};
std::optional<std::string> gather_maps(const TileArgs& args, GatherMaps& maps);
void expand(const TileArgs& args);
void slice(const TileArgs& args);

// normalization.cpp — the reductions (ReduceMean, ReduceSum, ReduceMax,
// ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp: graph::is_reduction()), LayerNormalization and
// RMSNormalization.
void reduce(const TileArgs& args);
// CumSum: inclusive running sums along attrs.axis.
void cumsum(const TileArgs& args);
void layer_normalization(const TileArgs& args);

// elementwise.cpp — LeakyRelu (alpha), HardSigmoid (alpha, beta), HardSwish,
// Neg, Exp, Log, Reciprocal, Abs, Softplus, IsNaN (1 or 0); Max and Min of
// two broadcasting operands (NaN propagates); Cast of an int64 tensor (its
// value, or 1 / 0 for non-zero / zero with cast_to_bool).
void leaky_relu(const TileArgs& args);
void hard_sigmoid(const TileArgs& args);
void hard_swish(const TileArgs& args);
void neg(const TileArgs& args);
void exp(const TileArgs& args);
void log(const TileArgs& args);
void reciprocal(const TileArgs& args);
void abs(const TileArgs& args);
void softplus(const TileArgs& args);
void is_nan(const TileArgs& args);
void cast(const TileArgs& args);
// ToIndex: float32 integers to int64 (dense layout), checked.
void to_index(const TileArgs& args);
// Sin, Cos, Floor, Ceil, Round (half to even), Sign (NaN stays NaN).
void sin(const TileArgs& args);
void cos(const TileArgs& args);
void floor(const TileArgs& args);
void ceil(const TileArgs& args);
void round(const TileArgs& args);
void sign(const TileArgs& args);
// Equal, Less, LessOrEqual, Greater, GreaterOrEqual (1 or 0, false with NaN).
void compare(const TileArgs& args);
void max(const TileArgs& args);
void min(const TileArgs& args);

// resample.cpp — Pad (constant, reflect, edge) and Resize (nearest, linear),
// through the per-dim source maps of graph/source_index.hpp.
void pad(const TileArgs& args);
void resize(const TileArgs& args);

}  // namespace tessera::kernels::reference
