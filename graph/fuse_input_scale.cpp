#include "graph/fuse_input_scale.hpp"

#include <algorithm>

#include "graph/op_type.hpp"

namespace tessera::graph {

namespace {

// A 1x1 stride-1 unpadded group-1 conv with constant [OC, C, 1, 1] weights.
bool pointwise_conv(const Graph& graph, const Operator& conv, int64_t channels) {
  if (conv.type != OpType::Conv || conv.attrs.fused_input_scale || conv.inputs.size() < 2)
    return false;
  const TensorInfo& w = graph.tensors[static_cast<size_t>(conv.inputs[1])];
  return w.is_weight && w.shape.size() == 4 && w.shape[1] == channels && w.shape[2] == 1 &&
         w.shape[3] == 1 && pointwise_attributes(conv.attrs);
}

}  // namespace

std::vector<RewrittenPattern> fuse_input_scales(Graph& graph) {
  std::vector<RewrittenPattern> fused;
  GraphUses uses(graph);
  // Which op reads each tensor, when exactly one op reads it once.
  const std::vector<int32_t> reader = last_readers(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& mul = graph.ops[i];
    if (mul.type != OpType::Mul || mul.inputs.size() != 2 || mul.outputs.size() != 1) continue;
    const auto out = static_cast<size_t>(mul.outputs[0]);
    if (uses.consumers[out] != 1) continue;  // read once, not a graph output
    const int32_t c = reader[out];
    if (c < 0) continue;
    Operator& conv = graph.ops[static_cast<size_t>(c)];
    if (conv.inputs[0] != mul.outputs[0] ||
        std::count(conv.inputs.begin(), conv.inputs.end(), mul.outputs[0]) != 1)
      continue;
    for (int order = 0; order < 2; ++order) {
      const int32_t x = mul.inputs[static_cast<size_t>(order)];
      const int32_t s = mul.inputs[static_cast<size_t>(1 - order)];
      const TensorInfo& xi = graph.tensors[static_cast<size_t>(x)];
      const TensorInfo& si = graph.tensors[static_cast<size_t>(s)];
      if (xi.is_weight || si.is_weight || xi.shape.size() != 4 || si.shape.size() != 4) continue;
      if (xi.dtype != DType::Float32 || si.dtype != DType::Float32) continue;
      const Shape& xs = xi.shape;
      const Shape& ss = si.shape;
      if ((ss[0] != xs[0] && ss[0] != 1) || ss[1] != xs[1] || ss[2] != 1 || ss[3] != 1) continue;
      if (graph.tensors[out].shape != xs || !pointwise_conv(graph, conv, xs[1])) continue;
      if (conv.inputs.size() == 2)  // the layout X, W, B, [R,] S needs a bias
        append_zero_bias(graph, conv, graph.tensors[static_cast<size_t>(conv.inputs[1])].shape[0]);
      conv.inputs[0] = x;
      conv.inputs.push_back(s);
      conv.attrs.fused_input_scale = true;
      removed[i] = true;
      fused.push_back({conv.name, "channel scale '" + mul.name + "'"});
      break;
    }
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
