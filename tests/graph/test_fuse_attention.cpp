// Attention fusion (graph/fuse_attention.hpp): MatMul(Q, KT) → Softmax (its
// scale and mask fused) → MatMul(·, V) becomes one FusedAttention; the near
// misses it must leave alone; the fused op's shape and tile dependencies.
#include <doctest/doctest.h>

#include <string>

#include "graph/compiler.hpp"
#include "graph/dependency.hpp"
#include "graph/fuse_attention.hpp"
#include "graph/fuse_softmax_input.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

struct Heads {
  GraphBuilder b;
  int32_t q = -1, kt = -1, v = -1, mask = -1, scores = -1, probs = -1, y = -1, zero = -1;
};

// q, kt, v [2, 3, rows, d] etc. from a stem Relu each (not model inputs);
// scores = MatMul(q, kt) · 0.125 + mask [1, 1, rows, s]; Softmax on the last
// axis; y = MatMul(probs, v) → Transpose. Its scale and mask already fused into
// the Softmax (fuse_softmax_inputs), as the compiler orders the passes.
// `kt_batch` 1 makes KT broadcast over the heads. `guard` puts the softmax
// NaN guard Where(IsNaN(probs), 0, probs) before the second MatMul.
Heads heads(int64_t rows = 8, int64_t s = 16, int64_t d = 4, int64_t dv = 5, int64_t kt_batch = 3,
            bool guard = false) {
  Heads h;
  GraphBuilder& b = h.b;
  h.q = b.op(OpType::Relu, {b.input("q_in", {2, 3, rows, d})}, {}, "q");
  h.kt = b.op(OpType::Relu, {b.input("kt_in", {2, kt_batch, d, s})}, {}, "kt");
  h.v = b.op(OpType::Relu, {b.input("v_in", {2, 3, s, dv})}, {}, "v");
  h.mask = b.weight("mask", {1, 1, rows, s});
  const int32_t qk = b.op(OpType::MatMul, {h.q, h.kt}, {}, "qk");
  const int32_t scaled = b.op(OpType::Mul, {qk, b.weight("scale", {})}, {}, "scale");
  h.scores = b.op(OpType::Add, {scaled, h.mask}, {}, "add_mask");
  OpAttributes softmax;
  softmax.axis = 3;
  h.probs = b.op(OpType::Softmax, {h.scores}, softmax, "softmax");
  int32_t p = h.probs;
  if (guard) {
    h.zero = b.weight("zero", {});
    b.g.tensors[static_cast<size_t>(h.zero)].weight = {0.0f};
    p = b.op(OpType::Where, {b.op(OpType::IsNaN, {p}, {}, "is_nan"), h.zero, p}, {}, "guard");
  }
  const int32_t pv = b.op(OpType::MatMul, {p, h.v}, {}, "pv");
  OpAttributes merge;  // the heads back together, as BERT and GPT-2 do
  merge.perm = {0, 2, 1, 3};
  h.y = b.op(OpType::Transpose, {pv}, merge, "merge_heads");
  b.g.outputs = {h.y};
  return h;
}

}  // namespace

TEST_CASE("fuse_attention: Q·KT, its fused Softmax and ·V become one FusedAttention") {
  Heads h = heads();
  const float alpha = h.b.g.tensors[static_cast<size_t>(h.b.g.ops[4].inputs[1])].weight[0];
  REQUIRE(fuse_softmax_inputs(h.b.g).size() == 1);
  const std::vector<RewrittenPattern> fused = fuse_attention(h.b.g);
  REQUIRE(fused.size() == 1);
  CHECK(fused[0].op == "pv");
  CHECK(fused[0].removed == "MatMul 'qk', Softmax 'softmax'");
  const Operator& att = op_named(h.b.g, "pv");
  CHECK(att.type == OpType::FusedAttention);
  CHECK(att.attrs.alpha == alpha);
  CHECK(att.inputs == std::vector<int32_t>{h.q, h.kt, h.v, h.mask});
  for (const Operator& op : h.b.g.ops) CHECK(op.name != "qk");
  for (const Operator& op : h.b.g.ops) CHECK(op.name != "softmax");
  std::vector<Shape> shapes;
  for (int32_t t : att.inputs) shapes.push_back(h.b.shape(t));
  CHECK(infer_output_shape(att, shapes) == Shape{2, 3, 8, 5});
}

TEST_CASE("fuse_attention: no mask or scale, and the near misses it leaves alone") {
  {  // A plain Softmax (no scale, no mask): alpha 1, three inputs.
    Heads h;
    GraphBuilder& b = h.b;
    const int32_t q = b.op(OpType::Relu, {b.input("q_in", {4, 6, 3})}, {}, "q");
    const int32_t kt = b.op(OpType::Relu, {b.input("kt_in", {4, 3, 7})}, {}, "kt");
    const int32_t v = b.op(OpType::Relu, {b.input("v_in", {4, 7, 2})}, {}, "v");
    OpAttributes softmax;
    softmax.axis = 2;
    const int32_t p =
        b.op(OpType::Softmax, {b.op(OpType::MatMul, {q, kt}, {}, "qk")}, softmax, "softmax");
    b.g.outputs = {b.op(OpType::MatMul, {p, v}, {}, "pv")};
    REQUIRE(fuse_attention(b.g).size() == 1);
    const Operator& att = op_named(b.g, "pv");
    CHECK(att.inputs == std::vector<int32_t>{q, kt, v});
    CHECK(att.attrs.alpha == 1.0f);
  }
  // Each variant breaks one condition: nothing fuses.
  enum Miss { kScoresRead, kProbsRead, kProbsOutput, kNotLastAxis, kBroadcastKt, kBiasMatMul };
  for (Miss miss :
       {kScoresRead, kProbsRead, kProbsOutput, kNotLastAxis, kBroadcastKt, kBiasMatMul}) {
    CAPTURE(static_cast<int>(miss));
    Heads h = heads(8, 8, 4, 5, miss == kBroadcastKt ? 1 : 3);
    fuse_softmax_inputs(h.b.g);
    Graph& g = h.b.g;
    Operator& softmax = const_cast<Operator&>(op_named(g, "softmax"));
    const int32_t scores = softmax.inputs[0];
    if (miss == kScoresRead) g.outputs.push_back(h.b.op(OpType::Relu, {scores}, {}, "peek"));
    if (miss == kProbsRead) g.outputs.push_back(h.b.op(OpType::Relu, {h.probs}, {}, "peek"));
    if (miss == kProbsOutput) g.outputs.push_back(h.probs);
    if (miss == kNotLastAxis) softmax.attrs.axis = 2;
    if (miss == kBiasMatMul)
      const_cast<Operator&>(op_named(g, "qk")).attrs.activation = Activation::Relu;
    CHECK(fuse_attention(g).empty());
    CHECK(op_named(g, "pv").type == OpType::MatMul);
  }
}

TEST_CASE("fuse_attention takes in the softmax NaN guard Where(IsNaN(p), 0, p), exactly that") {
  {
    Heads h = heads(8, 16, 4, 5, 3, /*guard=*/true);
    REQUIRE(fuse_softmax_inputs(h.b.g).size() == 1);
    const std::vector<RewrittenPattern> fused = fuse_attention(h.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].removed ==
          "MatMul 'qk', Softmax 'softmax', its NaN guard IsNaN 'is_nan' and Where 'guard'");
    const Operator& att = op_named(h.b.g, "pv");
    CHECK(att.type == OpType::FusedAttention);
    CHECK(att.attrs.nan_probabilities_to_zero);
    CHECK(att.inputs == std::vector<int32_t>{h.q, h.kt, h.v, h.mask});
    CHECK(h.b.g.ops.size() == 5);  // the three stems, the fused op, the Transpose
  }
  {  // Without a guard the flag stays off.
    Heads h = heads();
    fuse_softmax_inputs(h.b.g);
    REQUIRE(fuse_attention(h.b.g).size() == 1);
    CHECK_FALSE(op_named(h.b.g, "pv").attrs.nan_probabilities_to_zero);
  }
  // Near misses: a non-zero fill, the probabilities read a third time, the
  // IsNaN of another tensor. Nothing fuses (the guard's own Where is not a
  // Softmax, so the chain does not match either).
  enum Miss { kFillNotZero, kProbsRead, kOtherIsNaN };
  for (Miss miss : {kFillNotZero, kProbsRead, kOtherIsNaN}) {
    CAPTURE(static_cast<int>(miss));
    Heads h = heads(8, 16, 4, 5, 3, /*guard=*/true);
    fuse_softmax_inputs(h.b.g);
    Graph& g = h.b.g;
    if (miss == kFillNotZero) g.tensors[static_cast<size_t>(h.zero)].weight = {-0.5f};
    if (miss == kProbsRead) g.outputs.push_back(h.b.op(OpType::Relu, {h.probs}, {}, "peek"));
    if (miss == kOtherIsNaN) {
      Operator& is_nan = const_cast<Operator&>(op_named(g, "is_nan"));
      is_nan.inputs = {h.b.op(OpType::Relu, {h.probs}, {}, "other")};
    }
    CHECK(fuse_attention(g).empty());
    CHECK(op_named(g, "pv").type == OpType::MatMul);
  }
}

TEST_CASE("FusedAttention tiles: a row block reads its rows of Q and the mask, all of KT and V") {
  Heads h = heads(8, 16, 4, 5);
  fuse_softmax_inputs(h.b.g);
  REQUIRE(fuse_attention(h.b.g).size() == 1);
  const Operator& att = op_named(h.b.g, "pv");
  std::vector<Shape> in;
  for (int32_t t : att.inputs) in.push_back(h.b.shape(t));
  const Region tile{{1, 2, 3, 1}, {2, 3, 6, 4}};  // image 1, head 2, rows 3..6, columns 1..4
  const std::vector<InputDependency> deps = tile_dependencies(att, in, Shape{2, 3, 8, 5}, tile);
  REQUIRE(deps.size() == 4);
  CHECK(deps[0].region == Region{{1, 2, 3, 0}, {2, 3, 6, 4}});   // Q rows, all of D
  CHECK(deps[1].region == Region{{1, 2, 0, 0}, {2, 3, 4, 16}});  // all of KT
  CHECK(deps[2].region == Region{{1, 2, 0, 1}, {2, 3, 16, 4}});  // V: all rows, the columns
  CHECK(deps[3].region == Region{{0, 0, 3, 0}, {1, 1, 6, 16}});  // mask rows, whole
}

TEST_CASE("compile_graph fuses attention unless told not to, and reports it") {
  const CompileOptions on{.tiles = 4, .threads = 2, .target = "test"};
  Heads h = heads(32, 16);
  CompileReport report;
  const TileGraph tg = compile_graph(h.b.g, on, &report);
  bool found = false;
  for (size_t i = 0; i < tg.ops.size(); ++i)
    if (tg.ops[i].name == "pv") {
      found = true;
      CHECK(tg.ops[i].type == OpType::FusedAttention);
      CHECK(report.ops[i].note.find("MatMul 'qk', Softmax 'softmax' fused in") !=
            std::string::npos);
    }
  CHECK(found);
  CompileOptions off = on;
  off.fuse_attention = false;
  for (const Operator& op : compile_graph(h.b.g, off, nullptr).ops)
    CHECK(op.type != OpType::FusedAttention);
}
