// The pattern passes of issue 5: MatMul + bias fusion, GELU and decomposed
// LayerNorm recognition. Each rewrite is checked on the graphs exporters
// write (every operand order they use) and refused where it would change
// what is computed: a value read elsewhere, a wrong constant, a bias that is
// not a constant vector, a reduction over the wrong axis.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "graph/compiler.hpp"
#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/fuse_gelu.hpp"
#include "graph/fuse_layer_norm.hpp"
#include "graph/fuse_matmul_bias.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

int32_t constant(GraphBuilder& b, const std::string& name, Shape shape, float value) {
  const int32_t t = b.tensor(name, shape);
  TensorInfo& info = b.g.tensors.back();
  info.is_weight = true;
  info.weight.assign(static_cast<size_t>(shape_numel(shape)), value);
  return t;
}

const CompileOptions kOptions{.tiles = 2, .threads = 2, .target = "test"};

// ---------------------------------------------------------------- MatMul + bias

struct Linear {
  GraphBuilder b;
  int32_t x = -1, matmul = -1;
};

Linear linear(Shape x_shape, int64_t n) {
  Linear l;
  l.x = l.b.input("x", x_shape);
  l.matmul = l.b.op(OpType::MatMul, {l.x, l.b.weight("w", {x_shape.back(), n})}, {}, "matmul");
  return l;
}

}  // namespace

TEST_CASE("fuse_matmul_bias: Add(MatMul(A, W), b) in either order, b as [N] or [1, 1, N]") {
  for (int form = 0; form < 4; ++form) {
    CAPTURE(form);
    Linear l = linear({2, 3, 5}, 7);
    const Shape bias_shape = form < 2 ? Shape{7} : Shape{1, 1, 7};
    const int32_t bias = l.b.weight("b", bias_shape);
    const std::vector<float> bias_values = l.b.g.tensors[static_cast<size_t>(bias)].weight;
    const int32_t y = form % 2 == 0 ? l.b.op(OpType::Add, {l.matmul, bias}, {}, "add")
                                    : l.b.op(OpType::Add, {bias, l.matmul}, {}, "add");
    l.b.g.outputs = {y};
    const std::vector<RewrittenPattern> fused = fuse_matmul_bias(l.b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "matmul");
    CHECK(fused[0].removed == "bias Add 'add'");
    REQUIRE(l.b.g.ops.size() == 1);
    const Operator& mm = l.b.g.ops[0];
    REQUIRE(mm.inputs.size() == 3);
    CHECK(mm.outputs[0] == y);
    const TensorInfo& fused_bias = l.b.g.tensors[static_cast<size_t>(mm.inputs[2])];
    CHECK(fused_bias.shape == Shape{7});
    CHECK(fused_bias.weight == bias_values);
    check_graph(l.b.g);  // shapes still consistent
  }
}

TEST_CASE("fuse_matmul_bias leaves the graph alone where the bias cannot be fused") {
  SUBCASE("the MatMul output has a second consumer") {
    Linear l = linear({4, 5}, 3);
    const int32_t y = l.b.op(OpType::Add, {l.matmul, l.b.weight("b", {3})});
    const int32_t r = l.b.op(OpType::Relu, {l.matmul});
    l.b.g.outputs = {y, r};
    CHECK(fuse_matmul_bias(l.b.g).empty());
    CHECK(l.b.g.ops.size() == 3);
  }
  SUBCASE("the MatMul output is a graph output") {
    Linear l = linear({4, 5}, 3);
    const int32_t y = l.b.op(OpType::Add, {l.matmul, l.b.weight("b", {3})});
    l.b.g.outputs = {y, l.matmul};
    CHECK(fuse_matmul_bias(l.b.g).empty());
  }
  SUBCASE("the bias is not a constant") {
    Linear l = linear({4, 5}, 3);
    l.b.g.outputs = {l.b.op(OpType::Add, {l.matmul, l.b.input("b", {3})})};
    CHECK(fuse_matmul_bias(l.b.g).empty());
  }
  SUBCASE("the addend is per row or full, not per column") {
    for (const Shape& s : {Shape{4, 1}, Shape{4, 3}, Shape{1}}) {
      Linear l = linear({4, 5}, 3);
      l.b.g.outputs = {l.b.op(OpType::Add, {l.matmul, l.b.weight("b", s)})};
      CHECK(fuse_matmul_bias(l.b.g).empty());
    }
  }
  SUBCASE("the bias adds dims to the output") {
    Linear l = linear({4, 5}, 3);
    l.b.g.outputs = {l.b.op(OpType::Add, {l.matmul, l.b.weight("b", {1, 1, 3})})};
    CHECK(fuse_matmul_bias(l.b.g).empty());
  }
  SUBCASE("W is not a constant") {
    GraphBuilder b;
    const int32_t mm = b.op(OpType::MatMul, {b.input("x", {4, 5}), b.input("w", {5, 3})});
    b.g.outputs = {b.op(OpType::Add, {mm, b.weight("b", {3})})};
    CHECK(fuse_matmul_bias(b.g).empty());
  }
  SUBCASE("A is a vector") {
    GraphBuilder b;
    const int32_t mm = b.op(OpType::MatMul, {b.input("x", {5}), b.weight("w", {5, 3})});
    b.g.outputs = {b.op(OpType::Add, {mm, b.weight("b", {3})})};
    CHECK(fuse_matmul_bias(b.g).empty());
  }
}

TEST_CASE("compile_graph fuses bias and a following activation into the MatMul, and says so") {
  Linear l = linear({2, 3, 5}, 4);
  const int32_t y = l.b.op(OpType::Add, {l.b.weight("b", {4}), l.matmul}, {}, "add");
  l.b.g.outputs = {l.b.op(OpType::Relu, {y}, {}, "relu")};
  CompileReport report;
  const TileGraph tg = compile_graph(l.b.g, kOptions, &report);
  REQUIRE(tg.ops.size() == 1);
  CHECK(tg.ops[0].inputs.size() == 3);
  CHECK(tg.ops[0].attrs.activation == Activation::Relu);
  CHECK(report.ops[0].note.find("bias Add 'add' fused in") != std::string::npos);
  CHECK(std::any_of(report.notes.begin(), report.notes.end(), [](const std::string& n) {
    return n.find("1 bias Add(s) fused into MatMul epilogues") != std::string::npos;
  }));
  // Off: the Add stays, and so does the Relu (an Add has no epilogue).
  CompileOptions off = kOptions;
  off.fuse_patterns = false;
  CHECK(compile_graph(l.b.g, off, nullptr).ops.size() == 3);
}

TEST_CASE("op_shape and dependencies of a MatMul with a fused bias") {
  Operator op = make_op(OpType::MatMul);
  CHECK(infer_output_shape(op, {{2, 3, 5}, {5, 4}, {4}}) == Shape{2, 3, 4});
  CHECK_THROWS_WITH_AS(infer_output_shape(op, {{2, 3, 5}, {5, 4}, {1, 4}}),
                       doctest::Contains("fused bias"), tessera::Error);
  CHECK_THROWS_AS(infer_output_shape(op, {{2, 3, 5}, {5, 4}, {3}}), tessera::Error);
  CHECK_THROWS_AS(infer_output_shape(op, {{2, 5, 5}, {2, 5, 4}, {4}}), tessera::Error);
  // A tile of columns [1, 3) reads bias[1:3].
  const std::vector<InputDependency> deps =
      tile_dependencies(op, {{2, 3, 5}, {5, 4}, {4}}, {2, 3, 4}, Region{{0, 1, 1}, {2, 3, 3}});
  REQUIRE(deps.size() == 3);
  CHECK(deps[2].operand == 2);
  CHECK(deps[2].region == Region{{1}, {3}});
}

// ---------------------------------------------------------------- GELU

namespace {

enum class GeluForm { kBertErf, kTorchErf, kTanhPow, kTanhCube, kTanhCubeNested };

// x (a MatMul output) through one exported GELU form; returns its output.
// `perturb` is added to one of its constants.
int32_t gelu_chain(GraphBuilder& b, int32_t x, GeluForm form, float perturb = 0.0f) {
  auto c = [&](float v) {
    std::string name = "c";
    name += std::to_string(b.g.tensors.size());
    return constant(b, name, {1}, v);
  };
  switch (form) {
    case GeluForm::kBertErf: {  // x * (1 + erf(x / sqrt 2)) * 0.5
      const int32_t e = b.op(OpType::Erf, {b.op(OpType::Div, {x, c(1.4142135f + perturb)})});
      const int32_t s = b.op(OpType::Add, {e, c(1.0f)});
      return b.op(OpType::Mul, {b.op(OpType::Mul, {x, s}), c(0.5f)});
    }
    case GeluForm::kTorchErf: {  // (0.5 * x) * (1 + erf(0.70710677 * x))
      const int32_t e = b.op(OpType::Erf, {b.op(OpType::Mul, {c(0.70710677f + perturb), x})});
      const int32_t s = b.op(OpType::Add, {c(1.0f), e});
      return b.op(OpType::Mul, {b.op(OpType::Mul, {c(0.5f), x}), s});
    }
    default: {  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
      int32_t cube = -1;
      if (form == GeluForm::kTanhPow)
        cube = b.op(OpType::Pow, {x, c(3.0f)});
      else if (form == GeluForm::kTanhCube)
        cube = b.op(OpType::Mul, {b.op(OpType::Mul, {x, x}), x});
      else
        cube = b.op(OpType::Mul, {x, b.op(OpType::Mul, {x, x})});
      const int32_t term = b.op(OpType::Mul, {cube, c(0.044715f + perturb)});
      const int32_t inner = b.op(OpType::Add, {x, term});
      const int32_t t = b.op(OpType::Tanh, {b.op(OpType::Mul, {inner, c(0.7978845608f)})});
      return b.op(OpType::Mul, {b.op(OpType::Mul, {x, c(0.5f)}), b.op(OpType::Add, {t, c(1.0f)})});
    }
  }
}

bool is_tanh(GeluForm f) {
  return f != GeluForm::kBertErf && f != GeluForm::kTorchErf;
}

}  // namespace

TEST_CASE("fuse_gelu recognises the erf and tanh forms exporters write") {
  for (GeluForm form : {GeluForm::kBertErf, GeluForm::kTorchErf, GeluForm::kTanhPow,
                        GeluForm::kTanhCube, GeluForm::kTanhCubeNested}) {
    CAPTURE(static_cast<int>(form));
    GraphBuilder b;
    const int32_t x = b.op(OpType::Relu, {b.input("x", {3, 8})});
    const int32_t y = gelu_chain(b, x, form);
    b.g.outputs = {y};
    const std::vector<RewrittenPattern> fused = fuse_gelu(b.g);
    REQUIRE(fused.size() == 1);
    REQUIRE(b.g.ops.size() == 2);  // Relu, Gelu
    const Operator& gelu = b.g.ops[1];
    CHECK(gelu.type == OpType::Gelu);
    CHECK(gelu.attrs.gelu_tanh == is_tanh(form));
    CHECK(gelu.inputs == std::vector<int32_t>{x});
    CHECK(gelu.outputs == std::vector<int32_t>{y});
    check_graph(b.g);
  }
}

TEST_CASE("fuse_gelu leaves near misses alone") {
  for (GeluForm form : {GeluForm::kBertErf, GeluForm::kTorchErf, GeluForm::kTanhPow}) {
    CAPTURE(static_cast<int>(form));
    {  // a constant off by 1e-3
      GraphBuilder b;
      const int32_t x = b.op(OpType::Relu, {b.input("x", {3, 8})});
      b.g.outputs = {gelu_chain(b, x, form, 1e-3f)};
      CHECK(fuse_gelu(b.g).empty());
    }
    {  // an intermediate value is read elsewhere
      GraphBuilder b;
      const int32_t x = b.op(OpType::Relu, {b.input("x", {3, 8})});
      const int32_t y = gelu_chain(b, x, form);
      // The op right after x's first reader: Div/Mul (erf forms) or Pow.
      const int32_t inside = b.g.ops[1].outputs[0];
      b.g.outputs = {y, b.op(OpType::Sigmoid, {inside})};
      CHECK(fuse_gelu(b.g).empty());
    }
  }
  {  // erf's argument is not the multiplied x
    GraphBuilder b;
    const int32_t x = b.op(OpType::Relu, {b.input("x", {3, 8})});
    const int32_t other = b.input("other", {3, 8});
    const int32_t e =
        b.op(OpType::Erf, {b.op(OpType::Div, {other, constant(b, "r2", {}, 1.4142135f)})});
    const int32_t s = b.op(OpType::Add, {e, constant(b, "one", {}, 1.0f)});
    b.g.outputs = {b.op(OpType::Mul, {b.op(OpType::Mul, {x, s}), constant(b, "half", {}, 0.5f)})};
    CHECK(fuse_gelu(b.g).empty());
  }
}

TEST_CASE("compile_graph turns Linear + GELU into one MatMul with bias and GELU epilogue") {
  for (GeluForm form : {GeluForm::kBertErf, GeluForm::kTanhPow}) {
    Linear l = linear({1, 6, 8}, 16);
    const int32_t h = l.b.op(OpType::Add, {l.matmul, l.b.weight("b", {16})}, {}, "add");
    l.b.g.outputs = {gelu_chain(l.b, h, form)};
    CompileReport report;
    const TileGraph tg = compile_graph(l.b.g, kOptions, &report);
    REQUIRE(tg.ops.size() == 1);
    CHECK(tg.ops[0].type == OpType::MatMul);
    CHECK(tg.ops[0].inputs.size() == 3);
    CHECK(tg.ops[0].attrs.activation == (is_tanh(form) ? Activation::GeluTanh : Activation::Gelu));
    CHECK(std::any_of(report.notes.begin(), report.notes.end(), [](const std::string& n) {
      return n.find("1 GELU chain(s) replaced by Gelu") != std::string::npos;
    }));
  }
}

TEST_CASE("a Gelu never fuses into a Conv (its kernels have no GELU epilogue)") {
  GraphBuilder b;
  const auto one = spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  const int32_t y =
      b.op(OpType::Conv, {b.input("x", {1, 2, 3, 3}), b.weight("w", {4, 2, 1, 1})}, one, "conv");
  b.g.outputs = {b.op(OpType::Gelu, {y})};
  const TileGraph tg = compile_graph(b.g, kOptions, nullptr);
  CHECK(tg.ops.size() == 2);
  Operator conv = make_op(OpType::Conv, one);
  conv.attrs.activation = Activation::Gelu;
  CHECK_THROWS_AS(infer_output_shape(conv, {{1, 2, 3, 3}, {4, 2, 1, 1}}), tessera::Error);
}

// ---------------------------------------------------------------- LayerNorm

namespace {

struct LayerNormOptions {
  bool square_by_mul = false;
  bool commuted = false;
  Shape gamma_shape{8};
  int64_t axis = 2;  // of the ReduceMeans
  bool eps_input = false;
  bool extra_reader = false;
};

// PyTorch's LayerNorm decomposition of x [2, 5, 8]; returns (graph, x, y).
GraphBuilder decomposed_layer_norm(const LayerNormOptions& o, int32_t& x, int32_t& y) {
  GraphBuilder b;
  x = b.op(OpType::Relu, {b.input("x", {2, 5, 8})});
  OpAttributes mean_attrs;
  mean_attrs.axes = {o.axis};
  mean_attrs.keepdims = true;
  const int32_t mean = b.op(OpType::ReduceMean, {x}, mean_attrs);
  const int32_t d = b.op(OpType::Sub, {x, mean});
  const int32_t sq = o.square_by_mul ? b.op(OpType::Mul, {d, d})
                                     : b.op(OpType::Pow, {d, constant(b, "two", {}, 2.0f)});
  const int32_t var = b.op(OpType::ReduceMean, {sq}, mean_attrs);
  const int32_t eps = o.eps_input ? b.input("eps", {1}) : constant(b, "eps", {}, 1e-12f);
  const int32_t sd = b.op(
      OpType::Sqrt, {o.commuted ? b.op(OpType::Add, {eps, var}) : b.op(OpType::Add, {var, eps})});
  const int32_t normed = b.op(OpType::Div, {d, sd});
  const int32_t gamma = b.weight("gamma", o.gamma_shape), beta = b.weight("beta", {8});
  const int32_t scaled =
      o.commuted ? b.op(OpType::Mul, {gamma, normed}) : b.op(OpType::Mul, {normed, gamma});
  y = o.commuted ? b.op(OpType::Add, {beta, scaled}, {}, "ln_out")
                 : b.op(OpType::Add, {scaled, beta}, {}, "ln_out");
  b.g.outputs = {y};
  if (o.extra_reader) b.g.outputs.push_back(b.op(OpType::Tanh, {d}));
  return b;
}

}  // namespace

TEST_CASE("fuse_layer_norm recognises PyTorch's decomposition (Pow or Mul, commuted operands)") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    LayerNormOptions o;
    o.square_by_mul = variant & 1;
    o.commuted = variant & 2;
    if (variant == 3) o.gamma_shape = {1, 1, 8};
    int32_t x = -1, y = -1;
    GraphBuilder b = decomposed_layer_norm(o, x, y);
    const std::vector<RewrittenPattern> fused = fuse_layer_norm(b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "ln_out");
    REQUIRE(b.g.ops.size() == 2);  // Relu, LayerNormalization
    const Operator& ln = b.g.ops[1];
    CHECK(ln.type == OpType::LayerNormalization);
    CHECK(ln.attrs.axis == 2);
    CHECK(ln.attrs.epsilon == 1e-12f);
    REQUIRE(ln.inputs.size() == 3);
    CHECK(ln.inputs[0] == x);
    CHECK(ln.outputs[0] == y);
    const TensorInfo& g = b.g.tensors[static_cast<size_t>(ln.inputs[1])];
    const TensorInfo& be = b.g.tensors[static_cast<size_t>(ln.inputs[2])];
    CHECK(g.shape == Shape{8});
    CHECK(be.shape == Shape{8});
    CHECK(g.name.rfind("gamma", 0) == 0);
    CHECK(be.name == "beta");
    check_graph(b.g);
  }
}

TEST_CASE("fuse_layer_norm leaves near misses alone") {
  auto unchanged = [](const LayerNormOptions& o) {
    int32_t x = -1, y = -1;
    GraphBuilder b = decomposed_layer_norm(o, x, y);
    const size_t ops = b.g.ops.size();
    CHECK(fuse_layer_norm(b.g).empty());
    CHECK(b.g.ops.size() == ops);
  };
  LayerNormOptions o;
  o.axis = 1;  // not the last axis
  unchanged(o);
  o = {};
  o.eps_input = true;  // epsilon not a constant
  unchanged(o);
  o = {};
  o.extra_reader = true;  // the centred value is read elsewhere
  unchanged(o);
  o = {};
  o.gamma_shape = {5, 8};  // gamma is not per feature
  unchanged(o);
}
