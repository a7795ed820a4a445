#pragma once
// Attention's scale and mask folded into its Softmax (issue 5: GPT-2, BERT):
// Softmax(Add(Mul(x, c), m)) along the last axis, with c a constant scalar
// (or Div(x, c): 1 / c) and m any tensor that broadcasts to x, becomes one
// Softmax with attrs.alpha = c and m as its input 1 (graph/operator.hpp).
// Each row is scaled, masked and normalised while it is in cache: GPT-2's
// [12, 1024, 1024] attention scores per layer were read and written by the
// Mul and the Add on their way to the Softmax, about 11% of the model's tile
// time at two threads (tessera run --profile).
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Fuses where the Softmax normalises the last axis (opset 13 and up), its
// input is an Add and/or a Mul/Div by a constant scalar read only by the
// next op of the pattern (not graph outputs), and the mask's shape
// broadcasts to x's without changing it. Either op alone fuses too. In the
// Add's place, Where(c, x, fill) with a constant condition c and a constant
// scalar fill <= -1e30 or -inf (GPT-2 exports' causal mask,
// torch.where(causal, scores, finfo.min)) becomes the additive mask
// c ? 0 : fill, one weight per (c, fill): equal after the softmax unless a
// masked score is NaN, infinite, or at least half an ulp of the fill in
// magnitude (2^103 for float's lowest, 2^75 for -1e30). GPT-2 small at 1024 tokens
// (bench/e2e/compare_transformers.py, 1 thread) then runs FusedAttention,
// which skips the masked half: 1498 -> 1270 ms.
std::vector<RewrittenPattern> fuse_softmax_inputs(Graph& graph);

}  // namespace tessera::graph
