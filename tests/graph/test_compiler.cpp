// compile_graph: BN folding numerics (against conv then BN computed by hand
// here), folding conditions, dead-op removal, weights storage, report.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "graph/fold_batch_norm.hpp"
#include "graph/fuse_activations.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

// Plain direct convolution, NCHW, from the ONNX definition.
std::vector<double> conv_ref(const std::vector<float>& x, const Shape& xs, std::span<const float> w,
                             const Shape& ws, std::span<const float> bias, const OpAttributes& a,
                             const Shape& ys) {
  std::vector<double> y(static_cast<size_t>(shape_numel(ys)), 0.0);
  int64_t cg = ws[1], mg = ws[0] / a.group;
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t m = 0; m < ys[1]; ++m)
      for (int64_t oh = 0; oh < ys[2]; ++oh)
        for (int64_t ow = 0; ow < ys[3]; ++ow) {
          double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(m)];
          int64_t g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t kh = 0; kh < ws[2]; ++kh)
              for (int64_t kw = 0; kw < ws[3]; ++kw) {
                int64_t ih = oh * a.strides[0] - a.pads[0] + kh * a.dilations[0];
                int64_t iw = ow * a.strides[1] - a.pads[1] + kw * a.dilations[1];
                if (ih < 0 || iw < 0 || ih >= xs[2] || iw >= xs[3]) continue;
                acc += static_cast<double>(x[static_cast<size_t>(
                           ((n * xs[1] + g * cg + c) * xs[2] + ih) * xs[3] + iw)]) *
                       w[static_cast<size_t>(((m * cg + c) * ws[2] + kh) * ws[3] + kw)];
              }
          y[static_cast<size_t>(((n * ys[1] + m) * ys[2] + oh) * ys[3] + ow)] = acc;
        }
  return y;
}

const CompiledTensor& tensor_of(const TileGraph& tg, int32_t t) {
  return tg.tensors[static_cast<size_t>(t)];
}

}  // namespace

TEST_CASE("BN folding matches conv followed by batch normalization") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> dim(1, 4);
    GraphBuilder b;
    b.rng.seed(seed);
    int64_t group = dim(rng) % 2 + 1, cg = dim(rng), mg = dim(rng);
    Shape xs = {dim(rng), cg * group, dim(rng) + 2, dim(rng) + 2};
    int32_t x = b.input("x", xs);
    OpAttributes a = spatial_attrs({3, 2}, {1, 2}, {1, 0, 1, 1}, {1, 1});
    a.group = group;
    int64_t m = mg * group;
    int32_t w = b.weight("w", {m, cg, 3, 2});
    bool with_bias = seed % 2 == 0;
    std::vector<int32_t> conv_in = {x, w};
    if (with_bias) conv_in.push_back(b.weight("bias", {m}));
    int32_t y = b.op(OpType::Conv, conv_in, a, "conv");
    int32_t scale = b.weight("scale", {m}), beta = b.weight("beta", {m}),
            mean = b.weight("mean", {m}), var = b.weight("var", {m});
    for (float& v : b.g.tensors[static_cast<size_t>(var)].weight) v = std::abs(v) + 0.1f;
    OpAttributes bn_attrs;
    bn_attrs.epsilon = 1e-3f;
    int32_t z = b.op(OpType::BatchNormalization, {y, scale, beta, mean, var}, bn_attrs, "bn");
    b.g.outputs = {z};
    Graph original = b.g;

    CompileReport report;
    CompileOptions two_tiles;
    two_tiles.tiles = 2;
    TileGraph tg = compile_graph(b.g, two_tiles, &report);
    REQUIRE(tg.ops.size() == 1);
    CHECK(tg.ops[0].type == OpType::Conv);
    REQUIRE(tg.ops[0].inputs.size() == 3);
    REQUIRE(report.notes.size() == 1);
    CHECK(report.notes[0].find("bn") != std::string::npos);
    CHECK(report.ops[0].note.find("BatchNormalization") != std::string::npos);
    // The output keeps the BN's name: the model's interface is unchanged.
    CHECK(tensor_of(tg, tg.outputs[0]).name == "bn.out");

    // Reference: conv with the original weights, then BN by its formula.
    std::vector<float> xv(static_cast<size_t>(shape_numel(xs)));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : xv) v = u(rng);
    auto tv = [&](int32_t t) {
      return std::span<const float>(original.tensors[static_cast<size_t>(t)].weight);
    };
    Shape ys = original.tensors[static_cast<size_t>(z)].shape;
    auto conv_out = conv_ref(xv, xs, tv(w), {m, cg, 3, 2},
                             with_bias ? tv(conv_in[2]) : std::span<const float>{}, a, ys);
    const CompiledTensor& fw = tensor_of(tg, tg.ops[0].inputs[1]);
    const CompiledTensor& fb = tensor_of(tg, tg.ops[0].inputs[2]);
    REQUIRE(fw.storage == TensorStorage::Weight);
    REQUIRE(fb.storage == TensorStorage::Weight);
    auto folded = conv_ref(xv, xs, fw.weight, fw.shape, fb.weight, tg.ops[0].attrs, ys);
    int64_t plane = ys[2] * ys[3];
    for (size_t i = 0; i < conv_out.size(); ++i) {
      size_t c = static_cast<size_t>((static_cast<int64_t>(i) / plane) % m);
      double expect = (conv_out[i] - tv(mean)[c]) /
                          std::sqrt(static_cast<double>(tv(var)[c]) + 1e-3) * tv(scale)[c] +
                      tv(beta)[c];
      CHECK(folded[i] == doctest::Approx(expect).epsilon(1e-5));
    }
  }
}

TEST_CASE("BN folding is skipped when the conv output is used elsewhere; shared weights stay") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 2, 5, 5});
  int32_t w = b.weight("w", {2, 2, 1, 1});
  auto attrs = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  int32_t y1 = b.op(OpType::Conv, {x, w}, attrs, "conv1");
  int32_t y2 = b.op(OpType::Conv, {x, w}, attrs, "conv2");  // shares w
  std::vector<int32_t> params;
  for (const char* n : {"s", "b", "m", "v"}) params.push_back(b.weight(n, {2}));
  for (float& v : b.g.tensors[static_cast<size_t>(params[3])].weight) v = std::abs(v) + 0.5f;
  int32_t z1 =
      b.op(OpType::BatchNormalization, {y1, params[0], params[1], params[2], params[3]}, {}, "bn1");
  int32_t z2 =
      b.op(OpType::BatchNormalization, {y2, params[0], params[1], params[2], params[3]}, {}, "bn2");
  int32_t extra = b.op(OpType::Relu, {y2}, {}, "relu_y2");  // second consumer of y2
  int32_t sum = b.op(OpType::Add, {z1, z2});
  int32_t out = b.op(OpType::Add, {sum, extra});
  b.g.outputs = {out};
  std::vector<float> w_before = b.g.tensors[static_cast<size_t>(w)].weight;

  Graph folded = b.g;
  auto folds = fold_batch_norms(folded);
  REQUIRE(folds.size() == 1);
  CHECK(folds[0].batch_norm == "bn1");
  CHECK(folds[0].conv == "conv1");
  CHECK(folded.tensors[static_cast<size_t>(w)].weight == w_before);  // shared weight untouched
  const Operator& conv1 = folded.ops[0];
  CHECK(conv1.inputs[1] != w);
  const Operator& conv2 = folded.ops[1];
  CHECK(conv2.inputs[1] == w);

  CompileReport report;
  TileGraph tg = compile_graph(b.g, CompileOptions{}, &report);
  CHECK(tg.ops.size() == 6);  // conv1, conv2, bn2, relu, add, add
  int bn_left = 0;
  for (const auto& op : tg.ops) bn_left += op.type == OpType::BatchNormalization;
  CHECK(bn_left == 1);

  // Graph output directly from the conv: no folding.
  GraphBuilder c;
  int32_t cx = c.input("x", {1, 2, 3, 3});
  int32_t cy = c.op(OpType::Conv, {cx, c.weight("w", {2, 2, 1, 1})}, attrs, "conv");
  std::vector<int32_t> cp;
  for (const char* n : {"s", "b", "m", "v"}) cp.push_back(c.weight(n, {2}));
  int32_t cz = c.op(OpType::BatchNormalization, {cy, cp[0], cp[1], cp[2], cp[3]}, {}, "bn");
  c.g.outputs = {cz, cy};
  CHECK(fold_batch_norms(c.g).empty());
}

TEST_CASE("compile_graph: dead ops dropped, tensors placed, report filled") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 3, 8, 8});
  int32_t w = b.weight("w", {4, 3, 3, 3});
  int32_t y =
      b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), "conv");
  // A Mul, not a Relu: a Relu would be fused into the conv (tested below).
  int32_t scale = b.weight("scale", {1});
  int32_t r = b.op(OpType::Mul, {y, scale}, {}, "relu");
  int32_t unused_w = b.weight("unused", {8});
  b.op(OpType::Add, {r, unused_w}, {}, "dead_add");  // output reaches nothing
  b.g.outputs = {r};
  CompileReport report;
  TileGraph tg =
      compile_graph(b.g, CompileOptions{.tiles = 4, .threads = 2, .target = "test"}, &report);
  REQUIRE(tg.ops.size() == 2);
  CHECK(tg.ops[1].name == "relu");
  CHECK(tg.tensors.size() == 5);  // x, w, conv out, scale, mul out
  CHECK(report.ops.size() == 2);
  CHECK(report.ops[0].tiles == 4);
  CHECK(report.ops[0].kernel == "reference");
  CHECK(report.nodes == 8);
  CHECK(report.edges == 4);  // relu tile i reads conv tile i only
  int64_t edges = 0;
  for (const auto& n : tg.nodes) edges += static_cast<int64_t>(n.children.size());
  CHECK(edges == report.edges);
  CHECK(report.weight_bytes == (4 * 3 * 3 * 3 + 1) * 4);
  CHECK(report.arena_bytes == tg.arena_bytes);
  CHECK(report.arena_bytes_without_reuse == 3 * 64 * 4 + 2 * 4 * 64 * 4);
  CHECK(tg.options.target == "test");
  // Weight spans survive copies and moves of the TileGraph (storage is shared).
  TileGraph copy = tg;
  tg = TileGraph{};
  const CompiledTensor& cw = copy.tensors[1];
  CHECK(cw.storage == TensorStorage::Weight);
  REQUIRE(cw.weight.size() == 108);
  CHECK(cw.weight[5] == b.g.tensors[static_cast<size_t>(w)].weight[5]);
  for (const auto& t : copy.tensors)
    if (t.storage == TensorStorage::Arena)
      CHECK(t.arena_offset + static_cast<uint64_t>(t.byte_size()) <= copy.arena_bytes);
  CHECK(copy.inputs == std::vector<int32_t>{0});
  CHECK(copy.tensors[static_cast<size_t>(copy.outputs[0])].name == "relu.out");
}

TEST_CASE("compile_graph rejects malformed graphs with a message") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 4});
  int32_t r = b.op(OpType::Relu, {x}, {}, "relu");
  b.g.outputs = {r};
  Graph bad = b.g;
  bad.ops[0].inputs = {7};
  CHECK_THROWS_WITH_AS(compile_graph(bad, {}, nullptr), doctest::Contains("out of range"),
                       tessera::Error);
  bad = b.g;
  bad.ops[0].inputs = {r};  // reads its own output: not topological
  CHECK_THROWS_AS(compile_graph(bad, {}, nullptr), tessera::Error);
  bad = b.g;
  bad.outputs = {};
  CHECK_THROWS_AS(compile_graph(bad, {}, nullptr), tessera::Error);
  bad = b.g;
  int32_t w = b.weight("w", {4});
  bad = b.g;
  bad.tensors[static_cast<size_t>(w)].weight.pop_back();
  CHECK_THROWS_WITH_AS(compile_graph(bad, {}, nullptr), doctest::Contains("values"),
                       tessera::Error);
  bad = b.g;
  bad.ops[0].outputs = {r, x};
  CHECK_THROWS_AS(compile_graph(bad, {}, nullptr), tessera::Error);
}

TEST_CASE("fuse_activations: Relu/Clip/Sigmoid/LeakyRelu after Conv/Gemm/MatMul become epilogues") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 3, 8, 8});
  int32_t w = b.weight("w", {4, 3, 3, 3});
  int32_t y =
      b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), "conv");
  OpAttributes clip;
  clip.clip_min = 0.0f;
  clip.clip_max = 6.0f;
  int32_t c = b.op(OpType::Clip, {y}, clip, "clip");
  int32_t shared = b.op(OpType::Conv, {c, b.weight("w2", {4, 4, 1, 1})},
                        spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}), "conv2");
  int32_t r1 = b.op(OpType::Relu, {shared}, {}, "relu_a");    // conv2 has two consumers:
  int32_t r2 = b.op(OpType::Sigmoid, {shared}, {}, "sig_b");  // neither is fused
  int32_t sum = b.op(OpType::Add, {r1, r2}, {}, "sum");
  b.g.outputs = {sum};
  std::vector<FusedActivation> fused = fuse_activations(b.g);
  REQUIRE(fused.size() == 1);
  CHECK(fused[0].activation == "clip");
  CHECK(fused[0].producer == "conv");
  REQUIRE(b.g.ops.size() == 5);
  CHECK(b.g.ops[0].attrs.activation == Activation::Clip);
  CHECK(b.g.ops[0].attrs.clip_min == 0.0f);
  CHECK(b.g.ops[0].attrs.clip_max == 6.0f);
  CHECK(b.g.ops[0].outputs[0] == c);  // the conv now writes the clip's output
  CHECK(b.g.ops[1].attrs.activation == Activation::None);
  check_graph(b.g);

  // A graph output is never fused away; a Gemm's Sigmoid is.
  GraphBuilder g2;
  int32_t a = g2.input("a", {2, 5});
  int32_t m = g2.op(OpType::Gemm, {a, g2.weight("bw", {5, 3})}, {}, "fc");
  int32_t s2 = g2.op(OpType::Sigmoid, {m}, {}, "sig");
  g2.g.outputs = {s2, m};
  CHECK(fuse_activations(g2.g).empty());
  g2.g.outputs = {s2};
  auto f2 = fuse_activations(g2.g);
  REQUIRE(f2.size() == 1);
  CHECK(g2.g.ops[0].attrs.activation == Activation::Sigmoid);

  // A LeakyRelu takes its slope along (YOLO's Conv + LeakyRelu(0.1) blocks).
  GraphBuilder g3;
  int32_t x3 = g3.input("x", {1, 3, 8, 8});
  int32_t y3 = g3.op(OpType::Conv, {x3, g3.weight("w", {4, 3, 3, 3})},
                     spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), "conv");
  OpAttributes leaky;
  leaky.alpha = 0.1f;
  g3.g.outputs = {g3.op(OpType::LeakyRelu, {y3}, leaky, "leaky")};
  REQUIRE(fuse_activations(g3.g).size() == 1);
  REQUIRE(g3.g.ops.size() == 1);
  CHECK(g3.g.ops[0].attrs.activation == Activation::LeakyRelu);
  CHECK(g3.g.ops[0].attrs.leaky_relu_alpha == 0.1f);
  CHECK(g3.g.ops[0].attrs.alpha == 1.0f);  // the Conv's own alpha is untouched
  check_graph(g3.g);
}

TEST_CASE("Residual Add fuses into the Conv before it; a Relu after it becomes the activation") {
  // A ResNet basic block with a projection shortcut: the Add's operands are
  // both Conv outputs; the later Conv takes the other as its residual.
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 4, 6, 6});
  const auto same3 = spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  const int32_t shortcut = b.op(OpType::Conv, {x, b.weight("ws", {8, 4, 1, 1})}, one, "shortcut");
  const int32_t y1 =
      b.op(OpType::Conv, {x, b.weight("w1", {8, 4, 3, 3}), b.weight("b1", {8})}, same3, "conv1");
  const int32_t r1 = b.op(OpType::Relu, {y1}, {}, "relu1");
  const int32_t y2 = b.op(OpType::Conv, {r1, b.weight("w2", {8, 8, 3, 3})}, same3, "conv2");
  const int32_t sum = b.op(OpType::Add, {shortcut, y2}, {}, "add");
  const int32_t out = b.op(OpType::Relu, {sum}, {}, "relu2");
  b.g.outputs = {out};

  CompileReport report;
  const TileGraph tg =
      compile_graph(b.g, CompileOptions{.tiles = 3, .threads = 2, .target = "test"}, &report);
  REQUIRE(tg.ops.size() == 3);  // shortcut, conv1 (+relu1), conv2 (+add +relu2)
  const Operator& conv2 = tg.ops[2];
  CHECK(conv2.name == "conv2");
  CHECK(conv2.attrs.fused_residual);
  CHECK(conv2.attrs.activation == Activation::Relu);
  REQUIRE(conv2.inputs.size() == 4);
  // No bias before: a zero one keeps input 3 the residual.
  const CompiledTensor& bias = tg.tensors[static_cast<size_t>(conv2.inputs[2])];
  REQUIRE(bias.storage == TensorStorage::Weight);
  for (float v : bias.weight) CHECK(v == 0.0f);
  CHECK(tg.tensors[static_cast<size_t>(conv2.inputs[3])].name == "shortcut.out");
  CHECK(tg.tensors[static_cast<size_t>(conv2.outputs[0])].name == "relu2.out");
  CHECK(report.ops[2].note.find("residual 'add' fused in") != std::string::npos);
  // Each conv2 tile has an edge from every shortcut tile it overlaps (the
  // residual is read at the tile's own region).
  int32_t checked = 0;
  for (size_t n = 0; n < tg.nodes.size(); ++n) {
    if (tg.nodes[n].op != 0) continue;
    for (size_t m = 0; m < tg.nodes.size(); ++m) {
      if (tg.nodes[m].op != 2 || !regions_overlap(tg.nodes[n].region, tg.nodes[m].region)) continue;
      const auto& children = tg.nodes[n].children;
      CHECK(std::find(children.begin(), children.end(), static_cast<int32_t>(m)) != children.end());
      ++checked;
    }
  }
  CHECK(checked >= 3);

  // Off (for A/B runs): the Add stays, and so does the Relu after it (an
  // Add has no epilogue to fuse it into).
  CompileOptions no_fusion{.tiles = 3, .threads = 2, .target = "test"};
  no_fusion.fuse_residual = false;
  const TileGraph plain = compile_graph(b.g, no_fusion, nullptr);
  CHECK(plain.ops.size() == 5);
  for (const Operator& op : plain.ops) CHECK_FALSE(op.attrs.fused_residual);
}

TEST_CASE("Residual fusion is skipped where it would change what is computed or its order") {
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  {  // The conv output has a second consumer.
    GraphBuilder b;
    const int32_t x = b.input("x", {1, 3, 4, 4});
    const int32_t y = b.op(OpType::Conv, {x, b.weight("w", {3, 3, 1, 1})}, one, "conv");
    const int32_t s = b.op(OpType::Add, {y, x}, {}, "add");
    const int32_t t = b.op(OpType::Mul, {s, y}, {}, "mul");
    b.g.outputs = {t};
    const TileGraph tg = compile_graph(b.g, CompileOptions{}, nullptr);
    CHECK(tg.ops.size() == 3);
  }
  {  // The conv already has an activation: the residual would come after it.
    GraphBuilder b;
    const int32_t x = b.input("x", {1, 3, 4, 4});
    const int32_t y = b.op(OpType::Conv, {x, b.weight("w", {3, 3, 1, 1})}, one, "conv");
    const int32_t r = b.op(OpType::Relu, {y}, {}, "relu");
    b.g.outputs = {b.op(OpType::Add, {r, x}, {}, "add")};
    const TileGraph tg = compile_graph(b.g, CompileOptions{}, nullptr);
    REQUIRE(tg.ops.size() == 2);
    CHECK(tg.ops[1].type == OpType::Add);
  }
  {  // A broadcast operand: not the output's shape.
    GraphBuilder b;
    const int32_t x = b.input("x", {1, 3, 4, 4});
    const int32_t y = b.op(OpType::Conv, {x, b.weight("w", {3, 3, 1, 1})}, one, "conv");
    b.g.outputs = {b.op(OpType::Add, {y, b.weight("c", {3, 1, 1})}, {}, "add")};
    const TileGraph tg = compile_graph(b.g, CompileOptions{}, nullptr);
    CHECK(tg.ops.size() == 2);
  }
  {  // The other operand is computed after the conv: the order would break.
    GraphBuilder b;
    const int32_t x = b.input("x", {1, 3, 4, 4});
    const int32_t y = b.op(OpType::Conv, {x, b.weight("w", {3, 3, 1, 1})}, one, "conv");
    const int32_t later = b.op(OpType::Relu, {x}, {}, "later");
    b.g.outputs = {b.op(OpType::Add, {y, later}, {}, "add")};
    const TileGraph tg = compile_graph(b.g, CompileOptions{}, nullptr);
    CHECK(tg.ops.size() == 3);
  }
}

TEST_CASE("compile_graph: the automatic reuse distance") {
  // x [rows, 64] through 8 Relus, each cut into its rows: paths that never
  // join, so only bounded run-ahead lets a tensor take another's bytes.
  auto chain = [](int64_t rows) {
    GraphBuilder b;
    int32_t t = b.input("x", {rows, 64});
    for (int i = 0; i < 8; ++i) t = b.op(OpType::Relu, {t});
    b.g.outputs = {t};
    return b.g;
  };
  auto compile = [&](int64_t rows, int32_t distance) {
    CompileReport report;
    CompileOptions options;
    options.tiles = static_cast<int32_t>(rows);
    options.threads = 2;
    options.reuse_distance = distance;
    compile_graph(chain(rows), options, &report);
    REQUIRE(report.nodes == 8 * rows);
    return report;
  };
  SUBCASE("two rows: distance 1 keeps the longest path, so it is taken") {
    const CompileReport automatic = compile(2, CompileOptions::kAutoReuseDistance);
    const CompileReport widest = compile(2, CompileOptions::kMaxAutoReuseDistance);
    CHECK(automatic.reuse_distance == 1);
    CHECK(automatic.ordering_edges > 0);
    CHECK(automatic.arena_bytes < widest.arena_bytes);
  }
  SUBCASE("an explicit distance is kept") {
    CHECK(compile(2, 3).reuse_distance == 3);
    CHECK(compile(2, 0).ordering_edges == 0);
  }
  SUBCASE("128 rows: distance 1 would add ~112 edges per tile, over the budget") {
    // Each reuse orders all 128 tiles of one op before all 128 of another.
    const CompileReport one = compile(128, 1);
    CHECK(one.ordering_edges > 64 * one.nodes);
    const CompileReport automatic = compile(128, CompileOptions::kAutoReuseDistance);
    CHECK(automatic.reuse_distance > 1);
    CHECK(automatic.ordering_edges <= 64 * automatic.nodes);
  }
}
