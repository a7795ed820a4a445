#pragma once
// Transpose of a Transpose as one Transpose: exporters write K^T of
// multi-head attention as Transpose(Transpose(Reshape(K), (0, 2, 1, 3)),
// (0, 1, 3, 2)) (Hugging Face BERT, GPT-2, the split_heads of
// bench/e2e/compare_transformers.py), two copies of K where one reads it
// once: Transpose(x, (0, 2, 3, 1)).
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Where a Transpose's input is the output of another Transpose, read by it
// alone and not a graph output, the second reads the first's input with the
// composed permutation (perm[i] = first[second[i]]) and the first is
// removed; a chain of any length becomes its last op. The result may be the
// identity permutation (a plain copy).
std::vector<RewrittenPattern> fuse_transposes(Graph& graph);

}  // namespace tessera::graph
