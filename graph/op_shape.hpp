#pragma once
// Tessera's own per-op shape functions: the output shape an operator produces
// from its input shapes and attributes. Used by the importer (cross-checked
// against ONNX shape inference) and by the .tess reader's semantic checks.
#include <vector>

#include "graph/dtype.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

// Throws tessera::Error naming the op when the input count, ranks or sizes do
// not fit the op and its attributes.
Shape infer_output_shape(const Operator& op, const std::vector<Shape>& input_shapes);

// Whether Q, KT and V fit a FusedAttention (graph/operator.hpp): [..., M, D],
// [..., D, S], [..., S, DV], one rank >= 2, the same leading dims.
bool attention_operands_fit(const Shape& q, const Shape& kt, const Shape& v);

// The element type of op's input `input` and of its output: float32 but for
// Gather's run-time indices (input 1) and Cast's input, which are int64, and
// ToIndex's output, which is int64.
DType operand_dtype(const Operator& op, size_t input);
DType output_dtype(const Operator& op);

// Throws tessera::Error naming the op where an operand or the output is not
// of its element type (operand_dtype, output_dtype): a kernel must never read
// an operand with the wrong element size.
void check_operand_dtypes(const Operator& op, const std::vector<DType>& inputs, DType output);

}  // namespace tessera::graph
