#include "graph/fuse_attention.hpp"

#include <algorithm>
#include <string>

#include "graph/op_shape.hpp"
#include "graph/op_type.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {
namespace {

bool plain_matmul(const Operator& op) {
  return op.type == OpType::MatMul && op.inputs.size() == 2 &&
         op.attrs.activation == Activation::None && !op.attrs.fused_residual;
}

}  // namespace

std::vector<RewrittenPattern> fuse_attention(Graph& graph) {
  std::vector<RewrittenPattern> fused;
  GraphUses uses(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  const auto tensor = [&](int32_t t) -> const TensorInfo& {
    return graph.tensors[static_cast<size_t>(t)];
  };
  for (Operator& pv : graph.ops) {
    if (!plain_matmul(pv)) continue;
    const Operator* softmax = uses.only_use(graph, pv.inputs[0], OpType::Softmax);
    if (!softmax || softmax->inputs.empty() || softmax->inputs.size() > 2 ||
        softmax->attrs.softmax_coerce_2d)
      continue;
    const Operator* qk = uses.only_use(graph, softmax->inputs[0], OpType::MatMul);
    if (!qk || !plain_matmul(*qk)) continue;
    const int32_t q = qk->inputs[0], kt = qk->inputs[1], v = pv.inputs[1];
    const Shape &qs = tensor(q).shape, &kts = tensor(kt).shape, &vs = tensor(v).shape;
    if (!attention_operands_fit(qs, kts, vs) ||
        softmax->attrs.axis + 1 != static_cast<int64_t>(qs.size()))
      continue;
    if (tensor(q).dtype != DType::Float32 || tensor(kt).dtype != DType::Float32 ||
        tensor(v).dtype != DType::Float32)
      continue;
    const auto index_of = [&](const Operator* op) {
      return static_cast<size_t>(op - &graph.ops[0]);
    };
    if (removed[index_of(softmax)] || removed[index_of(qk)]) continue;
    removed[index_of(softmax)] = true;
    removed[index_of(qk)] = true;
    std::vector<int32_t> inputs = {q, kt, v};
    if (softmax->inputs.size() == 2) inputs.push_back(softmax->inputs[1]);
    OpAttributes attrs;
    attrs.alpha = softmax->attrs.alpha;
    fused.push_back({pv.name, "MatMul '" + qk->name + "', Softmax '" + softmax->name + "'"});
    pv.type = OpType::FusedAttention;
    pv.attrs = attrs;
    pv.inputs = std::move(inputs);
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
