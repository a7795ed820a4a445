// Attention scale and mask fusion (graph/fuse_softmax_input.hpp):
// Softmax(Add(Mul(x, c), m)) along the last axis becomes one Softmax with
// alpha = c and m as its input 1, and the near misses it must leave alone.
// The kernels' arithmetic is checked in test_cpu_transformer_ops.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/compiler.hpp"
#include "graph/fuse_softmax_input.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

struct Attention {
  GraphBuilder b;
  int32_t scores = -1, scale = -1, mask = -1, scaled = -1, masked = -1, y = -1;
};

// scores [1, 2, 4, 4] (a computed tensor) -> Mul(scores, c) or Div(scores,
// c) -> Add(., mask [1, 1, 4, 4]) -> Softmax(axis).
Attention attention(OpType scale_op = OpType::Mul, bool commuted = false, int64_t axis = 3,
                    Shape mask_shape = {1, 1, 4, 4}) {
  Attention a;
  GraphBuilder& b = a.b;
  a.scores = b.op(OpType::Relu, {b.input("qk", {1, 2, 4, 4})}, {}, "scores");
  a.scale = b.weight("c", {});
  b.g.tensors[static_cast<size_t>(a.scale)].weight = {0.125f};
  a.mask = b.op(OpType::Relu, {b.input("m", mask_shape)}, {}, "mask");
  a.scaled = commuted && scale_op == OpType::Mul ? b.op(scale_op, {a.scale, a.scores}, {}, "scale")
                                                 : b.op(scale_op, {a.scores, a.scale}, {}, "scale");
  a.masked = commuted ? b.op(OpType::Add, {a.mask, a.scaled}, {}, "add")
                      : b.op(OpType::Add, {a.scaled, a.mask}, {}, "add");
  OpAttributes sa;
  sa.axis = axis;
  a.y = b.op(OpType::Softmax, {a.masked}, sa, "softmax");
  b.g.outputs = {a.y};
  return a;
}

}  // namespace

TEST_CASE("fuse_softmax_inputs: scale and mask in either order fold into the Softmax") {
  for (bool commuted : {false, true}) {
    CAPTURE(commuted);
    Attention a = attention(OpType::Mul, commuted);
    const std::vector<RewrittenPattern> fused = fuse_softmax_inputs(a.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "softmax");
    CHECK(fused[0].removed == "mask Add 'add', scale Mul 'scale'");
    CHECK(a.b.g.ops.size() == 3);  // the Mul and the Add are gone
    const Operator& softmax = op_named(a.b.g, "softmax");
    CHECK(softmax.inputs == std::vector<int32_t>{a.scores, a.mask});
    CHECK(softmax.attrs.alpha == 0.125f);
  }
  SUBCASE("a Div by the constant multiplies by its reciprocal") {
    Attention a = attention(OpType::Div);
    REQUIRE(fuse_softmax_inputs(a.b.g).size() == 1);
    CHECK(op_named(a.b.g, "softmax").attrs.alpha == 8.0f);
  }
  SUBCASE("a mask alone") {
    GraphBuilder b;
    const int32_t s = b.op(OpType::Relu, {b.input("qk", {2, 3, 5})}, {}, "scores");
    const int32_t m = b.input("m", {3, 5});
    OpAttributes sa;
    sa.axis = 2;
    b.g.outputs = {b.op(OpType::Softmax, {b.op(OpType::Add, {s, m}, {}, "add")}, sa, "softmax")};
    REQUIRE(fuse_softmax_inputs(b.g).size() == 1);
    CHECK(op_named(b.g, "softmax").inputs == std::vector<int32_t>{s, m});
    CHECK(op_named(b.g, "softmax").attrs.alpha == 1.0f);
  }
}

TEST_CASE("fuse_softmax_inputs leaves near misses alone") {
  SUBCASE("not the last axis") {
    Attention a = attention(OpType::Mul, false, 2);
    CHECK(fuse_softmax_inputs(a.b.g).empty());
  }
  SUBCASE("the masked scores are also a graph output") {
    Attention a = attention();
    a.b.g.outputs.push_back(a.masked);
    CHECK(fuse_softmax_inputs(a.b.g).empty());
  }
  SUBCASE("the scaled scores have a second reader: only the mask folds") {
    Attention a = attention();
    a.b.g.outputs.push_back(a.b.op(OpType::Relu, {a.scaled}, {}, "relu"));
    const std::vector<RewrittenPattern> fused = fuse_softmax_inputs(a.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].removed == "mask Add 'add'");
    CHECK(op_named(a.b.g, "softmax").inputs == std::vector<int32_t>{a.scaled, a.mask});
  }
  SUBCASE("a mask wider than the scores is X, and the scaled scores its mask") {
    Attention a = attention(OpType::Mul, false, 3, {2, 2, 4, 4});
    const std::vector<RewrittenPattern> fused = fuse_softmax_inputs(a.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].removed == "mask Add 'add'");
    CHECK(op_named(a.b.g, "softmax").inputs == std::vector<int32_t>{a.mask, a.scaled});
  }
  SUBCASE("a scale that is not a constant scalar") {
    GraphBuilder b;
    const int32_t s = b.op(OpType::Relu, {b.input("qk", {2, 4})}, {}, "scores");
    const int32_t per_column = b.op(OpType::Mul, {s, b.weight("c", {4})}, {}, "scale");
    OpAttributes sa;
    sa.axis = 1;
    b.g.outputs = {b.op(OpType::Softmax, {per_column}, sa, "softmax")};
    CHECK(fuse_softmax_inputs(b.g).empty());
  }
}

TEST_CASE("compile_graph folds the scale and mask and reports it") {
  Attention a = attention();
  CompileReport report;
  const TileGraph tg =
      compile_graph(a.b.g, CompileOptions{.tiles = 2, .threads = 2, .target = "test"}, &report);
  bool found = false;
  for (size_t i = 0; i < tg.ops.size(); ++i)
    if (tg.ops[i].name == "softmax") {
      found = true;
      CHECK(tg.ops[i].inputs.size() == 2);
      CHECK(report.ops[i].note.find("scale Mul 'scale' fused in") != std::string::npos);
    }
  CHECK(found);
}

namespace {

// GPT-2's causal mask as exporters wrote it before additive masks: scores
// [1, 2, 4, 4] -> Div(., c) -> Where(lower-triangular constant [1, 1, 4, 4],
// ., fill) -> Softmax, `layers` times over the same condition and fill.
// prefix + l (appended, not "literal" + string: GCC 12's -Wrestrict false positive).
std::string named(const char* prefix, int l) {
  std::string name = prefix;
  name += std::to_string(l);
  return name;
}

struct CausalWhere {
  GraphBuilder b;
  int32_t condition = -1, fill = -1;
  std::vector<int32_t> scores;
};

CausalWhere causal_where(float fill_value, int layers = 1, bool constant_condition = true) {
  CausalWhere w;
  GraphBuilder& b = w.b;
  if (constant_condition) {
    w.condition = b.weight("causal", {1, 1, 4, 4});
    std::vector<float>& keep = b.g.tensors[static_cast<size_t>(w.condition)].weight;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) keep[static_cast<size_t>(i * 4 + j)] = j <= i ? 1.0f : 0.0f;
  } else {
    w.condition = b.input("causal", {1, 1, 4, 4});
  }
  w.fill = b.weight("fill", {});
  b.g.tensors[static_cast<size_t>(w.fill)].weight = {fill_value};
  const int32_t c = b.weight("c", {});
  b.g.tensors[static_cast<size_t>(c)].weight = {8.0f};
  OpAttributes sa;
  sa.axis = 3;
  for (int l = 0; l < layers; ++l) {
    w.scores.push_back(
        b.op(OpType::Relu, {b.input(named("qk", l), {1, 2, 4, 4})}, {}, named("scores", l)));
    const int32_t scaled = b.op(OpType::Div, {w.scores.back(), c}, {}, named("div", l));
    const int32_t masked =
        b.op(OpType::Where, {w.condition, scaled, w.fill}, {}, named("where", l));
    b.g.outputs.push_back(b.op(OpType::Softmax, {masked}, sa, named("softmax", l)));
  }
  return w;
}

}  // namespace

TEST_CASE("fuse_softmax_inputs: a constant Where mask with a very negative fill is additive") {
  for (float fill : {-3.4028234663852886e38f, -1e30f, -INFINITY}) {
    CAPTURE(fill);
    CausalWhere w = causal_where(fill, 2);
    const std::vector<RewrittenPattern> fused = fuse_softmax_inputs(w.b.g);
    REQUIRE(fused.size() == 2);
    CHECK(fused[0].removed == "mask Where 'where0' (as an additive mask), scale Div 'div0'");
    REQUIRE(w.b.g.ops.size() == 4);  // the Relus and Softmaxes
    const Operator& first = op_named(w.b.g, "softmax0");
    const Operator& second = op_named(w.b.g, "softmax1");
    REQUIRE(first.inputs.size() == 2);
    CHECK(first.inputs[0] == w.scores[0]);
    CHECK(second.inputs == std::vector<int32_t>{w.scores[1], first.inputs[1]});  // one mask
    CHECK(first.attrs.alpha == 0.125f);
    const TensorInfo& mask = w.b.g.tensors[static_cast<size_t>(first.inputs[1])];
    CHECK(mask.is_weight);
    CHECK(mask.shape == Shape{1, 1, 4, 4});
    REQUIRE(mask.weight.size() == 16);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        CHECK(mask.weight[static_cast<size_t>(i * 4 + j)] == (j <= i ? 0.0f : fill));
  }
}

TEST_CASE("fuse_softmax_inputs leaves Where masks alone that an addition would change") {
  SUBCASE("a fill an addition does not absorb (-1e4, the old GPT-2 masked_bias)") {
    CausalWhere w = causal_where(-1e4f);
    CHECK(fuse_softmax_inputs(w.b.g).empty());
    CHECK(op_named(w.b.g, "where0").type == OpType::Where);
    CHECK(op_named(w.b.g, "softmax0").inputs.size() == 1);
  }
  SUBCASE("a condition computed at run time") {
    CausalWhere w = causal_where(-INFINITY, 1, false);
    CHECK(fuse_softmax_inputs(w.b.g).empty());
    CHECK(op_named(w.b.g, "where0").type == OpType::Where);
  }
}
