#include "graph/fuse_softmax_input.hpp"

#include <map>
#include <string>
#include <utility>

#include "graph/op_type.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

namespace {

// A fill at most this (or -inf) is one that Where(c, x, fill) and x + (c ?
// 0 : fill) give alike once rounded for any score |x| below half the fill's
// ulp (2^103 for float's lowest, 2^75 for -1e30); a larger negative x makes
// -inf or a larger negative number, which the softmax turns into the same 0
// wherever the row has a score it keeps.
constexpr float kMaskFillAtMost = -1e30f;

// Where(condition, x, fill) before a Softmax, with a constant condition and
// a constant very negative scalar fill (the causal mask of GPT-2 exports:
// torch.where(causal, scores, finfo.min)), as the additive mask the Softmax
// takes: 0 where the condition holds, the fill elsewhere. One mask per
// (condition, fill), shared by every layer's Where. -1 when it is not such
// a Where. The softmax differs from the Where's only where a masked score is
// NaN, infinite or past half the fill's ulp (fuse_softmax_input.hpp).
int32_t additive_mask(Graph& graph, int32_t condition, int32_t fill,
                      std::map<std::pair<int32_t, float>, int32_t>& masks) {
  const TensorInfo& c = graph.tensors[static_cast<size_t>(condition)];
  const TensorInfo& f = graph.tensors[static_cast<size_t>(fill)];
  if (!c.is_weight || !f.is_weight || f.weight.size() != 1 || shape_numel(f.shape) != 1 ||
      f.shape.size() > c.shape.size() || f.dtype != DType::Float32 ||
      !(f.weight[0] <= kMaskFillAtMost))
    return -1;
  const float value = f.weight[0];
  if (auto it = masks.find({condition, value}); it != masks.end()) return it->second;
  TensorInfo mask;
  mask.name = c.name + "_additive_mask";
  mask.shape = c.shape;
  mask.is_weight = true;
  mask.weight.reserve(c.weight.size());
  for (float keep : c.weight) mask.weight.push_back(keep != 0.0f ? 0.0f : value);
  graph.tensors.push_back(std::move(mask));
  const auto id = static_cast<int32_t>(graph.tensors.size() - 1);
  masks[{condition, value}] = id;
  return id;
}

}  // namespace

std::vector<RewrittenPattern> fuse_softmax_inputs(Graph& graph) {
  std::vector<RewrittenPattern> fused;
  std::map<std::pair<int32_t, float>, int32_t> masks;
  GraphUses uses(graph);
  std::vector<bool> removed(graph.ops.size(), false);
  // The op producing `t` when it is read once, by one op, and is no graph output.
  auto single_use_producer = [&](int32_t t) -> Operator* {
    const auto i = static_cast<size_t>(t);
    if (uses.consumers[i] != 1 || uses.producer[i] < 0) return nullptr;
    Operator& op = graph.ops[static_cast<size_t>(uses.producer[i])];
    return removed[static_cast<size_t>(uses.producer[i])] ? nullptr : &op;
  };
  for (Operator& softmax : graph.ops) {
    if (softmax.type != OpType::Softmax || softmax.inputs.size() != 1 ||
        softmax.attrs.softmax_coerce_2d || softmax.attrs.alpha != 1.0f)
      continue;
    // A copy: additive_mask() may grow graph.tensors.
    const Shape x_shape = graph.tensors[static_cast<size_t>(softmax.inputs[0])].shape;
    if (x_shape.empty() || softmax.attrs.axis + 1 != static_cast<int64_t>(x_shape.size())) continue;
    // An operand that may stand for the scores: float32 of their shape.
    auto scores_like = [&](int32_t t) {
      const TensorInfo& info = graph.tensors[static_cast<size_t>(t)];
      return info.shape == x_shape && info.dtype == DType::Float32;
    };
    int32_t x = softmax.inputs[0];
    int32_t mask = -1;
    float alpha = 1.0f;
    std::string what;
    // An Add of the mask, outermost.
    if (Operator* add = single_use_producer(x);
        add && add->type == OpType::Add && add->inputs.size() == 2) {
      for (int order = 0; order < 2 && mask < 0; ++order) {
        const int32_t a = add->inputs[static_cast<size_t>(order)];
        const int32_t m = add->inputs[static_cast<size_t>(1 - order)];
        const TensorInfo& mi = graph.tensors[static_cast<size_t>(m)];
        if (!scores_like(a) || mi.dtype != DType::Float32 || !broadcasts_to(mi.shape, x_shape) ||
            a == m)
          continue;
        mask = m;
        x = a;
        removed[static_cast<size_t>(uses.producer[static_cast<size_t>(softmax.inputs[0])])] = true;
        what = "mask Add '" + add->name + "'";
      }
    } else if (Operator* where = single_use_producer(x);
               where && where->type == OpType::Where && where->inputs.size() == 3) {
      const int32_t a = where->inputs[1], condition = where->inputs[0];
      // The mask takes the condition's shape: checked before one is built.
      const bool fits = scores_like(a) &&
                        broadcasts_to(graph.tensors[static_cast<size_t>(condition)].shape, x_shape);
      // (additive_mask() may grow graph.tensors: no reference into it is held.)
      const int32_t m = fits ? additive_mask(graph, condition, where->inputs[2], masks) : -1;
      if (m >= 0) {
        mask = m;
        x = a;
        removed[static_cast<size_t>(uses.producer[static_cast<size_t>(softmax.inputs[0])])] = true;
        what = "mask Where '" + where->name + "' (as an additive mask)";
      }
    }
    // A Mul or Div by a constant scalar.
    if (Operator* scale = single_use_producer(x);
        scale && (scale->type == OpType::Mul || scale->type == OpType::Div) &&
        scale->inputs.size() == 2) {
      for (int order = 0; order < (scale->type == OpType::Mul ? 2 : 1); ++order) {
        const int32_t a = scale->inputs[static_cast<size_t>(order)];
        const TensorInfo& ci = graph.tensors[static_cast<size_t>(scale->inputs[1 - order])];
        if (!ci.is_weight || ci.weight.size() != 1 || shape_numel(ci.shape) != 1 ||
            !scores_like(a) || ci.weight[0] == 0.0f)
          continue;
        alpha = scale->type == OpType::Mul ? ci.weight[0] : 1.0f / ci.weight[0];
        removed[static_cast<size_t>(uses.producer[static_cast<size_t>(x)])] = true;
        what += std::string(what.empty() ? "" : ", ") + "scale " +
                std::string(op_type_name(scale->type)) + " '" + scale->name + "'";
        x = a;
        break;
      }
    }
    if (what.empty()) continue;
    softmax.inputs = {x};
    if (mask >= 0) softmax.inputs.push_back(mask);
    softmax.attrs.alpha = alpha;
    fused.push_back({softmax.name, what});
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
