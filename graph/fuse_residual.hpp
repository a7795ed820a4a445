#pragma once
// Residual-Add fusion (issue 4's fused epilogues): Add(conv_out, other),
// where conv_out has the Add's shape and no other consumer, becomes the
// Conv's epilogue: the Conv takes `other` as input 3 and adds it after its
// bias and before its activation, while the tile is still in registers.
// A Relu after the Add then fuses in as the Conv's activation
// (fuse_activations runs after this pass). ResNet-50 has 16 such Adds, each
// one pass over a feature map and one tile node per tile saved. The same for
// MatMul (2-D B) and Gemm: a transformer's attention output projection and
// second FFN product each feed a residual Add (24 in BERT-base).
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::graph {

struct FusedResidual {
  std::string add;   // the removed Add's name
  std::string conv;  // the Conv, MatMul or Gemm that now adds the residual
};

// Fuses where the Conv has no activation or residual yet, conv_out is not a
// graph output, and `other` is computed before the Conv in operator order
// (so the order stays topological). When both operands qualify the later
// Conv takes the other as residual. A Conv without bias gets a zero bias
// (attrs.fused_residual: inputs are always X, W, B, R); so do a MatMul (A,
// B, bias, R) and a Gemm (A, B, C, R) without one. The Conv takes over
// the Add's output tensor; its own old output is left unused.
std::vector<FusedResidual> fuse_residual_adds(Graph& graph);

}  // namespace tessera::graph
