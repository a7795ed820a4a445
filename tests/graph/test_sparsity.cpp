// TeSA propagation (graph/sparsity.hpp): every algebra rule against brute-force
// tensor scrambling on the reference kernels, every backward rule checked by
// perturbing what it calls dead, the fixed point on random graphs (outputs
// unchanged), hand-worked examples, and the annotation file's errors.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>

#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "graph/region.hpp"
#include "graph/sparsity.hpp"
#include "kernels/reference_evaluator.hpp"
#include "random_graphs.hpp"
#include "random_ops.hpp"

namespace tessera::graph::test {
namespace {

SparsityConfig with_evaluator() {
  SparsityConfig c;
  c.enabled = true;
  c.evaluate = kernels::reference_evaluator();
  return c;
}

bool same_value(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// A zero mask with a random density (sometimes none, sometimes all).
ElementMask random_zeros(std::mt19937& rng, int64_t n) {
  static const double kDensity[] = {0.0, 0.2, 0.5, 0.8, 0.95, 1.0};
  const double p = kDensity[rng() % std::size(kDensity)];
  ElementMask m(n);
  std::bernoulli_distribution coin(p);
  for (int64_t e = 0; e < n; ++e)
    if (coin(rng)) m.set(e);
  return m;
}

std::vector<float> random_values(std::mt19937& rng, const ElementMask& zero) {
  std::uniform_real_distribution<float> u(0.25f, 2.0f);
  std::vector<float> v(static_cast<size_t>(zero.size()), 0.0f);
  for (int64_t e = 0; e < zero.size(); ++e)
    if (!zero.test(e)) v[static_cast<size_t>(e)] = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
  return v;
}

std::vector<float> evaluate(const OpCase& c, const std::vector<std::vector<float>>& values) {
  std::vector<const std::vector<float>*> ptrs;
  for (const auto& v : values) ptrs.push_back(&v);
  return kernels::reference_evaluator()(c.op, ptrs, c.in, c.out);
}

// A random epilogue for the ops that take one.
void random_epilogue(std::mt19937& rng, Operator& op) {
  if (op.type != OpType::Conv && op.type != OpType::Gemm && op.type != OpType::MatMul) return;
  switch (rng() % 4) {
    case 0:
      op.attrs.activation = Activation::None;
      break;
    case 1:
      op.attrs.activation = Activation::Relu;
      break;
    case 2:
      op.attrs.activation = Activation::Sigmoid;
      break;
    default:
      op.attrs.activation = Activation::Clip;
      op.attrs.clip_min = rng() % 2 ? 0.0f : 0.5f;  // 0.5: Clip(0) = 0.5, zeros do not pass
      op.attrs.clip_max = 6.0f;
  }
}

// An int64 operand or output (operand_dtype, output_dtype): not a float
// tensor to perturb.
bool has_integer_operand(const OpCase& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (operand_dtype(c.op, i) != DType::Float32) return true;
  return output_dtype(c.op) != DType::Float32;
}

const std::vector<OpType> kRuleTypes = {OpType::Conv,
                                        OpType::Gemm,
                                        OpType::MatMul,
                                        OpType::Relu,
                                        OpType::Clip,
                                        OpType::Sigmoid,
                                        OpType::Add,
                                        OpType::Sub,
                                        OpType::Mul,
                                        OpType::Div,
                                        OpType::Sqrt,
                                        OpType::Erf,
                                        OpType::Tanh,
                                        OpType::Gelu,
                                        OpType::Reshape,
                                        OpType::Flatten,
                                        OpType::Transpose,
                                        OpType::ReduceMean,
                                        OpType::ReduceSum,
                                        OpType::ReduceMax,
                                        OpType::ReduceMin,
                                        OpType::ReduceSumSquare,
                                        OpType::ReduceL1,
                                        OpType::ReduceL2,
                                        OpType::GlobalAveragePool};

}  // namespace

TEST_CASE("ElementMask: count, complement without stray tail bits, merge") {
  for (int64_t n : {1, 63, 64, 65, 130}) {
    ElementMask m(n);
    CHECK(m.none());
    m.set(0);
    m.set(n - 1);
    CHECK(m.count() == (n == 1 ? 1 : 2));
    CHECK((~m).count() == n - m.count());
    CHECK((~ElementMask(n)).all());
    ElementMask other(n);
    CHECK_FALSE(other.merge(ElementMask(n)));
    CHECK(other.merge(m));
    CHECK(other == m);
  }
}

TEST_CASE("Forward rules (TeSA algebra) equal brute-force tensor scrambling") {
  std::mt19937 rng(601);
  const SparsityConfig rules_only;  // no evaluator: only the algebra rules run
  SparsityConfig scrambling = with_evaluator();
  scrambling.scramble_trials = 64;
  for (OpType type : kRuleTypes) {
    for (int trial = 0; trial < 40; ++trial) {
      OpCase c = random_op(rng, type);
      random_epilogue(rng, c.op);
      std::vector<ElementMask> zeros;
      for (const Shape& s : c.in) zeros.push_back(random_zeros(rng, shape_numel(s)));
      std::vector<const ElementMask*> z;
      for (const auto& m : zeros) z.push_back(&m);
      bool used_scrambling = true;
      const ElementMask rule = forward_zero(c.op, c.in, c.out, z, rules_only, &used_scrambling);
      CHECK_MESSAGE(!used_scrambling, op_type_name(type));
      const ElementMask brute = scramble_zero(c.op, c.in, c.out, z, scrambling);
      CHECK_MESSAGE(rule == brute, op_type_name(type), " trial ", trial, " out ",
                    shape_to_string(c.out), ": rule ", rule.count(), " zeros, scrambling ",
                    brute.count());
    }
  }
}

TEST_CASE("Backward rules are sound: values of dead input elements do not reach live outputs") {
  std::mt19937 rng(602);
  for (OpType type : all_op_types()) {
    for (int trial = 0; trial < 30; ++trial) {
      OpCase c = random_op(rng, type);
      // The reference AveragePool has no dilations: draw until a case has none.
      while (type == OpType::AveragePool && c.op.attrs.dilations != std::vector<int64_t>{1, 1})
        c = random_op(rng, type);
      if (has_integer_operand(c)) continue;  // int64 operand: not a float tensor to perturb
      random_epilogue(rng, c.op);
      std::vector<ElementMask> zeros;
      for (const Shape& s : c.in) zeros.push_back(random_zeros(rng, shape_numel(s)));
      if (type == OpType::BatchNormalization) zeros[4] = ElementMask(zeros[4].size());  // var > 0
      std::vector<const ElementMask*> z;
      for (const auto& m : zeros) z.push_back(&m);
      const ElementMask live = ~random_zeros(rng, shape_numel(c.out));
      const std::vector<ElementMask> in_live = backward_live(c.op, c.in, c.out, z, live);
      REQUIRE(in_live.size() == c.in.size());

      std::vector<std::vector<float>> values;
      for (const auto& m : zeros) values.push_back(random_values(rng, m));
      if (type == OpType::BatchNormalization)
        for (float& v : values[4]) v = std::fabs(v);
      const std::vector<float> before = evaluate(c, values);
      std::uniform_real_distribution<float> u(-4.0f, 4.0f);
      for (size_t i = 0; i < values.size(); ++i)
        for (int64_t e = 0; e < zeros[i].size(); ++e)
          if (!in_live[i].test(e) && !zeros[i].test(e)) {
            float& v = values[i][static_cast<size_t>(e)];
            v = type == OpType::BatchNormalization && i == 4 ? std::fabs(u(rng)) + 0.1f : u(rng);
          }
      const std::vector<float> after = evaluate(c, values);
      for (int64_t o = 0; o < live.size(); ++o)
        if (live.test(o))
          REQUIRE_MESSAGE(same_value(before[static_cast<size_t>(o)], after[static_cast<size_t>(o)]),
                          op_type_name(type), " trial ", trial, " output ", o);
    }
  }
}

TEST_CASE("Backward rules are exact for products and elementwise ops: live elements matter") {
  std::mt19937 rng(603);
  const std::vector<OpType> types = {OpType::Conv,    OpType::Gemm,     OpType::MatMul,
                                     OpType::Add,     OpType::Sub,      OpType::Mul,
                                     OpType::Relu,    OpType::Sigmoid,  OpType::Reshape,
                                     OpType::Flatten, OpType::Transpose};
  for (OpType type : types) {
    for (int trial = 0; trial < 15; ++trial) {
      OpCase c = random_op(rng, type);
      std::vector<ElementMask> zeros;
      for (const Shape& s : c.in) zeros.push_back(random_zeros(rng, shape_numel(s)));
      std::vector<const ElementMask*> z;
      for (const auto& m : zeros) z.push_back(&m);
      const ElementMask live = ~random_zeros(rng, shape_numel(c.out));
      const std::vector<ElementMask> in_live = backward_live(c.op, c.in, c.out, z, live);
      std::vector<std::vector<float>> values;
      for (const auto& m : zeros) values.push_back(random_values(rng, m));
      const std::vector<float> before = evaluate(c, values);
      for (size_t i = 0; i < values.size(); ++i)
        for (int64_t e = 0; e < zeros[i].size(); ++e) {
          if (!in_live[i].test(e) || zeros[i].test(e)) continue;
          float& v = values[i][static_cast<size_t>(e)];
          const float old = v;
          v = 3.0f + std::fabs(old);  // positive and new: changes Relu's output too
          const std::vector<float> after = evaluate(c, values);
          v = old;
          bool changed = false;
          for (int64_t o = 0; o < live.size() && !changed; ++o)
            changed = live.test(o) &&
                      !same_value(before[static_cast<size_t>(o)], after[static_cast<size_t>(o)]);
          REQUIRE_MESSAGE(changed, op_type_name(type), " input ", i, " element ", e,
                          " is called live but changes no live output");
        }
    }
  }
}

namespace {

// Runs the graph op by op on the reference kernels.
std::vector<std::vector<float>> run_graph(const Graph& g,
                                          const std::vector<std::vector<float>>& in) {
  std::vector<std::vector<float>> values(g.tensors.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) values[static_cast<size_t>(g.inputs[i])] = in[i];
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].is_weight) values[t] = g.tensors[t].weight;
  const OpEvaluator eval = kernels::reference_evaluator();
  for (const Operator& op : g.ops) {
    std::vector<const std::vector<float>*> ptrs;
    std::vector<Shape> shapes;
    for (int32_t t : op.inputs) {
      ptrs.push_back(&values[static_cast<size_t>(t)]);
      shapes.push_back(g.tensors[static_cast<size_t>(t)].shape);
    }
    values[static_cast<size_t>(op.outputs[0])] =
        eval(op, ptrs, shapes, g.tensors[static_cast<size_t>(op.outputs[0])].shape);
  }
  std::vector<std::vector<float>> out;
  for (int32_t t : g.outputs) out.push_back(values[static_cast<size_t>(t)]);
  return out;
}

// Prunes weights the way pruned models look: whole output channels / rows
// (with their bias), whole input columns, or random elements.
void prune_randomly(std::mt19937& rng, Graph& g) {
  for (TensorInfo& t : g.tensors) {
    if (!t.is_weight || t.weight.empty()) continue;
    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    const int64_t cols = static_cast<int64_t>(t.weight.size()) / rows;
    switch (rng() % 4) {
      case 0:
        break;
      case 1:
        for (int64_t r = 0; r < rows; ++r)
          if (rng() % 2)
            for (int64_t c = 0; c < cols; ++c) t.weight[static_cast<size_t>(r * cols + c)] = 0.0f;
        break;
      case 2:
        for (int64_t c = 0; c < cols; ++c)
          if (rng() % 2)
            for (int64_t r = 0; r < rows; ++r) t.weight[static_cast<size_t>(r * cols + c)] = 0.0f;
        break;
      default:
        for (float& v : t.weight)
          if (rng() % 3 == 0) v = 0.0f;
    }
  }
}

}  // namespace

TEST_CASE("Propagation on random graphs: a fixed point, more zeros, identical outputs") {
  std::mt19937 rng(604);
  const SparsityConfig config = with_evaluator();
  int64_t zeroed_total = 0;
  for (int trial = 0; trial < 60; ++trial) {
    Graph g = trial % 2 ? random_cnn(rng) : random_matrix_graph(rng);
    prune_randomly(rng, g);
    std::vector<std::vector<float>> inputs;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int32_t t : g.inputs) {
      std::vector<float> v(
          static_cast<size_t>(shape_numel(g.tensors[static_cast<size_t>(t)].shape)));
      for (float& x : v) x = u(rng);
      inputs.push_back(std::move(v));
    }
    const auto expected = run_graph(g, inputs);
    const Graph original = g;
    SparsityReport report;
    const std::vector<TensorSparsity> tesa = propagate_sparsity(g, config, &report);
    zeroed_total += report.weights_zeroed;
    const auto actual = run_graph(g, inputs);
    for (size_t o = 0; o < expected.size(); ++o)
      for (size_t e = 0; e < expected[o].size(); ++e)
        REQUIRE_MESSAGE(same_value(expected[o][e], actual[o][e]), "trial ", trial, " output ", o);
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      if (!g.tensors[t].is_weight) continue;
      // Zeros only added, and the TeSA says every weight zero is pruned.
      for (size_t e = 0; e < g.tensors[t].weight.size(); ++e) {
        if (original.tensors[t].weight[e] == 0.0f) REQUIRE(g.tensors[t].weight[e] == 0.0f);
        REQUIRE(tesa[t].zero.test(static_cast<int64_t>(e)) == (g.tensors[t].weight[e] == 0.0f));
      }
      CHECK(report.tensors[t].pruned_after >= report.tensors[t].pruned_before);
    }
    // A second run finds nothing more to zero: the first stopped at the fixed point.
    SparsityReport again;
    const std::vector<TensorSparsity> tesa2 = propagate_sparsity(g, config, &again);
    CHECK(again.weights_zeroed == 0);
    CHECK(again.sweeps == 1);
    for (size_t t = 0; t < tesa.size(); ++t) CHECK(tesa2[t].pruned() == tesa[t].pruned());
  }
  CHECK(zeroed_total > 0);  // the random pruning did give propagation something to do
}

TEST_CASE("Propagation: a pruned conv output channel zeroes the next conv's input channel") {
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 3, 5, 5});
  const int32_t w1 = b.weight("w1", {4, 3, 1, 1});
  const int32_t b1 = b.weight("b1", {4});
  for (int64_t c = 0; c < 3; ++c) b.g.tensors[static_cast<size_t>(w1)].weight[2 * 3 + c] = 0.0f;
  b.g.tensors[static_cast<size_t>(b1)].weight[2] = 0.0f;
  OpAttributes a1 = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  const int32_t y1 = b.op(OpType::Conv, {x, w1, b1}, a1, "conv1");
  const int32_t r1 = b.op(OpType::Relu, {y1}, {}, "relu1");
  const int32_t w2 = b.weight("w2", {5, 4, 3, 3});
  OpAttributes a2 = spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  b.g.outputs = {b.op(OpType::Conv, {r1, w2, b.weight("b2", {5})}, a2, "conv2")};
  SparsityReport report;
  const auto tesa = propagate_sparsity(b.g, with_evaluator(), &report);
  // conv1's channel 2 is 0·x + 0 = 0, Relu(0) = 0, so w2[:, 2] (5 × 3 × 3) multiplies zeros only.
  CHECK(report.weights_zeroed == 5 * 9);
  CHECK(tesa[static_cast<size_t>(r1)].zero.count() == 25);
  for (int64_t m = 0; m < 5; ++m)
    for (int64_t k = 0; k < 9; ++k)
      CHECK(b.g.tensors[static_cast<size_t>(w2)].weight[static_cast<size_t>((m * 4 + 2) * 9 + k)] ==
            0.0f);
  CHECK(report.tensors[static_cast<size_t>(w2)].pruned_before == 0);
  CHECK(report.tensors[static_cast<size_t>(w2)].pruned_after == 45);
  CHECK(report.sweeps == 2);  // the second sweep finds nothing new
}

TEST_CASE("Propagation backward: columns a zero scale kills are dead, and so are their weights") {
  GraphBuilder b;
  const int32_t x = b.input("x", {3, 4});
  const int32_t w = b.weight("w", {4, 6});
  const int32_t y = b.op(OpType::MatMul, {x, w}, {}, "mm");
  const int32_t scale = b.weight("scale", {6});
  b.g.tensors[static_cast<size_t>(scale)].weight[1] = 0.0f;
  b.g.tensors[static_cast<size_t>(scale)].weight[4] = 0.0f;
  const int32_t out = b.op(OpType::Mul, {y, scale}, {}, "mul");
  b.g.outputs = {out};
  SparsityReport report;
  const auto tesa = propagate_sparsity(b.g, with_evaluator(), &report);
  CHECK(report.weights_zeroed == 8);                          // w[:, 1] and w[:, 4]
  CHECK(tesa[static_cast<size_t>(y)].dead.count() == 6);      // y[:, 1] and y[:, 4]
  CHECK(tesa[static_cast<size_t>(out)].zero.count() == 6);    // y·0
  CHECK(tesa[static_cast<size_t>(x)].pruned().count() == 0);  // every x feeds a live column
  for (int64_t k = 0; k < 4; ++k) {
    CHECK(b.g.tensors[static_cast<size_t>(w)].weight[static_cast<size_t>(k * 6 + 1)] == 0.0f);
    CHECK(b.g.tensors[static_cast<size_t>(w)].weight[static_cast<size_t>(k * 6 + 4)] == 0.0f);
  }
}

namespace {

std::string parse_error(const std::string& json, const MaskLoader& loader = nullptr) {
  try {
    parse_sparsity_json(json, "ann.json", loader);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string apply_error(Graph g, const std::string& json, const MaskLoader& loader = nullptr) {
  SparsityConfig c;
  c.enabled = true;
  try {
    c.annotations = parse_sparsity_json(json, "ann.json", loader);
    apply_sparsity_annotations(g, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Graph small_model() {
  GraphBuilder b;
  const int32_t x = b.input("x", {2, 4});
  b.g.outputs = {b.op(OpType::MatMul, {x, b.weight("w", {4, 4})}, {}, "mm")};
  return b.g;
}

}  // namespace

TEST_CASE("Annotation file: bad files give one-line errors naming the file, entry and problem") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"tensors\": [", "ann.json: not valid JSON"},
      {"42", "expected a list of entries"},
      {"{\"layers\": []}", "expected a list of entries"},
      {"[17]", "ann.json entry 1: must be an object"},
      {"[{\"pruned\": \"zeros\"}]", "entry 1: needs \"tensor\""},
      {"[{\"tensor\": \"w\"}, {\"tensor\": \"w\", \"prune\": \"zeros\"}]",
       "entry 2: unknown key 'prune'"},
      {"[{\"tensor\": \"w\", \"pruned\": \"dense\"}]", "unknown pruned pattern 'dense'"},
      {"[{\"tensor\": \"w\", \"pruned\": 0.9}]", "\"pruned\" must be a string"},
      {"[{\"tensor\": \"w\", \"pruned\": \"block:32x32\"}]", "is not block:RxC:RATIO"},
      {"[{\"tensor\": \"w\", \"pruned\": \"block:0x4:0.5\"}]", "block size '0'"},
      {"[{\"tensor\": \"w\", \"pruned\": \"block:4x4:1.5\"}]",
       "ratio '1.5' is not a number in [0, 1]"},
      {"[{\"tensor\": \"w\", \"pruned\": \"magnitude:0.5x\"}]", "ratio '0.5x'"},
      {"[{\"tensor\": \"w\", \"bits\": 0}]", "\"bits\" must be an integer from 1 to 32"},
      {"[{\"tensor\": \"w\", \"pruned\": \"mask:\"}]", "needs a .npy file name"},
  };
  for (const auto& [json, expected] : cases) {
    const std::string message = parse_error(json);
    CHECK_MESSAGE(message.find(expected) != std::string::npos, json, " -> ", message);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK(apply_error(small_model(), "[{\"tensor\": \"nope\"}]")
            .find("entry 1: the model has no tensor named 'nope'") != std::string::npos);
  CHECK(apply_error(small_model(), "[{\"tensor\": \"x\"}]").find("is an activation") !=
        std::string::npos);
  const MaskLoader wrong_shape = [](const std::string& path, Shape* shape) {
    CHECK(path == "masks/w.npy");
    *shape = {2, 8};
    return std::vector<float>(16, 1.0f);
  };
  CHECK(apply_error(small_model(), "[{\"tensor\": \"w\", \"pruned\": \"mask:masks/w.npy\"}]",
                    wrong_shape)
            .find("mask shape [2,8] differs from 'w' [4,4]") != std::string::npos);
  const MaskLoader missing = [](const std::string& path, Shape*) -> std::vector<float> {
    throw Error(path + ": no such file");
  };
  CHECK(parse_error("[{\"tensor\": \"w\", \"pruned\": \"mask:m.npy\"}]", missing) ==
        "m.npy: no such file");
}

TEST_CASE("Annotation patterns prune what they say") {
  Graph g = small_model();
  const size_t w = static_cast<size_t>(*g.find_tensor("w"));
  // Block L1 norms (2×2 blocks, row-major block order): 4, 40, 400, 0.4.
  g.tensors[w].weight = {1, 1, 10, 10, 1, 1, 10, 10, 100, 100, 0.1f, 0.1f, 100, 100, 0.1f, 0.1f};
  SparsityConfig c;
  c.enabled = true;
  c.annotations = parse_sparsity_json(
      "{\"tensors\": [{\"tensor\": \"w\", \"pruned\": \"block:2x2:0.5\", \"bits\": 8}]}", "a.json",
      nullptr);
  apply_sparsity_annotations(g, c);
  const std::vector<float> blocks = {0, 0, 10, 10, 0, 0, 10, 10, 100, 100, 0, 0, 100, 100, 0, 0};
  CHECK(g.tensors[w].weight == blocks);
  SparsityReport report;
  propagate_sparsity(g, c, &report);
  CHECK(report.tensors[w].bit_width == 8);
  CHECK(report.tensors[w].pruned_before == 8);

  g = small_model();
  for (size_t e = 0; e < 16; ++e) g.tensors[w].weight[e] = static_cast<float>(e) - 7.5f;
  c.annotations = parse_sparsity_json("[{\"tensor\": \"w\", \"pruned\": \"magnitude:0.25\"}]",
                                      "a.json", nullptr);
  apply_sparsity_annotations(g, c);
  // |e − 7.5| smallest for e = 7, 8 (0.5), then 6, 9 (1.5): 4 of 16.
  for (size_t e = 0; e < 16; ++e) CHECK((g.tensors[w].weight[e] == 0.0f) == (e >= 6 && e <= 9));

  g = small_model();
  const MaskLoader diagonal = [](const std::string&, Shape* shape) {
    *shape = {4, 4};
    std::vector<float> keep(16, 0.0f);
    for (size_t i = 0; i < 4; ++i) keep[i * 5] = 1.0f;
    return keep;
  };
  c.annotations =
      parse_sparsity_json("[{\"tensor\": \"w\", \"pruned\": \"mask:d.npy\"}]", "a.json", diagonal);
  apply_sparsity_annotations(g, c);
  for (size_t e = 0; e < 16; ++e) CHECK((g.tensors[w].weight[e] != 0.0f) == (e % 5 == 0));
}

}  // namespace tessera::graph::test
