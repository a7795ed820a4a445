// Inverted-residual expansion fusion (graph/fuse_expand_depthwise.hpp): a
// 1x1 Conv read only by a depthwise Conv becomes that conv's fused
// expansion, where the expanded map is 1 MiB or more per image; the near
// misses it must leave alone; the fused op's shape and tile dependencies.
#include <doctest/doctest.h>

#include <string>

#include "graph/compiler.hpp"
#include "graph/dependency.hpp"
#include "graph/fuse_expand_depthwise.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

struct Block {
  GraphBuilder b;
  int32_t x = -1, expanded = -1, dw = -1, y = -1, ew = -1;
};

// in [1, 8, side, side] -> Relu -> Conv 1x1 (8 -> channels, Clip) -> depthwise 3x3
// (stride, pad 1, ReLU) -> Conv 1x1 (channels -> 8). `expand_stride` 2
// makes the expansion strided; `dw_group` other than channels makes the 3x3
// conv not depthwise.
Block block(int64_t side, int64_t channels = 64, int64_t stride = 1, int64_t expand_stride = 1,
            int64_t dw_group = 0) {
  Block k;
  GraphBuilder& b = k.b;
  // A stem op: the block's input is not the model input, which stays NCHW.
  k.x = b.op(OpType::Relu, {b.input("in", {1, 8, side, side})}, {}, "stem");
  OpAttributes expand = spatial_attrs({1, 1}, {expand_stride, expand_stride}, {0, 0, 0, 0}, {1, 1});
  expand.activation = Activation::Clip;
  expand.clip_min = 0.0f;
  expand.clip_max = 6.0f;
  k.ew = b.weight("ew", {channels, 8, 1, 1});
  k.expanded = b.op(OpType::Conv, {k.x, k.ew, b.weight("eb", {channels})}, expand, "expand");
  OpAttributes dw = spatial_attrs({3, 3}, {stride, stride}, {1, 1, 1, 1}, {1, 1});
  dw.group = dw_group > 0 ? dw_group : channels;
  dw.activation = Activation::Relu;
  k.dw = b.op(OpType::Conv, {k.expanded, b.weight("w", {channels, channels / dw.group, 3, 3})}, dw,
              "dw");
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  k.y = b.op(OpType::Conv, {k.dw, b.weight("pw", {8, channels, 1, 1})}, one, "project");
  b.g.outputs = {k.y};
  return k;
}

}  // namespace

TEST_CASE("fuse_expand_depthwise: the expansion becomes the depthwise conv's last two inputs") {
  for (int64_t stride : {1, 2}) {
    CAPTURE(stride);
    Block k = block(64, 64, stride);  // 64 × 64 × 64 floats: 1 MiB
    const std::vector<RewrittenPattern> fused = fuse_expand_depthwise(k.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "dw");
    CHECK(fused[0].removed == "expansion conv 'expand'");
    CHECK(k.b.g.ops.size() == 3);  // stem, dw, project
    const Operator& dw = op_named(k.b.g, "dw");
    CHECK(dw.attrs.fused_expand);
    CHECK(dw.attrs.expand_activation == Activation::Clip);
    CHECK(dw.attrs.expand_clip_min == 0.0f);
    CHECK(dw.attrs.expand_clip_max == 6.0f);
    CHECK(dw.attrs.activation == Activation::Relu);  // its own, untouched
    REQUIRE(dw.inputs.size() == 5);                  // X, W, the zero bias added, EW, EB
    CHECK(dw.inputs[0] == k.x);
    CHECK(dw.inputs[3] == k.ew);
    CHECK(expand_weight_input(dw.attrs) == 3);
    const TensorInfo& bias = k.b.g.tensors[static_cast<size_t>(dw.inputs[2])];
    CHECK(bias.weight == std::vector<float>(64, 0.0f));
    // The fused op's shape is the depthwise conv's.
    std::vector<Shape> shapes;
    for (int32_t t : dw.inputs) shapes.push_back(k.b.shape(t));
    CHECK(infer_output_shape(dw, shapes) == k.b.shape(k.dw));
  }
}

TEST_CASE("fuse_expand_depthwise leaves near misses alone") {
  SUBCASE("an expanded map under 1 MiB stays in L2 unfused") {
    Block k = block(63);
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("the expansion reads the model input (NCHW)") {
    Block k = block(64);
    for (Operator& op : k.b.g.ops)
      if (op.name == "expand") op.inputs[0] = k.b.g.inputs[0];
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("the depthwise output is a model output (NCHW)") {
    Block k = block(64);
    k.b.g.outputs.push_back(k.dw);
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("the expansion is also a graph output") {
    Block k = block(64);
    k.b.g.outputs.push_back(k.expanded);
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("the expansion has a second reader") {
    Block k = block(64);
    k.b.g.outputs = {k.y, k.b.op(OpType::Relu, {k.expanded}, {}, "relu")};
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("a strided expansion") {
    Block k = block(128, 64, 1, 2);
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("a grouped, not depthwise, 3x3 conv reads it") {
    Block k = block(64, 64, 1, 1, 32);
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
  SUBCASE("a pruned expansion (60% zeros) keeps its sparse kernel") {
    Block k = block(64);
    std::vector<float>& w = k.b.g.tensors[static_cast<size_t>(k.ew)].weight;
    for (size_t i = 0; i < w.size(); ++i)
      if (i % 5 < 3) w[i] = 0.0f;
    CHECK(fuse_expand_depthwise(k.b.g).empty());
  }
}

TEST_CASE("a fused expansion's tiles read every input channel of their window's rows") {
  Block k = block(64, 64, 2);
  REQUIRE(fuse_expand_depthwise(k.b.g).size() == 1);
  const Operator& dw = op_named(k.b.g, "dw");
  std::vector<Shape> shapes;
  for (int32_t t : dw.inputs) shapes.push_back(k.b.shape(t));
  const Shape out = infer_output_shape(dw, shapes);
  REQUIRE(out == Shape{1, 64, 32, 32});
  // Output rows 4..7, channels 16..31, all columns: input rows 7..15 (stride
  // 2, pad 1, 3 taps), all 8 channels of X, EW's and EB's rows 16..31.
  const Region tile{{0, 16, 4, 0}, {1, 32, 8, 32}};
  bool saw_x = false, saw_ew = false, saw_eb = false;
  for (const InputDependency& d : tile_dependencies(dw, shapes, out, tile)) {
    if (d.operand == 0) {
      saw_x = true;
      CHECK(d.region.begin == std::vector<int64_t>{0, 0, 7, 0});
      CHECK(d.region.end == std::vector<int64_t>{1, 8, 16, 64});
    }
    if (d.operand == 3) {
      saw_ew = true;
      CHECK(d.region.begin == std::vector<int64_t>{16, 0, 0, 0});
      CHECK(d.region.end == std::vector<int64_t>{32, 8, 1, 1});
    }
    if (d.operand == 4) {
      saw_eb = true;
      CHECK(d.region.begin == std::vector<int64_t>{16});
      CHECK(d.region.end == std::vector<int64_t>{32});
    }
  }
  CHECK(saw_x);
  CHECK(saw_ew);
  CHECK(saw_eb);
}

TEST_CASE("compile_graph fuses expansions unless told not to, and reports it") {
  const CompileOptions on{.tiles = 2, .threads = 2, .target = "test"};
  Block k = block(64);
  CompileReport report;
  const TileGraph tg = compile_graph(k.b.g, on, &report);
  bool found = false;
  for (size_t i = 0; i < tg.ops.size(); ++i)
    if (tg.ops[i].name == "dw") {
      found = true;
      CHECK(tg.ops[i].attrs.fused_expand);
      CHECK(report.ops[i].note.find("expansion conv 'expand' fused in") != std::string::npos);
    }
  CHECK(found);
  CompileOptions off = on;
  off.fuse_expand_depthwise = false;
  for (const Operator& op : compile_graph(k.b.g, off, nullptr).ops)
    CHECK_FALSE(op.attrs.fused_expand);
}
