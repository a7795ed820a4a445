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

const Operator* producer_of(const Graph& graph, const GraphUses& uses, int32_t t) {
  const int32_t p = uses.producer[static_cast<size_t>(t)];
  return p < 0 ? nullptr : &graph.ops[static_cast<size_t>(p)];
}

// The softmax NaN guard exporters put between the Softmax and P·V (Hugging
// Face's attention with a mask): `t` = Where(IsNaN(p), 0, p), with p read by
// the guard's two ops only. Returns the Where (its IsNaN is the producer of
// its condition), or null.
const Operator* nan_guard(const Graph& graph, const GraphUses& uses, int32_t t) {
  const Operator* where = uses.only_use(graph, t, OpType::Where);
  if (!where || where->inputs.size() != 3) return nullptr;
  const int32_t p = where->inputs[2];
  const Operator* is_nan = uses.only_use(graph, where->inputs[0], OpType::IsNaN);
  if (!is_nan || is_nan->inputs.size() != 1 || is_nan->inputs[0] != p) return nullptr;
  if (!is_constant_near(graph, where->inputs[1], 0.0f, 0.0f)) return nullptr;
  if (uses.consumers[static_cast<size_t>(p)] != 2) return nullptr;
  if (graph.tensors[static_cast<size_t>(t)].shape != graph.tensors[static_cast<size_t>(p)].shape)
    return nullptr;
  return where;
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
    const Operator* guard = nan_guard(graph, uses, pv.inputs[0]);
    const Operator* guard_is_nan = guard ? producer_of(graph, uses, guard->inputs[0]) : nullptr;
    // The probabilities: read by P·V alone, or by the guard's two ops.
    const int32_t probabilities = guard ? guard->inputs[2] : pv.inputs[0];
    const Operator* softmax = guard ? producer_of(graph, uses, probabilities)
                                    : uses.only_use(graph, probabilities, OpType::Softmax);
    if (!softmax || softmax->type != OpType::Softmax || softmax->inputs.empty() ||
        softmax->inputs.size() > 2 || softmax->attrs.softmax_coerce_2d)
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
    std::string what = "MatMul '" + qk->name + "', Softmax '" + softmax->name + "'";
    if (guard) {
      removed[index_of(guard)] = true;
      removed[index_of(guard_is_nan)] = true;
      what += ", its NaN guard IsNaN '" + guard_is_nan->name + "' and Where '" + guard->name + "'";
    }
    std::vector<int32_t> inputs = {q, kt, v};
    if (softmax->inputs.size() == 2) inputs.push_back(softmax->inputs[1]);
    OpAttributes attrs;
    attrs.alpha = softmax->attrs.alpha;
    attrs.nan_probabilities_to_zero = guard != nullptr;
    fused.push_back({pv.name, what});
    pv.type = OpType::FusedAttention;
    pv.attrs = attrs;
    pv.inputs = std::move(inputs);
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
