#include "kernels/layout_assignment.hpp"

#include <numeric>

#include "graph/error.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {
namespace {

// Union-find over tensor indices: tensors a Uniform kernel ties together.
struct TensorGroups {
  std::vector<int32_t> parent;
  explicit TensorGroups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int32_t find(int32_t t) {
    while (parent[static_cast<size_t>(t)] != t) {
      parent[static_cast<size_t>(t)] = parent[static_cast<size_t>(parent[static_cast<size_t>(t)])];
      t = parent[static_cast<size_t>(t)];
    }
    return t;
  }
  void unite(int32_t a, int32_t b) { parent[static_cast<size_t>(find(a))] = find(b); }
};

// Whether an operand of `shape`, broadcast (right-aligned) to a rank-4
// output, has H·W > 1: then its physical order matters to a kernel.
bool material_operand(const graph::Shape& shape) {
  int64_t hw = 1;
  for (size_t d = 0; d < shape.size() && d < 2; ++d) hw *= shape[shape.size() - 1 - d];
  return hw > 1;
}

// Operands every kernel of the op reads in their own fixed order, whatever
// the activations' layout: a Conv's weights [OC, C/group, kH, kW] and bias,
// and a fused expansion's (its last two inputs). They never tie a Uniform
// kernel's activations to NCHW.
bool own_order_operand(const graph::Operator& op, size_t input_index) {
  if (op.type != graph::OpType::Conv) return false;
  if (op.attrs.fused_expand && input_index >= graph::expand_weight_input(op.attrs)) return true;
  return input_index == 1 || input_index == 2;
}

std::string op_label(const graph::Operator& op) {
  return "'" + op.name + "' (" + std::string(graph::op_type_name(op.type)) + ", " + op.kernel + ")";
}

}  // namespace

LayoutAssignment assign_layouts(graph::TileGraph& graph, LayoutPolicy policy) {
  const size_t count = graph.tensors.size();
  LayoutAssignment result;
  std::vector<bool> material(count, false), model_io(count, false);
  std::vector<std::string> why_not(count);  // empty: no reason yet to stay NCHW
  for (size_t t = 0; t < count; ++t) {
    graph::CompiledTensor& tensor = graph.tensors[t];
    tensor.layout = graph::Layout::NCHW;
    material[t] =
        tensor.storage == graph::TensorStorage::Arena && !graph::layout_immaterial(tensor.shape);
    if (material[t]) ++result.material_tensors;
  }
  for (int32_t t : graph.inputs) model_io[static_cast<size_t>(t)] = true;
  for (int32_t t : graph.outputs) model_io[static_cast<size_t>(t)] = true;
  if (policy == LayoutPolicy::Nchw) return result;

  auto keep_nchw = [&](int32_t t, const std::string& reason) {
    std::string& slot = why_not[static_cast<size_t>(t)];
    if (slot.empty()) slot = reason;
  };
  TensorGroups groups(count);
  for (const graph::Operator& op : graph.ops) {
    const TileKernelVariant* variant = find_tile_kernel_variant(op.type, op.kernel);
    if (!variant)
      throw Error("op '" + op.name + "' (" + std::string(graph::op_type_name(op.type)) +
                  ") asks for kernel '" + op.kernel + "', which this build does not have");
    const int32_t out = op.outputs.at(0);
    switch (variant->layouts) {
      case LayoutSupport::NchwOnly:
        keep_nchw(out, "producer " + op_label(op) + " is NCHW-only");
        for (int32_t t : op.inputs) keep_nchw(t, "consumer " + op_label(op) + " is NCHW-only");
        break;
      case LayoutSupport::Any:
        break;
      case LayoutSupport::Uniform:
        for (size_t i = 0; i < op.inputs.size(); ++i) {
          if (own_order_operand(op, i)) continue;
          const int32_t t = op.inputs[i];
          const graph::CompiledTensor& in = graph.tensors[static_cast<size_t>(t)];
          if (!material_operand(in.shape)) continue;  // same bytes in either order
          if (material[static_cast<size_t>(t)])
            groups.unite(t, out);
          else  // a weight or a lower-rank operand the output's order must match
            keep_nchw(out, "consumer " + op_label(op) + " reads " + in.name +
                               " (a weight or not rank 4) in the output's order");
        }
        break;
    }
    // An output written over its fused residual (graph/memory_plan.hpp: the
    // two share their arena bytes) takes the residual's order: the kernel
    // finishes each output element in its residual element's place.
    if (op.attrs.fused_residual && op.inputs.size() == 4) {
      const int32_t r = op.inputs[3];
      const graph::CompiledTensor& residual = graph.tensors[static_cast<size_t>(r)];
      const graph::CompiledTensor& output = graph.tensors[static_cast<size_t>(out)];
      if (residual.storage == graph::TensorStorage::Arena &&
          output.storage == graph::TensorStorage::Arena &&
          residual.arena_offset == output.arena_offset && r != out)
        groups.unite(r, out);
    }
  }
  // A group is NHWC only if every member may be.
  std::vector<bool> group_ok(count, true);
  for (size_t t = 0; t < count; ++t) {
    const bool ok = material[t] && !model_io[t] && why_not[t].empty();
    if (!ok) group_ok[static_cast<size_t>(groups.find(static_cast<int32_t>(t)))] = false;
  }
  for (size_t t = 0; t < count; ++t) {
    if (!material[t] || model_io[t]) continue;
    graph::CompiledTensor& tensor = graph.tensors[t];
    const int32_t root = groups.find(static_cast<int32_t>(t));
    if (why_not[t].empty() && group_ok[static_cast<size_t>(root)]) {
      tensor.layout = graph::Layout::NHWC;
      ++result.nhwc_tensors;
      continue;
    }
    result.kept_nchw.push_back(
        "'" + tensor.name + "' stays NCHW: " +
        (why_not[t].empty() ? "a kernel needs it in the same order as a tensor that stays NCHW"
                            : why_not[t]));
  }
  return result;
}

std::optional<std::string> layout_contract_violation(const graph::TileGraph& graph,
                                                     const graph::Operator& op,
                                                     const TileKernelVariant& variant) {
  std::vector<int32_t> operands;
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (!own_order_operand(op, i)) operands.push_back(op.inputs[i]);
  operands.push_back(op.outputs.at(0));
  bool any_nhwc = false, any_nchw = false;
  for (int32_t t : operands) {
    const graph::CompiledTensor& tensor = graph.tensors.at(static_cast<size_t>(t));
    if (variant.layouts != LayoutSupport::Uniform && graph::layout_immaterial(tensor.shape))
      continue;
    if (variant.layouts == LayoutSupport::Uniform && !material_operand(tensor.shape)) continue;
    const bool nhwc = tensor.layout == graph::Layout::NHWC;
    if (nhwc && variant.layouts == LayoutSupport::NchwOnly)
      return "tensor '" + tensor.name + "' is NHWC but kernel '" + op.kernel +
             "' reads and writes NCHW only";
    (nhwc ? any_nhwc : any_nchw) = true;
  }
  if (variant.layouts == LayoutSupport::Uniform && any_nhwc && any_nchw)
    return "kernel '" + op.kernel +
           "' needs all its operands in one layout, but they mix NCHW "
           "and NHWC";
  return std::nullopt;
}

}  // namespace tessera::kernels
