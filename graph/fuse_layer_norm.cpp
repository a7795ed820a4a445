#include "graph/fuse_layer_norm.hpp"

namespace tessera::graph {

namespace {

// t as a [h] weight: itself, a [h]-shaped copy, or -1 when it is not a
// constant of shape [h] or [1, .., 1, h].
int32_t as_vector(Graph& graph, int32_t t, int64_t h, GraphUses& uses) {
  const TensorInfo& info = graph.tensors[static_cast<size_t>(t)];
  if (!info.is_weight || info.shape.empty() || info.shape.back() != h) return -1;
  for (size_t d = 0; d + 1 < info.shape.size(); ++d)
    if (info.shape[d] != 1) return -1;
  if (info.shape.size() == 1) return t;
  TensorInfo vec;
  vec.name = info.name + "_as_vector";
  vec.shape = {h};
  vec.is_weight = true;
  vec.weight = info.weight;
  graph.tensors.push_back(std::move(vec));
  uses.consumers.push_back(0);
  uses.producer.push_back(-1);
  return static_cast<int32_t>(graph.tensors.size() - 1);
}

bool reduces_last_axis(const Graph& graph, const Operator& op) {
  const size_t rank = graph.tensors[static_cast<size_t>(op.inputs[0])].shape.size();
  return op.inputs.size() == 1 && op.attrs.keepdims && rank >= 1 &&
         op.attrs.axes == std::vector<int64_t>{static_cast<int64_t>(rank) - 1};
}

// The ops a match follows back from its root, removed when it succeeds:
// each value it follows is read once (by the chain) and made by an op of
// the expected type.
struct Chain {
  const Graph& graph;
  const GraphUses& uses;
  std::vector<int32_t> ops;

  const Operator* take(int32_t t, OpType type) {
    const Operator* op = uses.only_use(graph, t, type);
    if (op) ops.push_back(uses.producer[static_cast<size_t>(t)]);
    return op;
  }

  // Sqrt(Add(ReduceMean(v, last axis, keepdims), eps)) ending in t, eps a
  // positive one-element constant (either Add operand): the ReduceMean, with
  // eps in `epsilon`; or null.
  const Operator* take_sqrt_of_mean_plus_eps(int32_t t, float& epsilon) {
    const Operator* sqrt = take(t, OpType::Sqrt);
    const Operator* add_eps = sqrt ? take(sqrt->inputs[0], OpType::Add) : nullptr;
    if (!add_eps) return nullptr;
    const size_t ke = graph.tensors[static_cast<size_t>(add_eps->inputs[1])].is_weight ? 1 : 0;
    const TensorInfo& eps = graph.tensors[static_cast<size_t>(add_eps->inputs[ke])];
    if (!eps.is_weight || eps.weight.size() != 1 || !(eps.weight[0] > 0.0f)) return nullptr;
    epsilon = eps.weight[0];
    const Operator* mean = take(add_eps->inputs[1 - ke], OpType::ReduceMean);
    return mean && reduces_last_axis(graph, *mean) ? mean : nullptr;
  }
};

}  // namespace

std::vector<RewrittenPattern> fuse_layer_norm(Graph& graph) {
  GraphUses uses(graph);
  std::vector<RewrittenPattern> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  auto producer_index = [&](int32_t t) { return uses.producer[static_cast<size_t>(t)]; };
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    // Matched from the end: y = Add(Mul(normed, gamma), beta).
    const Operator& root = graph.ops[i];
    if (root.type != OpType::Add || root.inputs.size() != 2) continue;
    for (size_t kb = 0; kb < 2; ++kb) {
      Chain chain{graph, uses, {}};
      const Operator* scale = chain.take(root.inputs[1 - kb], OpType::Mul);
      if (!scale) continue;
      const int32_t beta = root.inputs[kb];
      for (size_t kg = 0; kg < 2; ++kg) {
        chain.ops.resize(1);
        const int32_t gamma = scale->inputs[kg];
        const Operator* div = chain.take(scale->inputs[1 - kg], OpType::Div);
        if (!div) continue;
        const int32_t d = div->inputs[0];
        float epsilon = 0.0f;
        const Operator* var = chain.take_sqrt_of_mean_plus_eps(div->inputs[1], epsilon);
        if (!var) continue;
        // The square: Pow(d, 2) or Mul(d, d); d is read by it and by the Div.
        const int32_t sq = var->inputs[0];
        const int32_t sq_op = producer_index(sq);
        if (sq_op < 0 || uses.consumers[static_cast<size_t>(sq)] != 1) continue;
        const Operator& square = graph.ops[static_cast<size_t>(sq_op)];
        const bool is_pow = square.type == OpType::Pow && square.inputs[0] == d &&
                            is_constant_near(graph, square.inputs[1], 2.0f);
        const bool is_mul =
            square.type == OpType::Mul && square.inputs[0] == d && square.inputs[1] == d;
        if (!is_pow && !is_mul) continue;
        if (uses.consumers[static_cast<size_t>(d)] != (is_mul ? 3 : 2)) continue;
        chain.ops.push_back(sq_op);
        // d is read by the square and the Div only (counted above), so the Sub goes too.
        const int32_t sub_op = producer_index(d);
        if (sub_op < 0 || graph.ops[static_cast<size_t>(sub_op)].type != OpType::Sub) continue;
        const Operator* sub = &graph.ops[static_cast<size_t>(sub_op)];
        chain.ops.push_back(sub_op);
        const int32_t x = sub->inputs[0];
        const Operator* mean = chain.take(sub->inputs[1], OpType::ReduceMean);
        if (!mean || mean->inputs[0] != x || !reduces_last_axis(graph, *mean)) continue;
        const Shape x_shape =
            graph.tensors[static_cast<size_t>(x)].shape;  // as_vector may grow tensors
        if (graph.tensors[static_cast<size_t>(x)].is_weight || x_shape.empty() ||
            graph.tensors[static_cast<size_t>(root.outputs[0])].shape != x_shape ||
            graph.tensors[static_cast<size_t>(d)].shape != x_shape)
          continue;
        const int64_t h = x_shape.back();
        const int32_t gamma_vec = as_vector(graph, gamma, h, uses);
        const int32_t beta_vec = gamma_vec < 0 ? -1 : as_vector(graph, beta, h, uses);
        if (beta_vec < 0) continue;
        for (int32_t op : chain.ops) removed[static_cast<size_t>(op)] = true;
        Operator& ln = graph.ops[i];
        ln.type = OpType::LayerNormalization;
        ln.attrs = OpAttributes{};
        ln.attrs.axis = static_cast<int64_t>(x_shape.size()) - 1;
        ln.attrs.epsilon = epsilon;
        ln.inputs = {x, gamma_vec, beta_vec};
        fused.push_back({ln.name, std::to_string(chain.ops.size() + 1) + " ops of a LayerNorm"});
        kb = 2;  // done with this root
        break;
      }
    }
  }
  erase_ops(graph, removed);
  return fused;
}

std::vector<RewrittenPattern> fuse_rms_norm(Graph& graph) {
  GraphUses uses(graph);
  std::vector<RewrittenPattern> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  auto producer_index = [&](int32_t t) { return uses.producer[static_cast<size_t>(t)]; };
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    // Matched from the end: y = Mul(Mul(x, r), w).
    const Operator& root = graph.ops[i];
    if (root.type != OpType::Mul || root.inputs.size() != 2) continue;
    for (size_t kw = 0; kw < 2; ++kw) {
      Chain chain{graph, uses, {}};
      const int32_t w = root.inputs[kw];
      const Operator* normed = chain.take(root.inputs[1 - kw], OpType::Mul);
      if (!normed || !graph.tensors[static_cast<size_t>(w)].is_weight) continue;
      for (size_t kx = 0; kx < 2; ++kx) {
        chain.ops.resize(1);
        const int32_t x = normed->inputs[kx];
        const int32_t r = normed->inputs[1 - kx];
        // r = Div(1, Sqrt(..)) or Reciprocal(Sqrt(..)).
        const int32_t r_op = producer_index(r);
        if (r_op < 0 || uses.consumers[static_cast<size_t>(r)] != 1) continue;
        const Operator& inverse = graph.ops[static_cast<size_t>(r_op)];
        const bool is_div = inverse.type == OpType::Div && inverse.inputs.size() == 2 &&
                            is_constant_near(graph, inverse.inputs[0], 1.0f, 0.0f);
        if (!is_div && inverse.type != OpType::Reciprocal) continue;
        chain.ops.push_back(r_op);
        float epsilon = 0.0f;
        const Operator* mean =
            chain.take_sqrt_of_mean_plus_eps(inverse.inputs[is_div ? 1 : 0], epsilon);
        if (!mean) continue;
        const Operator* square = chain.take(mean->inputs[0], OpType::Pow);
        if (!square || square->inputs[0] != x || !is_constant_near(graph, square->inputs[1], 2.0f))
          continue;
        const Shape x_shape = graph.tensors[static_cast<size_t>(x)].shape;  // as_vector may grow
        if (graph.tensors[static_cast<size_t>(x)].is_weight || x_shape.empty() ||
            graph.tensors[static_cast<size_t>(root.outputs[0])].shape != x_shape)
          continue;
        const int32_t w_vec = as_vector(graph, w, x_shape.back(), uses);
        if (w_vec < 0) continue;
        for (int32_t op : chain.ops) removed[static_cast<size_t>(op)] = true;
        Operator& rms = graph.ops[i];
        rms.type = OpType::RMSNormalization;
        rms.attrs = OpAttributes{};
        rms.attrs.axis = static_cast<int64_t>(x_shape.size()) - 1;
        rms.attrs.epsilon = epsilon;
        rms.inputs = {x, w_vec};
        fused.push_back({rms.name, std::to_string(chain.ops.size() + 1) + " ops of an RMSNorm"});
        kw = 2;  // done with this root
        break;
      }
    }
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
