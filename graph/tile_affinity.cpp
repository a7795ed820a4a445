#include "graph/tile_affinity.hpp"

#include <algorithm>

#include "graph/dependency.hpp"
#include "graph/tiler.hpp"

namespace tessera::graph {

std::vector<int32_t> main_parents(const TileGraph& graph) {
  const auto count = static_cast<int32_t>(graph.nodes.size());
  std::vector<std::vector<int32_t>> parents(static_cast<size_t>(count));
  for (int32_t p = 0; p < count; ++p)
    for (const int32_t c : graph.nodes[static_cast<size_t>(p)].children)
      parents[static_cast<size_t>(c)].push_back(p);

  std::vector<int32_t> main(static_cast<size_t>(count), -1);
  std::vector<Shape> input_shapes;
  for (int32_t c = 0; c < count; ++c) {
    const auto& mine = parents[static_cast<size_t>(c)];
    if (mine.size() < 2) {
      if (!mine.empty()) main[static_cast<size_t>(c)] = mine[0];
      continue;
    }
    const TileNode& node = graph.nodes[static_cast<size_t>(c)];
    const Operator& op = graph.ops.at(static_cast<size_t>(node.op));
    input_shapes.clear();
    for (const int32_t t : op.inputs)
      input_shapes.push_back(graph.tensors.at(static_cast<size_t>(t)).shape);
    const Shape& output_shape = graph.tensors.at(static_cast<size_t>(op.outputs.at(0))).shape;
    const std::vector<InputDependency> deps =
        tile_dependencies(op, input_shapes, output_shape, node.region);
    int64_t best = -1;
    for (const int32_t p : mine) {
      const TileNode& parent = graph.nodes[static_cast<size_t>(p)];
      const int32_t produced = graph.ops.at(static_cast<size_t>(parent.op)).outputs.at(0);
      int64_t read = 0;
      for (const InputDependency& dep : deps) {
        if (op.inputs.at(static_cast<size_t>(dep.operand)) != produced) continue;
        if (dep.region.rank() != parent.region.rank()) continue;
        read += region_intersection(dep.region, parent.region).numel();
      }
      if (read > best) {
        best = read;
        main[static_cast<size_t>(c)] = p;
      }
    }
  }
  return main;
}

std::vector<uint8_t> depth_first_nodes(const TileGraph& graph) {
  std::vector<int64_t> tiles(graph.ops.size(), 0);
  for (const TileNode& node : graph.nodes) ++tiles.at(static_cast<size_t>(node.op));
  std::vector<uint8_t> walk_into_op(graph.ops.size(), 1);
  for (size_t o = 0; o < graph.ops.size(); ++o) {
    int64_t weight_bytes = 0, activation_bytes = 0;
    for (const int32_t t : graph.ops[o].inputs) {
      const CompiledTensor& tensor = graph.tensors.at(static_cast<size_t>(t));
      (tensor.storage == TensorStorage::Weight ? weight_bytes : activation_bytes) +=
          tensor.byte_size();
    }
    walk_into_op[o] = weight_bytes * std::max<int64_t>(tiles[o] - 1, 0) < activation_bytes;
  }
  std::vector<uint8_t> walk(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    walk[n] = walk_into_op[static_cast<size_t>(graph.nodes[n].op)];
  return walk;
}

std::vector<uint8_t> long_nodes(const TileGraph& graph) {
  std::vector<int64_t> work(graph.ops.size());
  std::vector<Shape> input_shapes;
  for (size_t o = 0; o < graph.ops.size(); ++o) {
    const Operator& op = graph.ops[o];
    input_shapes.clear();
    for (const int32_t t : op.inputs)
      input_shapes.push_back(graph.tensors.at(static_cast<size_t>(t)).shape);
    work[o] =
        op_work(op, input_shapes, graph.tensors.at(static_cast<size_t>(op.outputs.at(0))).shape);
  }
  std::vector<uint8_t> long_node(graph.nodes.size(), 0);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const TileNode& node = graph.nodes[n];
    const auto o = static_cast<size_t>(node.op);
    const int64_t out =
        shape_numel(graph.tensors.at(static_cast<size_t>(graph.ops[o].outputs.at(0))).shape);
    const double share =
        out > 0 ? static_cast<double>(node.region.numel()) / static_cast<double>(out) : 0.0;
    long_node[n] = static_cast<double>(work[o]) * share >= static_cast<double>(kLongNodeWork);
  }
  return long_node;
}

}  // namespace tessera::graph
