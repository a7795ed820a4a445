#include "graph/fuse_matmul_bias.hpp"

namespace tessera::graph {

namespace {

// b's columns if b is a constant of shape [N] or [1, .., 1, N], else -1.
int64_t bias_columns(const TensorInfo& b) {
  if (!b.is_weight || b.shape.empty()) return -1;
  for (size_t d = 0; d + 1 < b.shape.size(); ++d)
    if (b.shape[d] != 1) return -1;
  return b.shape.back();
}

}  // namespace

std::vector<RewrittenPattern> fuse_matmul_bias(Graph& graph) {
  GraphUses uses(graph);
  std::vector<RewrittenPattern> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& add = graph.ops[i];
    if (add.type != OpType::Add || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1])
      continue;
    for (size_t k = 0; k < 2; ++k) {
      const Operator* found = uses.only_use(graph, add.inputs[k], OpType::MatMul);
      if (!found) continue;
      const int32_t p = uses.producer[static_cast<size_t>(add.inputs[k])];
      Operator& matmul = graph.ops[static_cast<size_t>(p)];
      if (matmul.inputs.size() != 2 || matmul.attrs.activation != Activation::None ||
          matmul.attrs.fused_residual)
        continue;
      const TensorInfo& a = graph.tensors[static_cast<size_t>(matmul.inputs[0])];
      const TensorInfo& w = graph.tensors[static_cast<size_t>(matmul.inputs[1])];
      const int32_t bias = add.inputs[1 - k];
      const TensorInfo& b = graph.tensors[static_cast<size_t>(bias)];
      if (!w.is_weight || w.shape.size() != 2 || a.shape.size() < 2 ||
          bias_columns(b) != w.shape[1] ||
          graph.tensors[static_cast<size_t>(add.outputs[0])].shape !=
              graph.tensors[static_cast<size_t>(matmul.outputs[0])].shape)
        continue;
      int32_t bias_vector = bias;
      if (b.shape.size() != 1) {
        TensorInfo vec;
        vec.name = b.name + "_as_vector";
        vec.shape = {w.shape[1]};
        vec.is_weight = true;
        vec.weight = b.weight;
        graph.tensors.push_back(std::move(vec));  // invalidates a, w, b
        bias_vector = static_cast<int32_t>(graph.tensors.size() - 1);
        uses.consumers.push_back(0);
        uses.producer.push_back(-1);
      }
      matmul.inputs.push_back(bias_vector);
      matmul.outputs = add.outputs;
      uses.producer[static_cast<size_t>(add.outputs[0])] = p;
      removed[i] = true;
      fused.push_back({matmul.name, "bias Add '" + add.name + "'"});
      break;
    }
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
