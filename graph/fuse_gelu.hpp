#pragma once
// GELU recognition (issue 5): the elementwise chains exporters emit for GELU
// become one Gelu op (which fuse_activations then folds into the producing
// MatMul's epilogue):
//   erf form  (BERT, torch.nn.GELU()):  x * 0.5 * (1 + erf(x / sqrt(2)))
//             also erf(x * (1 / sqrt(2))), and 1 + erf(..) in either order
//   tanh form (GPT-2 NewGELU, approximate="tanh"):
//             0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//             x^3 as Pow(x, 3), x * x * x or x * (x * x)
// The three factors x, 0.5 and (1 + ..) may be multiplied in any order and
// grouping; every Mul/Add operand order is accepted.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Rewrites where every constant is a one-element weight within 1e-5
// (relative) of its value, every intermediate value has exactly one consumer
// (inside the pattern) and is not a graph output, and the result has x's
// shape. The outer Mul becomes Gelu(x) (attrs.gelu_tanh for the tanh form),
// keeping its name and output tensor; the other ops of the chain are removed.
std::vector<RewrittenPattern> fuse_gelu(Graph& graph);

}  // namespace tessera::graph
