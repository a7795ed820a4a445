#pragma once
// BN folding: an inference-form BatchNormalization right after a Conv is
// folded into the Conv's weights and bias.
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::graph {

// Folds every BatchNormalization whose X is produced by a Conv whose output
// has no other consumer and is not a graph output, and whose parameters (and
// the conv's weights) are constant. The conv gets new weight/bias tensors
// (shared weights are never mutated) and takes over the BN's output tensor;
// the conv's old output tensor is left unused. Returns one entry per fold.
struct FoldedBatchNorm {
  std::string batch_norm;  // the removed op's name
  std::string conv;        // the conv that absorbed it
};
std::vector<FoldedBatchNorm> fold_batch_norms(Graph& graph);

}  // namespace tessera::graph
