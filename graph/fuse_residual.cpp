#include "graph/fuse_residual.hpp"

namespace tessera::graph {

std::vector<FusedResidual> fuse_residual_adds(Graph& graph) {
  const size_t tensor_count = graph.tensors.size();
  std::vector<int32_t> consumers(tensor_count, 0), producer(tensor_count, -1);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int32_t t : graph.ops[i].inputs) ++consumers[static_cast<size_t>(t)];
    producer[static_cast<size_t>(graph.ops[i].outputs.at(0))] = static_cast<int32_t>(i);
  }
  for (int32_t t : graph.outputs) ++consumers[static_cast<size_t>(t)];  // outputs must stay

  // Whether operand k of `add` can be fused: the Conv index, else -1.
  auto fusable_conv = [&](const Operator& add, size_t k) -> int32_t {
    const int32_t t = add.inputs[k], other = add.inputs[1 - k];
    const int32_t p = producer[static_cast<size_t>(t)];
    if (p < 0 || consumers[static_cast<size_t>(t)] != 1) return -1;
    const Operator& conv = graph.ops[static_cast<size_t>(p)];
    if (conv.type != OpType::Conv || conv.attrs.activation != Activation::None ||
        conv.attrs.fused_residual || conv.inputs.size() < 2 || conv.inputs.size() > 3)
      return -1;
    const Shape& out = graph.tensors[static_cast<size_t>(add.outputs[0])].shape;
    if (graph.tensors[static_cast<size_t>(t)].shape != out ||
        graph.tensors[static_cast<size_t>(other)].shape != out || out.size() != 4)
      return -1;
    // The residual must exist before the Conv runs in operator order.
    if (producer[static_cast<size_t>(other)] >= p) return -1;
    return p;
  };

  std::vector<FusedResidual> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& add = graph.ops[i];
    if (add.type != OpType::Add || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1])
      continue;
    const int32_t c0 = fusable_conv(add, 0), c1 = fusable_conv(add, 1);
    if (c0 < 0 && c1 < 0) continue;
    const size_t k = c0 >= c1 ? 0 : 1;  // the later Conv
    const int32_t p = k == 0 ? c0 : c1;
    const int32_t residual = add.inputs[1 - k];
    Operator& conv = graph.ops[static_cast<size_t>(p)];
    if (conv.inputs.size() == 2) {
      const int64_t channels = graph.tensors[static_cast<size_t>(conv.inputs[1])].shape[0];
      TensorInfo bias;
      bias.name = conv.name + "_zero_bias";
      bias.shape = {channels};
      bias.is_weight = true;
      bias.weight.assign(static_cast<size_t>(channels), 0.0f);
      graph.tensors.push_back(std::move(bias));
      conv.inputs.push_back(static_cast<int32_t>(graph.tensors.size() - 1));
    }
    conv.inputs.push_back(residual);
    conv.attrs.fused_residual = true;
    conv.outputs = add.outputs;
    producer.resize(graph.tensors.size(), -1);
    consumers.resize(graph.tensors.size(), 0);
    producer[static_cast<size_t>(add.outputs[0])] = p;
    removed[i] = true;
    fused.push_back({add.name, conv.name});
  }
  std::vector<Operator> kept;
  kept.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(graph.ops[i]));
  graph.ops = std::move(kept);
  return fused;
}

}  // namespace tessera::graph
