#include "graph/split_global_pool.hpp"

#include "graph/op_type.hpp"

namespace tessera::graph {

std::vector<RewrittenPattern> split_global_pools(Graph& graph) {
  std::vector<RewrittenPattern> split;
  const GraphUses uses(graph);
  std::vector<Operator> ops;
  ops.reserve(graph.ops.size());
  for (Operator& op : graph.ops) {
    if (op.type == OpType::GlobalAveragePool && op.inputs.size() == 1) {
      const int32_t x = op.inputs[0];
      const TensorInfo& info = graph.tensors[static_cast<size_t>(x)];
      const Shape s = info.shape;  // a copy: the new tensor may move the others
      if (uses.producer[static_cast<size_t>(x)] >= 0 && info.dtype == DType::Float32 &&
          s.size() == 4 && s[2] >= 2 && s[3] >= 2) {
        TensorInfo means;
        means.name = op.name + "_row_means";
        means.shape = {s[0], s[1], s[2], 1};
        graph.tensors.push_back(std::move(means));
        Operator rows;
        rows.name = op.name + "_row_means";
        rows.type = OpType::AveragePool;
        rows.attrs.kernel_shape = {1, s[3]};
        rows.attrs.strides = {1, s[3]};
        rows.attrs.pads = {0, 0, 0, 0};
        rows.attrs.dilations = {1, 1};
        rows.inputs = {x};
        rows.outputs = {static_cast<int32_t>(graph.tensors.size() - 1)};
        op.inputs[0] = rows.outputs[0];
        split.push_back({op.name, "reads the row means of '" + rows.name + "'"});
        ops.push_back(std::move(rows));
      }
    }
    ops.push_back(std::move(op));
  }
  graph.ops = std::move(ops);
  return split;
}

}  // namespace tessera::graph
