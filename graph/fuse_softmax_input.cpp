#include "graph/fuse_softmax_input.hpp"

#include <string>

#include "graph/op_type.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

std::vector<RewrittenPattern> fuse_softmax_inputs(Graph& graph) {
  std::vector<RewrittenPattern> fused;
  GraphUses uses(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  // The op producing `t` when it is read once, by one op, and is no graph output.
  auto single_use_producer = [&](int32_t t) -> Operator* {
    const auto i = static_cast<size_t>(t);
    if (uses.consumers[i] != 1 || uses.producer[i] < 0) return nullptr;
    Operator& op = graph.ops[static_cast<size_t>(uses.producer[i])];
    return removed[static_cast<size_t>(uses.producer[i])] ? nullptr : &op;
  };
  for (Operator& softmax : graph.ops) {
    if (softmax.type != OpType::Softmax || softmax.inputs.size() != 1 ||
        softmax.attrs.softmax_coerce_2d || softmax.attrs.alpha != 1.0f)
      continue;
    const Shape& x_shape = graph.tensors[static_cast<size_t>(softmax.inputs[0])].shape;
    if (x_shape.empty() || softmax.attrs.axis + 1 != static_cast<int64_t>(x_shape.size())) continue;
    int32_t x = softmax.inputs[0];
    int32_t mask = -1;
    float alpha = 1.0f;
    std::string what;
    // An Add of the mask, outermost.
    if (Operator* add = single_use_producer(x);
        add && add->type == OpType::Add && add->inputs.size() == 2) {
      for (int order = 0; order < 2 && mask < 0; ++order) {
        const int32_t a = add->inputs[static_cast<size_t>(order)];
        const int32_t m = add->inputs[static_cast<size_t>(1 - order)];
        const TensorInfo& ai = graph.tensors[static_cast<size_t>(a)];
        const TensorInfo& mi = graph.tensors[static_cast<size_t>(m)];
        if (ai.shape != x_shape || ai.dtype != DType::Float32 || mi.dtype != DType::Float32 ||
            !broadcasts_to(mi.shape, x_shape) || a == m)
          continue;
        mask = m;
        x = a;
        removed[static_cast<size_t>(uses.producer[static_cast<size_t>(softmax.inputs[0])])] = true;
        what = "mask Add '" + add->name + "'";
      }
    }
    // A Mul or Div by a constant scalar.
    if (Operator* scale = single_use_producer(x);
        scale && (scale->type == OpType::Mul || scale->type == OpType::Div) &&
        scale->inputs.size() == 2) {
      for (int order = 0; order < (scale->type == OpType::Mul ? 2 : 1); ++order) {
        const int32_t a = scale->inputs[static_cast<size_t>(order)];
        const TensorInfo& ci = graph.tensors[static_cast<size_t>(scale->inputs[1 - order])];
        const TensorInfo& ai = graph.tensors[static_cast<size_t>(a)];
        if (!ci.is_weight || ci.weight.size() != 1 || shape_numel(ci.shape) != 1 ||
            ai.shape != x_shape || ai.dtype != DType::Float32 || ci.weight[0] == 0.0f)
          continue;
        alpha = scale->type == OpType::Mul ? ci.weight[0] : 1.0f / ci.weight[0];
        removed[static_cast<size_t>(uses.producer[static_cast<size_t>(x)])] = true;
        what += std::string(what.empty() ? "" : ", ") + "scale " +
                std::string(op_type_name(scale->type)) + " '" + scale->name + "'";
        x = a;
        break;
      }
    }
    if (what.empty()) continue;
    softmax.inputs = {x};
    if (mask >= 0) softmax.inputs.push_back(mask);
    softmax.attrs.alpha = alpha;
    fused.push_back({softmax.name, what});
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
