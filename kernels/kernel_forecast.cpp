#include "kernels/kernel_forecast.hpp"

#include <algorithm>
#include <utility>

namespace tessera::kernels {

ChoiceForecast::ChoiceForecast(KernelPolicy policy, std::vector<std::string_view> disabled,
                               graph::Layout maps)
    : policy_(policy), disabled_(std::move(disabled)), maps_(maps) {}

std::string ChoiceForecast::kernel_for(const graph::Graph& graph, int32_t op_index) const {
  const graph::Operator& op = graph.ops.at(static_cast<size_t>(op_index));
  // As assign_layouts() lays them out: weights and the model's inputs and
  // outputs NCHW, other rank-4 activations in the maps' layout.
  const auto model_io = [&](int32_t t) {
    return std::ranges::find(graph.inputs, t) != graph.inputs.end() ||
           std::ranges::find(graph.outputs, t) != graph.outputs.end();
  };
  std::vector<ConstTensorView> inputs;
  for (int32_t t : op.inputs) {
    const graph::TensorInfo& tensor = graph.tensors.at(static_cast<size_t>(t));
    const graph::Layout layout =
        !tensor.is_weight && tensor.shape.size() == 4 && !model_io(t) ? maps_ : graph::Layout::NCHW;
    inputs.push_back({tensor.is_weight ? tensor.weight.data() : nullptr, &tensor.shape, layout});
  }
  return choose_kernel(op, inputs, policy_, disabled_).kernel;
}

bool ChoiceForecast::writes_over_residual(const graph::Graph& graph, int32_t op_index) const {
  const graph::Operator& op = graph.ops.at(static_cast<size_t>(op_index));
  return op.type == graph::OpType::Conv && op.attrs.fused_residual &&
         kernel_for(graph, op_index) == "cpu.conv_sparse";
}

bool ChoiceForecast::runs_winograd(const graph::Graph& graph, int32_t op_index) const {
  return kernel_for(graph, op_index) == "cpu.conv_winograd";
}

}  // namespace tessera::kernels
