#include "graph/fuse_silu.hpp"

#include "graph/op_type.hpp"

namespace tessera::graph {

namespace {

bool has_epilogue(OpType t) {
  return t == OpType::Conv || t == OpType::Gemm || t == OpType::MatMul;
}

}  // namespace

std::vector<RewrittenPattern> fuse_silu(Graph& graph, std::vector<UnfusedSilu>* unfused) {
  std::vector<RewrittenPattern> fused;
  GraphUses uses(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    Operator& mul = graph.ops[i];
    if (mul.type != OpType::Mul || mul.inputs.size() != 2 || mul.outputs.size() != 1) continue;
    for (int order = 0; order < 2; ++order) {
      const int32_t x = mul.inputs[static_cast<size_t>(order)];
      const int32_t s = mul.inputs[static_cast<size_t>(1 - order)];
      const Operator* sigmoid = uses.only_use(graph, s, OpType::Sigmoid);
      if (!sigmoid || sigmoid->inputs.size() != 1 || sigmoid->inputs[0] != x) continue;
      const int32_t sigmoid_index = uses.producer[static_cast<size_t>(s)];
      if (removed[static_cast<size_t>(sigmoid_index)]) continue;
      auto skip = [&](const std::string& why) {
        if (unfused) unfused->push_back({mul.name, why});
      };
      const int32_t p = uses.producer[static_cast<size_t>(x)];
      if (p < 0) {
        skip("x is a graph input or weight, not computed by an op with an epilogue");
        break;
      }
      Operator& prod = graph.ops[static_cast<size_t>(p)];
      if (!has_epilogue(prod.type)) {
        skip("x is produced by " + std::string(op_type_name(prod.type)) +
             ", which has no epilogue (only Conv, Gemm and MatMul)");
        break;
      }
      if (prod.attrs.activation != Activation::None) {
        skip("'" + prod.name + "' already has a fused activation");
        break;
      }
      // x's reads: the Sigmoid and the Mul, nothing else (a graph output counts).
      if (uses.consumers[static_cast<size_t>(x)] != 2) {
        skip("x ('" + prod.name + "''s output) has other readers or is a graph output");
        break;
      }
      prod.attrs.activation = Activation::Silu;
      prod.outputs = mul.outputs;
      uses.producer[static_cast<size_t>(mul.outputs[0])] = p;
      removed[i] = true;
      removed[static_cast<size_t>(sigmoid_index)] = true;
      fused.push_back({prod.name, "SiLU '" + sigmoid->name + "' * '" + mul.name + "'"});
      break;
    }
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
