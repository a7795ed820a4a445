// BN folding: y = (conv(x) - mean) * scale / sqrt(var + eps) + beta is
// conv with W'[m] = W[m] * f[m] and B'[m] = (B[m] - mean[m]) * f[m] + beta[m],
// f[m] = scale[m] / sqrt(var[m] + eps).
#include "graph/fold_batch_norm.hpp"

#include <cmath>

#include "graph/error.hpp"

namespace tessera::graph {
namespace {

bool constant_with_size(const Graph& g, int32_t t, int64_t n) {
  const TensorInfo& info = g.tensors.at(static_cast<size_t>(t));
  return info.is_weight && info.dtype == DType::Float32 && shape_numel(info.shape) == n &&
         static_cast<int64_t>(info.weight.size()) == n;
}

std::string unique_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.find_tensor(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

}  // namespace

std::vector<FoldedBatchNorm> fold_batch_norms(Graph& graph) {
  std::vector<FoldedBatchNorm> notes;
  std::vector<int32_t> producer(graph.tensors.size(), -1);
  std::vector<int32_t> uses(graph.tensors.size(), 0);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int32_t t : graph.ops[i].outputs)
      producer.at(static_cast<size_t>(t)) = static_cast<int32_t>(i);
    for (int32_t t : graph.ops[i].inputs) ++uses.at(static_cast<size_t>(t));
  }
  for (int32_t t : graph.outputs) ++uses.at(static_cast<size_t>(t));

  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& bn = graph.ops[i];
    if (bn.type != OpType::BatchNormalization || bn.inputs.size() != 5 || bn.outputs.size() != 1)
      continue;
    int32_t x = bn.inputs[0];
    int32_t p = producer[static_cast<size_t>(x)];
    if (p < 0 || uses[static_cast<size_t>(x)] != 1) continue;  // graph outputs count as a use
    Operator& conv = graph.ops[static_cast<size_t>(p)];
    if (conv.type != OpType::Conv || conv.inputs.size() < 2) continue;
    const Shape w_shape = graph.tensors.at(static_cast<size_t>(conv.inputs[1])).shape;
    if (w_shape.size() != 4) continue;
    int64_t m = w_shape[0];
    int64_t per_channel = shape_numel(w_shape) / m;
    bool constant = constant_with_size(graph, conv.inputs[1], m * per_channel);
    if (conv.inputs.size() == 3)
      constant = constant && constant_with_size(graph, conv.inputs[2], m);
    for (size_t k = 1; k < 5; ++k)
      constant = constant && constant_with_size(graph, bn.inputs[k], m);
    if (!constant) continue;

    const auto& scale = graph.tensors[static_cast<size_t>(bn.inputs[1])].weight;
    const auto& beta = graph.tensors[static_cast<size_t>(bn.inputs[2])].weight;
    const auto& mean = graph.tensors[static_cast<size_t>(bn.inputs[3])].weight;
    const auto& var = graph.tensors[static_cast<size_t>(bn.inputs[4])].weight;
    const std::vector<float>& w = graph.tensors[static_cast<size_t>(conv.inputs[1])].weight;
    std::vector<float> folded_w(w.size()), folded_b(static_cast<size_t>(m));
    for (int64_t c = 0; c < m; ++c) {
      size_t cu = static_cast<size_t>(c);
      // double keeps the folded parameters as close as float allows to the
      // two-step computation.
      double f = static_cast<double>(scale[cu]) /
                 std::sqrt(static_cast<double>(var[cu]) + static_cast<double>(bn.attrs.epsilon));
      double bias = conv.inputs.size() == 3
                        ? graph.tensors[static_cast<size_t>(conv.inputs[2])].weight[cu]
                        : 0.0f;
      folded_b[cu] = static_cast<float>((bias - mean[cu]) * f + beta[cu]);
      for (int64_t k = 0; k < per_channel; ++k) {
        size_t at = static_cast<size_t>(c * per_channel + k);
        folded_w[at] = static_cast<float>(w[at] * f);
      }
    }
    TensorInfo new_w{unique_name(graph, conv.name + ".W_bn_folded"), w_shape, DType::Float32, true,
                     std::move(folded_w)};
    TensorInfo new_b{unique_name(graph, conv.name + ".B_bn_folded"), Shape{m}, DType::Float32, true,
                     std::move(folded_b)};
    // conv is a reference into graph.ops, which does not grow here.
    std::string bn_name = bn.name;
    int32_t bn_out = bn.outputs[0];
    graph.tensors.push_back(std::move(new_w));
    int32_t w_index = static_cast<int32_t>(graph.tensors.size() - 1);
    graph.tensors.push_back(std::move(new_b));
    int32_t b_index = static_cast<int32_t>(graph.tensors.size() - 1);
    conv.inputs.resize(3);
    conv.inputs[1] = w_index;
    conv.inputs[2] = b_index;
    conv.outputs[0] = bn_out;
    producer.resize(graph.tensors.size(), -1);
    uses.resize(graph.tensors.size(), 0);
    producer[static_cast<size_t>(bn_out)] = p;
    removed[i] = true;
    notes.push_back({bn_name, conv.name});
  }
  std::vector<Operator> kept;
  for (size_t i = 0; i < graph.ops.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(graph.ops[i]));
  graph.ops = std::move(kept);
  return notes;
}

}  // namespace tessera::graph
