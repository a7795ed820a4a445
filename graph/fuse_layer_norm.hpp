#pragma once
// Decomposed LayerNorm recognition (issue 5). PyTorch exports LayerNorm at
// opsets < 17 as
//   mean = ReduceMean(x, last axis)     d = Sub(x, mean)
//   var = ReduceMean(Pow(d, 2) | Mul(d, d), last axis)
//   y = Add(Mul(Div(d, Sqrt(Add(var, eps))), gamma), beta)
// nine ops and four passes over the activations; they become one
// LayerNormalization(x, gamma, beta, axis = -1, epsilon = eps), which the
// kernels compute in one pass per row.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Rewrites where both ReduceMeans reduce only the last axis with keepdims,
// 2 and eps are one-element constants (eps > 0), gamma and beta are constants
// whose shape is [H] or [1, .., 1, H] (H = x's last dim), every value inside
// the chain except d has one consumer and d exactly the two (Pow/Mul and
// Div), none is a graph output, and y has x's shape. Commuted Mul/Add
// operands are accepted. The final Add becomes the LayerNormalization, keeping
// its name and output; gamma and beta are reshaped copies when not [H].
std::vector<RewrittenPattern> fuse_layer_norm(Graph& graph);

// Decomposed RMSNorm (Hugging Face's Llama, Mistral, Qwen2, T5 export it as
//   r = Div(1, Sqrt(Add(ReduceMean(Pow(x, 2), last axis), eps))) | Reciprocal(Sqrt(...))
//   y = Mul(Mul(x, r), w)
// ) becomes RMSNormalization(x, w, axis = -1, epsilon = eps), under the same
// conditions as fuse_layer_norm: x (kept: the residual stream, read by
// others too) read by the Pow and the first Mul, every value of the chain
// after it read once and not a graph output, eps > 0
// and 2 one-element constants, w a constant [H] or [1, .., 1, H], commuted
// Mul operands accepted. The final Mul becomes the RMSNormalization.
std::vector<RewrittenPattern> fuse_rms_norm(Graph& graph);

}  // namespace tessera::graph
