// Squeeze-and-excitation scale fusion (graph/fuse_input_scale.hpp): Mul(x,
// s) with s [N or 1, C, 1, 1] into the 1x1 Conv reading the product, and the
// near misses it must leave alone (a 3x3 or strided conv, a product read
// twice or returned, a scale of the wrong shape, a constant scale).
#include <doctest/doctest.h>

#include <string>

#include "graph/compiler.hpp"
#include "graph/fuse_input_scale.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

const CompileOptions kOptions{.tiles = 2, .threads = 2, .target = "test"};

struct Se {
  GraphBuilder b;
  int32_t x = -1, s = -1, product = -1, y = -1;
};

// in -> Conv(3x3) = x; GlobalAveragePool(x) -> Conv 1x1 -> Sigmoid = s (or,
// with `gate_shape`, Sigmoid of an input of that shape); Mul(x, s) (or
// Mul(s, x)) -> Conv(kernel, stride) = y.
Se se_block(bool commuted, int64_t batch = 2, int64_t kernel = 1, int64_t stride = 1,
            Shape gate_shape = {}) {
  Se se;
  GraphBuilder& b = se.b;
  const auto three = spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  se.x = b.op(OpType::Conv, {b.input("in", {batch, 4, 6, 6}), b.weight("w0", {8, 4, 3, 3})}, three,
              "conv0");
  const int32_t pooled = b.op(OpType::GlobalAveragePool, {se.x}, {}, "pool");
  const int32_t squeezed = b.op(OpType::Conv, {pooled, b.weight("w1", {8, 8, 1, 1})}, one, "se");
  se.s = gate_shape.empty() ? b.op(OpType::Sigmoid, {squeezed}, {}, "gate")
                            : b.op(OpType::Sigmoid, {b.input("gate_in", gate_shape)}, {}, "gate");
  se.product = commuted ? b.op(OpType::Mul, {se.s, se.x}, {}, "mul")
                        : b.op(OpType::Mul, {se.x, se.s}, {}, "mul");
  const auto project = spatial_attrs({kernel, kernel}, {stride, stride},
                                     {kernel / 2, kernel / 2, kernel / 2, kernel / 2}, {1, 1});
  se.y =
      b.op(OpType::Conv, {se.product, b.weight("w2", {5, 8, kernel, kernel})}, project, "project");
  b.g.outputs = {se.y};
  return se;
}

}  // namespace

TEST_CASE("fuse_input_scales: Mul(x, s) in either order becomes the 1x1 Conv's input scale") {
  for (bool commuted : {false, true}) {
    CAPTURE(commuted);
    Se se = se_block(commuted);
    const std::vector<RewrittenPattern> fused = fuse_input_scales(se.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "project");
    CHECK(fused[0].removed == "channel scale 'mul'");
    CHECK(se.b.g.ops.size() == 5);  // the Mul is gone
    const Operator& conv = op_named(se.b.g, "project");
    CHECK(conv.attrs.fused_input_scale);
    REQUIRE(conv.inputs.size() == 4);  // X, W, the zero bias added, S
    CHECK(conv.inputs[0] == se.x);
    CHECK(conv.inputs[3] == se.s);
    const TensorInfo& bias = se.b.g.tensors[static_cast<size_t>(conv.inputs[2])];
    CHECK(bias.is_weight);
    CHECK(bias.shape == Shape{5});
    CHECK(bias.weight == std::vector<float>(5, 0.0f));
  }
}

TEST_CASE("fuse_input_scales leaves near misses alone") {
  SUBCASE("a 3x3 conv reads the product") {
    Se se = se_block(false, 2, 3);
    CHECK(fuse_input_scales(se.b.g).empty());
  }
  SUBCASE("a strided 1x1 conv reads the product") {
    Se se = se_block(false, 2, 1, 2);
    CHECK(fuse_input_scales(se.b.g).empty());
  }
  SUBCASE("the product is also a graph output") {
    Se se = se_block(false);
    se.b.g.outputs.push_back(se.product);
    CHECK(fuse_input_scales(se.b.g).empty());
  }
  SUBCASE("the product has a second reader") {
    Se se = se_block(false);
    se.b.g.outputs = {se.y, se.b.op(OpType::Relu, {se.product}, {}, "relu")};
    CHECK(fuse_input_scales(se.b.g).empty());
  }
  SUBCASE("the scale is not per channel") {
    Se se = se_block(false, 2, 1, 1, {2, 8, 6, 1});
    CHECK(fuse_input_scales(se.b.g).empty());
  }
  SUBCASE("a constant scale (no SE block; left to the Mul)") {
    GraphBuilder b;
    const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
    const int32_t x = b.input("in", {1, 8, 4, 4});
    const int32_t m = b.op(OpType::Mul, {x, b.weight("s", {1, 8, 1, 1})}, {}, "mul");
    b.g.outputs = {b.op(OpType::Conv, {m, b.weight("w", {3, 8, 1, 1})}, one, "project")};
    CHECK(fuse_input_scales(b.g).empty());
  }
}

TEST_CASE("compile_graph fuses the scale, a shared [1, C, 1, 1] one too, and reports it") {
  Se se = se_block(false, 3);
  CompileReport report;
  const TileGraph tg = compile_graph(se.b.g, kOptions, &report);
  bool found = false;
  for (size_t i = 0; i < tg.ops.size(); ++i)
    if (tg.ops[i].name == "project") {
      found = true;
      CHECK(tg.ops[i].attrs.fused_input_scale);
      CHECK(report.ops[i].note.find("channel scale 'mul' fused in") != std::string::npos);
    }
  CHECK(found);
  CompileOptions off = kOptions;
  off.fuse_patterns = false;
  const TileGraph unfused = compile_graph(se.b.g, off, nullptr);
  for (const Operator& op : unfused.ops) CHECK_FALSE(op.attrs.fused_input_scale);

  Se shared = se_block(false, 3, 1, 1, {1, 8, 1, 1});
  const TileGraph tg_shared = compile_graph(shared.b.g, kOptions, nullptr);
  int fused_convs = 0;
  for (const Operator& op : tg_shared.ops) fused_convs += op.attrs.fused_input_scale;
  CHECK(fused_convs == 1);
}
