#include "runtime/model_state.hpp"

#include <algorithm>
#include <exception>
#include <string>

#include "graph/error.hpp"
#include "graph/tile_affinity.hpp"
#include "kernels/layout_assignment.hpp"

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
  m.main_parents = graph::main_parents(m.graph);
  m.walk_into = graph::depth_first_nodes(m.graph);
  m.shared_when_ready = graph::long_nodes(m.graph);
  m.view = scheduler::GraphView{count,
                                m.parent_counts.data(),
                                m.child_offsets.data(),
                                m.children.data(),
                                m.depths.data(),
                                m.sources.data(),
                                static_cast<int32_t>(m.sources.size()),
                                m.main_parents.data(),
                                m.walk_into.data(),
                                m.shared_when_ready.data()};
}

void bind_ops(ModelState& m) {
  const auto& g = m.graph;
  for (const auto& op : g.ops) {
    OpBinding b;
    const kernels::TileKernelVariant* variant =
        kernels::find_tile_kernel_variant(op.type, op.kernel);
    const std::string label =
        "op '" + op.name + "' (" + std::string(graph::op_type_name(op.type)) + ")";
    if (variant == nullptr)
      throw Error(m.path + ": " + label + " asks for kernel '" + op.kernel +
                  "', which this build of Tessera does not have");
    b.kernel = variant->run;
    std::vector<kernels::ConstTensorView> constants;
    for (int32_t t : op.inputs) {
      const auto& tensor = g.tensors[t];
      const bool weight = tensor.storage == graph::TensorStorage::Weight;
      constants.push_back({weight ? tensor.weight.data() : nullptr, &tensor.shape, tensor.layout});
    }
    // The file names the variant; it must still fit the op (a file from a
    // hostile source could pair a kernel with an op it cannot run).
    if (variant->applies)
      if (auto why_not = variant->applies(op, constants))
        throw Error(m.path + ": " + label + " cannot use kernel '" + op.kernel + "': " + *why_not);
    if (auto why_not = kernels::layout_contract_violation(g, op, *variant))
      throw Error(m.path + ": " + label + ": " + *why_not);
    if (variant->prepare) b.prepared = variant->prepare(op, constants);
    b.first_operand = static_cast<uint32_t>(m.operands.size());
    for (int32_t t : op.inputs) {
      const auto& tensor = g.tensors[t];
      OperandPlacement p;
      p.tensor = t;
      p.shape = &tensor.shape;
      p.layout = tensor.layout;
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
    b.output_layout = out.layout;
    m.ops.push_back(b);
  }
}

// Barrier stages: the nodes of each op, which the tiler numbers op by op.
void build_op_stages(ModelState& m) {
  const auto& nodes = m.graph.nodes;
  m.op_first_node.assign(m.graph.ops.size() + 1, 0);
  int32_t previous_op = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].op < previous_op) {
      m.op_stage_error = "node " + std::to_string(n) + " belongs to op " +
                         std::to_string(nodes[n].op) + " but follows a node of op " +
                         std::to_string(previous_op) +
                         "; the barrier executor needs the nodes grouped op by op";
      return;
    }
    previous_op = nodes[n].op;
    ++m.op_first_node[static_cast<size_t>(nodes[n].op) + 1];
  }
  for (size_t o = 0; o < m.graph.ops.size(); ++o) m.op_first_node[o + 1] += m.op_first_node[o];
  if (auto error = scheduler::check_barrier_stages(m.view, m.op_first_node))
    m.op_stage_error = "the barrier executor cannot run this graph op by op: " + *error;
}

TensorSpec spec_of(const graph::CompiledTensor& t) {
  return TensorSpec{t.name, t.shape, std::string(graph::dtype_name(t.dtype))};
}

}  // namespace

EngineState::EngineState(const EngineOptions& options) : kind(options.executor) {
  try {
    if (kind == ExecutorKind::Barrier) {
      barrier = std::make_unique<scheduler::BarrierExecutor>(
          scheduler::BarrierExecutorOptions{options.threads, options.cores});
    } else {
      scheduler::ExecutorOptions executor_options(options.threads, options.cores);
      dataflow = std::make_unique<scheduler::Executor>(executor_options);
    }
  } catch (const std::exception& e) {
    barrier.reset();
    dataflow.reset();
    start_error = std::string("the engine could not start: ") + e.what();
  }
}

void EngineState::submit(scheduler::Request& request, const ModelState& model) {
  if (barrier)
    barrier->submit(request, model.op_first_node);
  else
    dataflow->submit(request);
}

int32_t EngineState::thread_count() const {
  if (barrier) return barrier->thread_count();
  if (dataflow) return dataflow->thread_count();
  return 0;
}

std::shared_ptr<ModelState> make_model_state(std::string path, graph::TileGraph graph,
                                             std::weak_ptr<EngineState> engine) {
  auto m = std::make_shared<ModelState>();
  m->path = std::move(path);
  m->graph = std::move(graph);
  m->engine = std::move(engine);
  build_csr(*m);
  build_op_stages(*m);
  bind_ops(*m);
  for (int32_t t : m->graph.inputs) {
    m->input_specs.push_back(spec_of(m->graph.tensors[t]));
    const auto& outputs = m->graph.outputs;
    m->input_read_in_place.push_back(std::find(outputs.begin(), outputs.end(), t) == outputs.end());
  }
  for (int32_t t : m->graph.outputs) m->output_specs.push_back(spec_of(m->graph.tensors[t]));
  return m;
}

}  // namespace tessera::detail
