#include "graph/fuse_activations.hpp"

#include <algorithm>

namespace tessera::graph {

namespace {

bool has_epilogue(OpType t) {
  return t == OpType::Conv || t == OpType::Gemm || t == OpType::MatMul;
}

Activation activation_of(const Operator& op) {
  switch (op.type) {
    case OpType::Gelu:
      return op.attrs.gelu_tanh ? Activation::GeluTanh : Activation::Gelu;
    case OpType::Relu:
      return Activation::Relu;
    case OpType::Clip:
      return Activation::Clip;
    case OpType::Sigmoid:
      return Activation::Sigmoid;
    case OpType::LeakyRelu:
      return Activation::LeakyRelu;
    default:
      return Activation::None;
  }
}

}  // namespace

std::vector<FusedActivation> fuse_activations(Graph& graph) {
  std::vector<int32_t> consumers(graph.tensors.size(), 0), producer(graph.tensors.size(), -1);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int32_t t : graph.ops[i].inputs) ++consumers[static_cast<size_t>(t)];
    for (int32_t t : graph.ops[i].outputs)
      producer[static_cast<size_t>(t)] = static_cast<int32_t>(i);
  }
  for (int32_t t : graph.outputs) ++consumers[static_cast<size_t>(t)];  // outputs must stay

  std::vector<FusedActivation> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    Operator& act = graph.ops[i];
    const Activation kind = activation_of(act);
    if (kind == Activation::None || act.inputs.size() != 1) continue;
    const int32_t t = act.inputs[0];
    int32_t p = producer[static_cast<size_t>(t)];
    if (p < 0 || consumers[static_cast<size_t>(t)] != 1) continue;
    // A Gemm's 2-D product reaches the activation through one Reshape in
    // GPT-2's export (Gemm on [M, N], reshaped to [1, M, N], then the tanh
    // GELU): an elementwise activation gives the same values before the
    // Reshape, which then writes the activation's output. Conv outputs are
    // not seen through (they may be stored NHWC).
    int32_t reshape = -1;
    if (const Operator& first = graph.ops[static_cast<size_t>(p)];
        first.type == OpType::Reshape && first.inputs.size() == 1) {
      const int32_t product = first.inputs[0];
      reshape = p;
      p = producer[static_cast<size_t>(product)];
      if (p < 0 || consumers[static_cast<size_t>(product)] != 1 ||
          graph.ops[static_cast<size_t>(p)].type == OpType::Conv)
        continue;
    }
    Operator& prod = graph.ops[static_cast<size_t>(p)];
    if (!has_epilogue(prod.type) || prod.attrs.activation != Activation::None) continue;
    // The Conv kernels have no GELU epilogue (graph/op_shape.cpp).
    if (prod.type == OpType::Conv && (kind == Activation::Gelu || kind == Activation::GeluTanh))
      continue;
    prod.attrs.activation = kind;
    if (kind == Activation::Clip) {
      prod.attrs.clip_min = act.attrs.clip_min;
      prod.attrs.clip_max = act.attrs.clip_max;
    }
    if (kind == Activation::LeakyRelu) prod.attrs.leaky_relu_alpha = act.attrs.alpha;
    const int32_t writer = reshape >= 0 ? reshape : p;
    graph.ops[static_cast<size_t>(writer)].outputs = act.outputs;
    producer[static_cast<size_t>(act.outputs[0])] = writer;
    removed[i] = true;
    fused.push_back({act.name, prod.name});
  }
  std::vector<Operator> kept;
  kept.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(graph.ops[i]));
  graph.ops = std::move(kept);
  return fused;
}

}  // namespace tessera::graph
