// SiLU fusion (graph/fuse_silu.hpp): Mul(x, Sigmoid(x)) into the Conv, Gemm
// or MatMul producing x, in either operand order, and the near misses it
// must leave alone (the Sigmoid or x read elsewhere, a graph output, a Mul
// of different tensors, a producer with no epilogue), which the compile
// report then names with the reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "graph/fuse_silu.hpp"
#include "graph/op_shape.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

const CompileOptions kOptions{.tiles = 2, .threads = 2, .target = "test"};

struct Silu {
  GraphBuilder b;
  int32_t x = -1, sigmoid = -1, y = -1;
};

// conv -> Sigmoid -> Mul(x, s) (or Mul(s, x) when `commuted`).
Silu conv_silu(bool commuted) {
  Silu s;
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  s.x = s.b.op(OpType::Conv, {s.b.input("in", {1, 3, 4, 4}), s.b.weight("w", {5, 3, 1, 1})}, one,
               "conv");
  s.sigmoid = s.b.op(OpType::Sigmoid, {s.x}, {}, "sigmoid");
  s.y = commuted ? s.b.op(OpType::Mul, {s.sigmoid, s.x}, {}, "mul")
                 : s.b.op(OpType::Mul, {s.x, s.sigmoid}, {}, "mul");
  return s;
}

bool has_note(const CompileReport& report, const std::string& text) {
  return std::any_of(report.notes.begin(), report.notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("fuse_silu: Mul(x, Sigmoid(x)) in either order becomes the Conv's Silu epilogue") {
  for (bool commuted : {false, true}) {
    CAPTURE(commuted);
    Silu s = conv_silu(commuted);
    s.b.g.outputs = {s.y};
    std::vector<UnfusedSilu> unfused;
    const std::vector<RewrittenPattern> fused = fuse_silu(s.b.g, &unfused);
    REQUIRE(fused.size() == 1);
    CHECK(unfused.empty());
    CHECK(fused[0].op == "conv");
    REQUIRE(s.b.g.ops.size() == 1);
    CHECK(s.b.g.ops[0].type == OpType::Conv);
    CHECK(s.b.g.ops[0].attrs.activation == Activation::Silu);
    CHECK(s.b.g.ops[0].outputs == std::vector<int32_t>{s.y});
  }
}

TEST_CASE("fuse_silu into Gemm and MatMul; compile_graph reports it") {
  for (OpType type : {OpType::Gemm, OpType::MatMul}) {
    CAPTURE(op_type_name(type));
    GraphBuilder b;
    const int32_t x = b.op(type, {b.input("a", {3, 6}), b.weight("w", {6, 7})}, {}, "linear");
    const int32_t s = b.op(OpType::Sigmoid, {x}, {}, "sig");
    b.g.outputs = {b.op(OpType::Mul, {s, x}, {}, "mul")};
    CompileReport report;
    const TileGraph tg = compile_graph(b.g, kOptions, &report);
    REQUIRE(tg.ops.size() == 1);
    CHECK(tg.ops[0].attrs.activation == Activation::Silu);
    CHECK(report.ops[0].note.find("SiLU 'sig' * 'mul' fused in") != std::string::npos);
    CHECK(has_note(report, "1 SiLU(s) Mul(x, Sigmoid(x)) fused into epilogues"));
    // --no-pattern-fusion: all three stay (x has two readers, so the
    // Sigmoid cannot fuse into the producer on its own).
    CompileOptions off = kOptions;
    off.fuse_patterns = false;
    CHECK(compile_graph(b.g, off, nullptr).ops.size() == 3);
  }
}

TEST_CASE("fuse_silu leaves near misses alone") {
  SUBCASE("the Sigmoid is read twice") {
    Silu s = conv_silu(false);
    s.b.g.outputs = {s.y, s.b.op(OpType::Relu, {s.sigmoid})};
    CHECK(fuse_silu(s.b.g).empty());
    CHECK(s.b.g.ops.size() == 4);
  }
  SUBCASE("the Sigmoid is a graph output") {
    Silu s = conv_silu(true);
    s.b.g.outputs = {s.y, s.sigmoid};
    CHECK(fuse_silu(s.b.g).empty());
  }
  SUBCASE("Mul of different tensors (squeeze-excitation's x * Sigmoid(se))") {
    GraphBuilder b;
    const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
    const int32_t x =
        b.op(OpType::Conv, {b.input("in", {1, 3, 4, 4}), b.weight("w", {5, 3, 1, 1})}, one, "c");
    const int32_t x2 =
        b.op(OpType::Conv, {b.input("in2", {1, 3, 4, 4}), b.weight("w2", {5, 3, 1, 1})}, one);
    b.g.outputs = {b.op(OpType::Mul, {x, b.op(OpType::Sigmoid, {x2})})};
    CHECK(fuse_silu(b.g).empty());
    CHECK(b.g.ops.size() == 4);
  }
  SUBCASE("x is also a graph output or read by another op") {
    for (bool as_output : {true, false}) {
      Silu s = conv_silu(false);
      s.b.g.outputs = {s.y};
      if (as_output)
        s.b.g.outputs.push_back(s.x);
      else
        s.b.g.outputs.push_back(s.b.op(OpType::Relu, {s.x}));
      std::vector<UnfusedSilu> unfused;
      CHECK(fuse_silu(s.b.g, &unfused).empty());
      REQUIRE(unfused.size() == 1);
      CHECK(unfused[0].mul == "mul");
      CHECK(unfused[0].reason.find("other readers") != std::string::npos);
    }
  }
  SUBCASE("x has no epilogue producer: graph input, Add; the report says why") {
    GraphBuilder b;
    const int32_t in = b.input("in", {2, 8});
    const int32_t sum = b.op(OpType::Add, {in, in}, {}, "add");
    const int32_t s1 = b.op(OpType::Sigmoid, {in}, {}, "sig1");
    const int32_t y1 = b.op(OpType::Mul, {in, s1}, {}, "mul_input");
    const int32_t s2 = b.op(OpType::Sigmoid, {sum}, {}, "sig2");
    const int32_t y2 = b.op(OpType::Mul, {s2, sum}, {}, "mul_add");
    b.g.outputs = {y1, y2};
    CompileReport report;
    const TileGraph tg = compile_graph(b.g, kOptions, &report);
    CHECK(tg.ops.size() == 5);
    CHECK(has_note(report, "SiLU 'mul_input' not fused: x is a graph input"));
    CHECK(
        has_note(report, "SiLU 'mul_add' not fused: x is produced by Add, which has no epilogue"));
  }
  SUBCASE("the producer already has an activation") {
    Silu s = conv_silu(false);
    s.b.g.ops[0].attrs.activation = Activation::Relu;
    s.b.g.outputs = {s.y};
    std::vector<UnfusedSilu> unfused;
    CHECK(fuse_silu(s.b.g, &unfused).empty());
    REQUIRE(unfused.size() == 1);
    CHECK(unfused[0].reason.find("already has a fused activation") != std::string::npos);
  }
}

TEST_CASE("a residual Add then SiLU all fuse into one Conv (residual before the activation)") {
  GraphBuilder b;
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  const int32_t in = b.input("in", {1, 4, 3, 3});
  const int32_t conv = b.op(OpType::Conv, {in, b.weight("w", {4, 4, 1, 1})}, one, "conv");
  const int32_t sum = b.op(OpType::Add, {conv, in}, {}, "add");
  const int32_t s = b.op(OpType::Sigmoid, {sum}, {}, "sig");
  b.g.outputs = {b.op(OpType::Mul, {sum, s}, {}, "mul")};
  const TileGraph tg = compile_graph(b.g, kOptions, nullptr);
  REQUIRE(tg.ops.size() == 1);
  CHECK(tg.ops[0].attrs.fused_residual);
  CHECK(tg.ops[0].attrs.activation == Activation::Silu);
}

TEST_CASE("op_shape: a Conv may carry Silu, not GELU") {
  Operator conv = make_op(OpType::Conv, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}));
  conv.attrs.activation = Activation::Silu;
  CHECK(infer_output_shape(conv, {{1, 2, 3, 3}, {4, 2, 1, 1}}) == Shape{1, 4, 3, 3});
  conv.attrs.activation = Activation::GeluTanh;
  CHECK_THROWS_AS(infer_output_shape(conv, {{1, 2, 3, 3}, {4, 2, 1, 1}}), tessera::Error);
}
