#pragma once
// Who produces and who reads each tensor: the facts the pattern-rewriting
// passes (fuse_matmul_bias, fuse_gelu, fuse_layer_norm) check before they
// touch a subgraph.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::graph {

// A rewrite a pass made: `op` now computes what the removed ops did.
struct RewrittenPattern {
  std::string op;       // the op that remains (its own name)
  std::string removed;  // what it replaced, for the compile report
};

struct GraphUses {
  std::vector<int32_t> consumers;  // reads by ops (an op reading twice counts twice), +1 if output
  std::vector<int32_t> producer;   // op index, -1 for inputs and weights

  explicit GraphUses(const Graph& graph)
      : consumers(graph.tensors.size(), 0), producer(graph.tensors.size(), -1) {
    for (size_t i = 0; i < graph.ops.size(); ++i) {
      for (int32_t t : graph.ops[i].inputs) ++consumers[static_cast<size_t>(t)];
      for (int32_t t : graph.ops[i].outputs)
        producer[static_cast<size_t>(t)] = static_cast<int32_t>(i);
    }
    for (int32_t t : graph.outputs) ++consumers[static_cast<size_t>(t)];  // outputs must stay
  }

  // The op producing t when t is an intermediate value a rewrite may remove:
  // read exactly once, not a graph output, and produced by an op of `type`.
  const Operator* only_use(const Graph& graph, int32_t t, OpType type) const {
    const int32_t p = producer[static_cast<size_t>(t)];
    if (p < 0 || consumers[static_cast<size_t>(t)] != 1) return nullptr;
    const Operator& op = graph.ops[static_cast<size_t>(p)];
    return op.type == type ? &op : nullptr;
  }
};

// Per tensor, the index of the last op that reads it (-1: none): the only
// reader where GraphUses::consumers says it is read once.
inline std::vector<int32_t> last_readers(const Graph& graph) {
  std::vector<int32_t> reader(graph.tensors.size(), -1);
  for (size_t i = 0; i < graph.ops.size(); ++i)
    for (int32_t t : graph.ops[i].inputs) reader[static_cast<size_t>(t)] = static_cast<int32_t>(i);
  return reader;
}

// A Conv's attributes leave a 1x1 kernel a per-pixel matrix product: stride
// 1, no padding, dilation 1, group 1.
inline bool pointwise_attributes(const OpAttributes& a) {
  const auto all = [](const std::vector<int64_t>& values, int64_t v) {
    return std::all_of(values.begin(), values.end(), [v](int64_t x) { return x == v; });
  };
  return a.group == 1 && all(a.strides, 1) && all(a.pads, 0) && all(a.dilations, 1);
}

// Whether t is a constant with one element (any rank) within a relative
// tolerance of `expected`: exporters write sqrt(2), sqrt(2 / pi) etc. with
// float rounding or fewer digits.
inline bool is_constant_near(const Graph& graph, int32_t t, float expected, float tol = 1e-5f) {
  const TensorInfo& info = graph.tensors[static_cast<size_t>(t)];
  if (!info.is_weight || info.weight.size() != 1) return false;
  return std::fabs(info.weight[0] - expected) <= tol * std::max(1.0f, std::fabs(expected));
}

// Appends a zero bias of `channels` weights to op's inputs: for fusions that
// need the bias slot (input 2) filled before adding inputs after it.
inline void append_zero_bias(Graph& graph, Operator& op, int64_t channels) {
  TensorInfo bias;
  bias.name = op.name + "_zero_bias";
  bias.shape = {channels};
  bias.is_weight = true;
  bias.weight.assign(static_cast<size_t>(channels), 0.0f);
  graph.tensors.push_back(std::move(bias));
  op.inputs.push_back(static_cast<int32_t>(graph.tensors.size() - 1));
}

// Drops the ops marked in `removed`, keeping the order of the others.
inline void erase_ops(Graph& graph, const std::vector<bool>& removed) {
  std::vector<Operator> kept;
  kept.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(graph.ops[i]));
  graph.ops = std::move(kept);
}

}  // namespace tessera::graph
