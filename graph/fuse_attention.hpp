#pragma once
// Attention as one op (issue 5: BERT, GPT-2): MatMul(Q, KT) → Softmax (with
// its fused scale and mask, graph/fuse_softmax_input.hpp) → MatMul(·, V)
// becomes one FusedAttention (graph/operator.hpp). Its kernel computes a
// block of query rows' scores into a per-thread buffer that stays in L2,
// normalises them there and multiplies them by V, so the [..., M, S] scores,
// the largest tensors of a long sequence (GPT-2 at 1024 tokens: 48 MB per
// layer), are never written to memory and read back twice.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Fuses where a MatMul's A is read only by it and is the output of a
// Softmax along the last axis (not coerce_2d) read only by it, whose input
// is the output of a MatMul read only by the Softmax; both MatMuls plain
// (two inputs, no fused activation or residual), all of Q, KT and V float32
// of one rank >= 2 with the same leading dims (no broadcasting), and none
// of the removed tensors a graph output. The softmax NaN guard
// Where(IsNaN(P), 0, P) between the Softmax and the MatMul (Hugging Face's
// masked attention, both exporters) goes in too: nan_probabilities_to_zero.
std::vector<RewrittenPattern> fuse_attention(Graph& graph);

}  // namespace tessera::graph
