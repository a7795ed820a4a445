#pragma once
// MatMul + bias fusion (issue 5): Add(MatMul(A, W), b), either operand order,
// becomes MatMul(A, W, b) whose kernels add b per column in the GEMM
// epilogue, while the tile is still in registers. Transformer exporters write
// every Linear layer this way (BERT-base has 73), so each saves a pass over
// its output and a tile node per tile. An activation after the Add then fuses
// into the same MatMul (fuse_activations runs later).
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Fuses where W is a constant 2-D weight, A has rank >= 2, b is a constant
// with N = W's columns elements whose shape is [N] or [1, .., 1, N], the Add's
// output has the MatMul's shape (b adds no dims), the MatMul has no bias or
// activation yet, and its output has no other consumer and is not a graph
// output. b is stored as [N] (a reshaped copy when it was not). The MatMul
// takes over the Add's output tensor.
std::vector<RewrittenPattern> fuse_matmul_bias(Graph& graph);

}  // namespace tessera::graph
