#include "graph/fuse_transposes.hpp"

#include <string>

namespace tessera::graph {

std::vector<RewrittenPattern> fuse_transposes(Graph& graph) {
  std::vector<RewrittenPattern> fused;
  const GraphUses uses(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  // Ops are in topological order: by the time a Transpose is visited, the
  // one before it in a chain already reads the chain's input.
  for (Operator& second : graph.ops) {
    if (second.type != OpType::Transpose || second.inputs.size() != 1) continue;
    const Operator* first = uses.only_use(graph, second.inputs[0], OpType::Transpose);
    if (!first || first->inputs.size() != 1) continue;
    const std::vector<int64_t>&inner = first->attrs.perm, &outer = second.attrs.perm;
    const size_t rank = graph.tensors[static_cast<size_t>(first->inputs[0])].shape.size();
    if (inner.size() != rank || outer.size() != rank) continue;
    std::vector<int64_t> perm(rank);
    bool valid = true;
    for (size_t i = 0; i < rank && valid; ++i) {
      valid = outer[i] >= 0 && static_cast<size_t>(outer[i]) < rank;
      if (valid) perm[i] = inner[static_cast<size_t>(outer[i])];
    }
    if (!valid) continue;
    removed[static_cast<size_t>(first - graph.ops.data())] = true;
    fused.push_back({second.name, "Transpose '" + first->name + "'"});
    second.inputs[0] = first->inputs[0];
    second.attrs.perm = std::move(perm);
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
