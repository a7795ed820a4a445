#pragma once
// Epilogue fusion: a Relu, Clip or Sigmoid applied to the output of a Conv,
// Gemm or MatMul, or a Gelu (either form) to a Gemm or MatMul, becomes that
// op's fused activation, computed while the tile
// is still in registers or cache (issue 4) and saving one pass over memory
// and one tile node per producer tile.
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::graph {

struct FusedActivation {
  std::string activation;  // the removed op's name
  std::string producer;    // the op that now applies it
};

// Fuses where the producer's output has no other consumer and is not a graph
// output, and the producer has no activation yet; also through one Reshape
// between them (a Gemm or MatMul, with the same conditions on the Reshape's
// output). The producer, or that Reshape, takes over the activation's output
// tensor; the old one is left unused.
std::vector<FusedActivation> fuse_activations(Graph& graph);

}  // namespace tessera::graph
