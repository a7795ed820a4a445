#pragma once
// SiLU recognition (issues 4 and 5): Mul(x, Sigmoid(x)), as EfficientNet's
// torch.nn.SiLU exports, becomes the fused activation Activation::Silu of
// the Conv, Gemm or MatMul producing x: one pass over the tile in registers
// instead of a Sigmoid and a Mul over memory.
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// A SiLU the pass found but could not fuse, and why (for the compile report).
struct UnfusedSilu {
  std::string mul;     // the Mul op's name
  std::string reason;  // e.g. "x is produced by Add, which has no epilogue"
};

// Fuses where the Mul's operands (either order) are x and Sigmoid(x), the
// Sigmoid's output is read only by that Mul and is not a graph output, x is
// read only by the Sigmoid and the Mul and is not a graph output, and x's
// producer is a Conv, Gemm or MatMul with no activation yet. The producer
// takes over the Mul's output tensor (and keeps any fused residual, which it
// adds before the activation, as x was); the Sigmoid and the Mul are
// removed. Patterns that match but whose x cannot take the epilogue are
// left as they are and listed in `unfused`.
std::vector<RewrittenPattern> fuse_silu(Graph& graph, std::vector<UnfusedSilu>* unfused = nullptr);

}  // namespace tessera::graph
