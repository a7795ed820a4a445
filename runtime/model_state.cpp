#include "runtime/model_state.hpp"

#include "graph/error.hpp"

namespace tessera::detail {

namespace {

void build_csr(ModelState& m) {
  const auto& nodes = m.graph.nodes;
  const auto count = static_cast<int32_t>(nodes.size());
  m.parent_counts.resize(count);
  m.depths.resize(count);
  m.child_offsets.assign(count + 1, 0);
  for (int32_t i = 0; i < count; ++i) {
    m.parent_counts[i] = nodes[i].parent_count;
    m.depths[i] = nodes[i].depth;
    m.child_offsets[i + 1] = m.child_offsets[i] + static_cast<int32_t>(nodes[i].children.size());
    if (nodes[i].parent_count == 0) m.sources.push_back(i);
  }
  m.children.reserve(m.child_offsets[count]);
  for (const auto& n : nodes)
    m.children.insert(m.children.end(), n.children.begin(), n.children.end());
  m.view = scheduler::GraphView{count,
                                m.parent_counts.data(),
                                m.child_offsets.data(),
                                m.children.data(),
                                m.depths.data(),
                                m.sources.data(),
                                static_cast<int32_t>(m.sources.size())};
}

void bind_ops(ModelState& m) {
  const auto& g = m.graph;
  for (const auto& op : g.ops) {
    OpBinding b;
    b.kernel = kernels::find_tile_kernel(op.type, op.kernel);
    if (b.kernel == nullptr)
      throw Error(m.path + ": op '" + op.name + "' (" + std::string(graph::op_type_name(op.type)) +
                  ") asks for kernel '" + op.kernel +
                  "', which this build of Tessera does not have");
    b.first_operand = static_cast<uint32_t>(m.operands.size());
    for (int32_t t : op.inputs) {
      const auto& tensor = g.tensors[t];
      OperandPlacement p;
      p.shape = &tensor.shape;
      if (tensor.storage == graph::TensorStorage::Weight)
        p.weight = tensor.weight.data();
      else
        p.arena_offset = tensor.arena_offset;
      m.operands.push_back(p);
    }
    b.operand_count = static_cast<uint32_t>(op.inputs.size());
    const auto& out = g.tensors[op.outputs.at(0)];
    b.output_offset = out.arena_offset;
    b.output_shape = &out.shape;
    m.ops.push_back(b);
  }
}

TensorSpec spec_of(const graph::CompiledTensor& t) {
  return TensorSpec{t.name, t.shape, std::string(graph::dtype_name(t.dtype))};
}

}  // namespace

std::shared_ptr<ModelState> make_model_state(std::string path, graph::TileGraph graph,
                                             std::weak_ptr<EngineState> engine) {
  auto m = std::make_shared<ModelState>();
  m->path = std::move(path);
  m->graph = std::move(graph);
  m->engine = std::move(engine);
  build_csr(*m);
  bind_ops(*m);
  for (int32_t t : m->graph.inputs) m->input_specs.push_back(spec_of(m->graph.tensors[t]));
  for (int32_t t : m->graph.outputs) m->output_specs.push_back(spec_of(m->graph.tensors[t]));
  return m;
}

}  // namespace tessera::detail
