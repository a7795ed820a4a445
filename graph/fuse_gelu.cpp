#include "graph/fuse_gelu.hpp"

#include <array>
#include <optional>

namespace tessera::graph {

namespace {

constexpr float kSqrt2 = 1.4142135623730951f;
constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

struct Matcher {
  const Graph& graph;
  const GraphUses& uses;
  std::vector<int32_t> ops;  // indices of the ops matched so far (removed on success)

  // The op producing t if it may be removed and is of `type` (recorded).
  const Operator* take(int32_t t, OpType type) {
    const Operator* op = uses.only_use(graph, t, type);
    if (op) ops.push_back(uses.producer[static_cast<size_t>(t)]);
    return op;
  }
  // For a binary op: the operand index (0 or 1) that is a constant near
  // `value`, or -1.
  int constant_operand(const Operator& op, float value) const {
    for (int k = 0; k < 2; ++k)
      if (is_constant_near(graph, op.inputs[static_cast<size_t>(k)], value)) return k;
    return -1;
  }

  // t = x * x * x (Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x))).
  bool cube_of(int32_t t, int32_t x) {
    const size_t mark = ops.size();
    if (const Operator* pow = take(t, OpType::Pow)) {
      if (pow->inputs[0] == x && is_constant_near(graph, pow->inputs[1], 3.0f)) return true;
      ops.resize(mark);
      return false;
    }
    const Operator* outer = take(t, OpType::Mul);
    if (!outer) return false;
    for (int k = 0; k < 2; ++k) {
      if (outer->inputs[static_cast<size_t>(k)] != x) continue;
      const size_t inner_mark = ops.size();
      const Operator* square = take(outer->inputs[static_cast<size_t>(1 - k)], OpType::Mul);
      if (square && square->inputs[0] == x && square->inputs[1] == x) return true;
      ops.resize(inner_mark);
    }
    ops.resize(mark);
    return false;
  }

  // t = erf(x / sqrt(2)) or erf(x * (1 / sqrt(2))).
  bool erf_of(int32_t t, int32_t x) {
    const size_t mark = ops.size();
    const Operator* erf = take(t, OpType::Erf);
    if (erf) {
      const int32_t arg = erf->inputs[0];
      if (const Operator* div = take(arg, OpType::Div)) {
        if (div->inputs[0] == x && is_constant_near(graph, div->inputs[1], kSqrt2)) return true;
      } else if (const Operator* mul = take(arg, OpType::Mul)) {
        const int c = constant_operand(*mul, kSqrtHalf);
        if (c >= 0 && mul->inputs[static_cast<size_t>(1 - c)] == x) return true;
      }
    }
    ops.resize(mark);
    return false;
  }

  // t = tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)).
  bool tanh_of(int32_t t, int32_t x) {
    const size_t mark = ops.size();
    auto fail = [&] {
      ops.resize(mark);
      return false;
    };
    const Operator* tanh = take(t, OpType::Tanh);
    if (!tanh) return fail();
    const Operator* scale = take(tanh->inputs[0], OpType::Mul);
    if (!scale) return fail();
    const int c = constant_operand(*scale, kSqrt2OverPi);
    if (c < 0) return fail();
    const Operator* sum = take(scale->inputs[static_cast<size_t>(1 - c)], OpType::Add);
    if (!sum) return fail();
    for (int k = 0; k < 2; ++k) {
      if (sum->inputs[static_cast<size_t>(k)] != x) continue;
      const size_t term_mark = ops.size();
      const Operator* term = take(sum->inputs[static_cast<size_t>(1 - k)], OpType::Mul);
      if (term) {
        const int cc = constant_operand(*term, kGeluCubic);
        if (cc >= 0 && cube_of(term->inputs[static_cast<size_t>(1 - cc)], x)) return true;
      }
      ops.resize(term_mark);
    }
    return fail();
  }

  // t = 1 + erf(..) or 1 + tanh(..) of x: the form found, or nothing.
  std::optional<bool> one_plus(int32_t t, int32_t x) {
    const size_t mark = ops.size();
    const Operator* add = take(t, OpType::Add);
    if (add) {
      const int one = constant_operand(*add, 1.0f);
      if (one >= 0) {
        const int32_t e = add->inputs[static_cast<size_t>(1 - one)];
        if (erf_of(e, x)) return false;
        if (tanh_of(e, x)) return true;
      }
    }
    ops.resize(mark);
    return std::nullopt;
  }

  // The three factors multiplied by the outer Mul and the inner one: x, 0.5
  // and (1 + ..) in any order. Returns x and the form (true: tanh).
  std::optional<std::pair<int32_t, bool>> factors(const std::array<int32_t, 3>& f) {
    for (size_t half = 0; half < 3; ++half) {
      if (!is_constant_near(graph, f[half], 0.5f)) continue;
      for (size_t sum = 0; sum < 3; ++sum) {
        if (sum == half) continue;
        const int32_t x = f[3 - half - sum];
        if (graph.tensors[static_cast<size_t>(x)].is_weight) continue;
        const size_t mark = ops.size();
        if (std::optional<bool> tanh = one_plus(f[sum], x)) return std::make_pair(x, *tanh);
        ops.resize(mark);
      }
    }
    return std::nullopt;
  }
};

}  // namespace

std::vector<RewrittenPattern> fuse_gelu(Graph& graph) {
  const GraphUses uses(graph);
  std::vector<RewrittenPattern> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    Operator& root = graph.ops[i];
    if (root.type != OpType::Mul || root.inputs.size() != 2 || removed[i]) continue;
    // Which operand is the inner Mul of the three factors.
    for (size_t k = 0; k < 2; ++k) {
      Matcher m{graph, uses, {}};
      const Operator* inner = m.take(root.inputs[k], OpType::Mul);
      if (!inner) continue;
      const auto found = m.factors({inner->inputs[0], inner->inputs[1], root.inputs[1 - k]});
      if (!found) continue;
      const auto [x, is_tanh] = *found;
      if (graph.tensors[static_cast<size_t>(x)].shape !=
          graph.tensors[static_cast<size_t>(root.outputs[0])].shape)
        continue;
      for (int32_t op : m.ops) removed[static_cast<size_t>(op)] = true;
      root.type = OpType::Gelu;
      root.attrs = OpAttributes{};
      root.attrs.gelu_tanh = is_tanh;
      root.inputs = {x};
      fused.push_back({root.name, std::to_string(m.ops.size() + 1) + " ops of a " +
                                      (is_tanh ? "tanh" : "erf") + " GELU"});
      break;
    }
  }
  erase_ops(graph, removed);
  return fused;
}

}  // namespace tessera::graph
