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

TEST_CASE("a GELU after Reshape(Gemm) fuses into the Gemm; the Reshape writes its output (GPT-2)") {
  // torch.onnx.export's GPT-2 MLP: Reshape [S, D] -> Gemm -> Reshape [1, S, 4D] -> tanh GELU.
  struct Mlp {
    GraphBuilder b;
    int32_t gemm = -1, unflat = -1, gelu = -1;
  };
  auto build = []() {
    Mlp m;
    OpAttributes flat, back;
    flat.new_shape = {6, 8};
    back.new_shape = {1, 6, 16};
    const int32_t h = m.b.op(OpType::Reshape, {m.b.input("x", {1, 6, 8})}, flat, "flat");
    m.gemm = m.b.op(OpType::Gemm, {h, m.b.weight("w", {8, 16}), m.b.weight("c", {16})}, {}, "gemm");
    m.unflat = m.b.op(OpType::Reshape, {m.gemm}, back, "unflat");
    m.gelu = gelu_chain(m.b, m.unflat, GeluForm::kTanhPow);
    return m;
  };
  {
    Mlp m = build();
    m.b.g.outputs = {m.gelu};
    CompileReport report;
    const TileGraph tg = compile_graph(m.b.g, kOptions, &report);
    REQUIRE(tg.ops.size() == 3);  // flat, gemm (+GELU), unflat
    CHECK(tg.ops[1].name == "gemm");
    CHECK(tg.ops[1].attrs.activation == Activation::GeluTanh);
    CHECK(tg.ops[2].name == "unflat");
    CHECK(tg.ops[2].inputs[0] == tg.ops[1].outputs[0]);
    CHECK(tg.ops[2].outputs[0] == tg.outputs[0]);
  }
  // Where the Gemm's product or the reshaped one is read elsewhere, the
  // GELU stays an op of its own.
  for (bool product_read : {true, false}) {
    Mlp m = build();
    m.b.g.outputs = {m.gelu, product_read ? m.gemm : m.unflat};
    const TileGraph tg = compile_graph(m.b.g, kOptions, nullptr);
    CHECK(std::any_of(tg.ops.begin(), tg.ops.end(),
                      [](const Operator& op) { return op.type == OpType::Gelu; }));
    CHECK(std::none_of(tg.ops.begin(), tg.ops.end(),
                       [](const Operator& op) { return op.attrs.activation != Activation::None; }));
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

namespace {

struct RmsNormOptions {
  bool reciprocal = false;  // Reciprocal(Sqrt) instead of Div(1, Sqrt)
  bool commuted = false;
  Shape weight_shape{8};
  int64_t axis = 2;
  float numerator = 1.0f;     // of the Div
  bool extra_reader = false;  // the squares read elsewhere
};

// Hugging Face's RMSNorm decomposition of x [2, 5, 8] (Llama, T5); x is also
// read by a residual Add, as in a transformer layer.
GraphBuilder decomposed_rms_norm(const RmsNormOptions& o, int32_t& x, int32_t& y) {
  GraphBuilder b;
  x = b.op(OpType::Relu, {b.input("x", {2, 5, 8})});
  OpAttributes mean_attrs;
  mean_attrs.axes = {o.axis};
  mean_attrs.keepdims = true;
  const int32_t sq = b.op(OpType::Pow, {x, constant(b, "two", {}, 2.0f)});
  const int32_t mean = b.op(OpType::ReduceMean, {sq}, mean_attrs);
  const int32_t sd = b.op(OpType::Sqrt, {b.op(OpType::Add, {mean, constant(b, "eps", {}, 1e-6f)})});
  const int32_t r = o.reciprocal ? b.op(OpType::Reciprocal, {sd})
                                 : b.op(OpType::Div, {constant(b, "one", {}, o.numerator), sd});
  const int32_t normed = o.commuted ? b.op(OpType::Mul, {r, x}) : b.op(OpType::Mul, {x, r});
  const int32_t w = b.weight("w", o.weight_shape);
  y = o.commuted ? b.op(OpType::Mul, {w, normed}, {}, "rms_out")
                 : b.op(OpType::Mul, {normed, w}, {}, "rms_out");
  b.g.outputs = {y, b.op(OpType::Add, {x, y}, {}, "residual")};
  if (o.extra_reader) b.g.outputs.push_back(b.op(OpType::Tanh, {sq}));
  return b;
}

}  // namespace

TEST_CASE("fuse_rms_norm recognises the RMSNorm decomposition (Div or Reciprocal, commuted)") {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    RmsNormOptions o;
    o.reciprocal = variant & 1;
    o.commuted = variant & 2;
    if (variant == 3) o.weight_shape = {1, 1, 8};
    int32_t x = -1, y = -1;
    GraphBuilder b = decomposed_rms_norm(o, x, y);
    const std::vector<RewrittenPattern> fused = fuse_rms_norm(b.g);
    REQUIRE(fused.size() == 1);
    CHECK(fused[0].op == "rms_out");
    CHECK(fused[0].removed == "7 ops of an RMSNorm");
    REQUIRE(b.g.ops.size() == 3);  // Relu, RMSNormalization, the residual Add
    const Operator& rms = b.g.ops[1];
    CHECK(rms.type == OpType::RMSNormalization);
    CHECK(rms.attrs.axis == 2);
    CHECK(rms.attrs.epsilon == 1e-6f);
    REQUIRE(rms.inputs.size() == 2);
    CHECK(rms.inputs[0] == x);
    CHECK(rms.outputs[0] == y);
    CHECK(b.g.tensors[static_cast<size_t>(rms.inputs[1])].shape == Shape{8});
    check_graph(b.g);
  }
}

TEST_CASE("fuse_rms_norm leaves near misses alone") {
  auto unchanged = [](const RmsNormOptions& o) {
    int32_t x = -1, y = -1;
    GraphBuilder b = decomposed_rms_norm(o, x, y);
    const size_t ops = b.g.ops.size();
    CHECK(fuse_rms_norm(b.g).empty());
    CHECK(b.g.ops.size() == ops);
  };
  RmsNormOptions o;
  o.axis = 1;  // not the last axis
  unchanged(o);
  o = {};
  o.numerator = 2.0f;  // 2 / RMS
  unchanged(o);
  o = {};
  o.extra_reader = true;  // the squares are read elsewhere
  unchanged(o);
  o = {};
  o.weight_shape = {5, 8};  // not per feature
  unchanged(o);
}

// ---------------------------------------------------------------- MatMul/Gemm residual

TEST_CASE("fuse_residual: Add(MatMul(h, W) + b, h) becomes the MatMul's epilogue") {
  // A transformer's attention output projection: the bias fuses first, then
  // the residual Add (either operand order); the tile graph has an edge from
  // every residual-producer tile a MatMul tile's region overlaps.
  for (int order = 0; order < 2; ++order) {
    CAPTURE(order);
    GraphBuilder b;
    const int32_t x = b.input("x", {2, 6, 8});
    const int32_t h = b.op(OpType::Relu, {x}, {}, "h");
    const int32_t mm = b.op(OpType::MatMul, {h, b.weight("w", {8, 8})}, {}, "matmul");
    const int32_t biased = b.op(OpType::Add, {mm, b.weight("bias", {8})}, {}, "bias_add");
    const int32_t sum = order == 0 ? b.op(OpType::Add, {biased, h}, {}, "residual")
                                   : b.op(OpType::Add, {h, biased}, {}, "residual");
    b.g.outputs = {b.op(OpType::Relu, {sum}, {}, "out")};
    CompileReport report;
    const TileGraph tg = compile_graph(b.g, kOptions, &report);
    REQUIRE(tg.ops.size() == 2);  // h, matmul (+bias +residual +relu)
    const Operator& op = tg.ops[1];
    CHECK(op.name == "matmul");
    CHECK(op.attrs.fused_residual);
    CHECK(op.attrs.activation == Activation::Relu);
    REQUIRE(op.inputs.size() == 4);
    CHECK(tg.tensors[static_cast<size_t>(op.inputs[2])].name == "bias");
    CHECK(tg.tensors[static_cast<size_t>(op.inputs[3])].name == "h.out");
    CHECK(report.ops[1].note.find("residual 'residual' fused in") != std::string::npos);
    int32_t checked = 0;
    for (size_t n = 0; n < tg.nodes.size(); ++n) {
      if (tg.nodes[n].op != 0) continue;
      for (size_t m = 0; m < tg.nodes.size(); ++m) {
        if (tg.nodes[m].op != 1) continue;
        // The residual region is the MatMul tile's own output region.
        if (!regions_overlap(tg.nodes[n].region, tg.nodes[m].region)) continue;
        const auto& children = tg.nodes[n].children;
        CHECK(std::find(children.begin(), children.end(), static_cast<int32_t>(m)) !=
              children.end());
        ++checked;
      }
    }
    CHECK(checked >= 2);
    // The dependency of input 3 is exactly the tile's region.
    std::vector<Shape> shapes;
    for (int32_t t : op.inputs) shapes.push_back(tg.tensors[static_cast<size_t>(t)].shape);
    const Region tile{{1, 2, 0}, {2, 5, 4}};
    const auto deps = tile_dependencies(op, shapes, {2, 6, 8}, tile);
    bool residual_dep = false;
    for (const InputDependency& d : deps)
      if (d.operand == 3) {
        residual_dep = true;
        CHECK(d.region == tile);
      }
    CHECK(residual_dep);
  }
}

TEST_CASE("fuse_residual: MatMul without bias and Gemm without C get a zero one") {
  {
    GraphBuilder b;
    const int32_t x = b.input("x", {5, 3});
    const int32_t r = b.input("r", {5, 7});
    const int32_t mm = b.op(OpType::MatMul, {x, b.weight("w", {3, 7})}, {}, "matmul");
    b.g.outputs = {b.op(OpType::Add, {r, mm}, {}, "add")};
    const TileGraph tg = compile_graph(b.g, kOptions, nullptr);
    REQUIRE(tg.ops.size() == 1);
    REQUIRE(tg.ops[0].inputs.size() == 4);
    const CompiledTensor& bias = tg.tensors[static_cast<size_t>(tg.ops[0].inputs[2])];
    CHECK(bias.shape == Shape{7});
    REQUIRE(bias.storage == TensorStorage::Weight);
    for (float v : bias.weight) CHECK(v == 0.0f);
    CHECK(tg.ops[0].inputs[3] == r);
  }
  {
    GraphBuilder b;
    const int32_t x = b.input("x", {3, 5});
    const int32_t r = b.input("r", {5, 7});
    OpAttributes ga;
    ga.trans_a = true;
    const int32_t g = b.op(OpType::Gemm, {x, b.weight("w", {3, 7})}, ga, "gemm");
    b.g.outputs = {b.op(OpType::Add, {g, r}, {}, "add")};
    const TileGraph tg = compile_graph(b.g, kOptions, nullptr);
    REQUIRE(tg.ops.size() == 1);
    CHECK(tg.ops[0].attrs.fused_residual);
    REQUIRE(tg.ops[0].inputs.size() == 4);
    CHECK(tg.tensors[static_cast<size_t>(tg.ops[0].inputs[2])].shape == Shape{7});
    CHECK(tg.ops[0].inputs[3] == r);
  }
}

TEST_CASE("fuse_residual: MatMul/Gemm Adds that must stay") {
  auto op_count = [](const Graph& g) { return compile_graph(g, kOptions, nullptr).ops.size(); };
  {  // Batched B (attention scores): a [N] bias, hence input 3, does not fit.
    GraphBuilder b;
    const int32_t q = b.input("q", {2, 4, 3});
    const int32_t k = b.input("k", {2, 3, 4});
    const int32_t r = b.input("r", {2, 4, 4});
    b.g.outputs = {b.op(OpType::Add, {b.op(OpType::MatMul, {q, k}), r})};
    CHECK(op_count(b.g) == 2);
  }
  {  // The MatMul output has a second reader.
    GraphBuilder b;
    const int32_t x = b.input("x", {4, 6});
    const int32_t mm = b.op(OpType::MatMul, {x, b.weight("w", {6, 6})});
    const int32_t s = b.op(OpType::Add, {mm, x});
    b.g.outputs = {b.op(OpType::Mul, {s, mm})};
    CHECK(op_count(b.g) == 3);
  }
  {  // A broadcast operand is not the output's shape (that is a bias).
    GraphBuilder b;
    const int32_t x = b.input("x", {4, 6});
    const int32_t r = b.input("r", {1, 6});
    b.g.outputs = {b.op(OpType::Add, {b.op(OpType::MatMul, {x, b.weight("w", {6, 6})}), r})};
    CHECK(op_count(b.g) == 2);
  }
  {  // A Gemm whose C is already a full [M, N] matrix.
    GraphBuilder b;
    const int32_t x = b.input("x", {4, 6});
    const int32_t r = b.input("r", {4, 5});
    const int32_t g = b.op(OpType::Gemm, {x, b.weight("w", {6, 5}), b.weight("c", {4, 5})});
    b.g.outputs = {b.op(OpType::Add, {g, r})};
    CHECK(op_count(b.g) == 2);
  }
  {  // Fusion off.
    GraphBuilder b;
    const int32_t x = b.input("x", {4, 6});
    b.g.outputs = {b.op(OpType::Add, {b.op(OpType::MatMul, {x, b.weight("w", {6, 6})}), x})};
    CompileOptions off = kOptions;
    off.fuse_residual = false;
    CHECK(compile_graph(b.g, off, nullptr).ops.size() == 2);
    CHECK(op_count(b.g) == 1);
  }
}

TEST_CASE("fuse_residual: Add(Reshape(Gemm(h2d)), h) fuses with the residual reshaped (GPT-2)") {
  // torch.onnx.export's GPT-2 Conv1D: [1, S, D] -> Reshape [S, D] -> Gemm ->
  // Reshape [1, S, D] -> Add(residual). The Add moves before the Reshape:
  // the Gemm reads the residual through a new Reshape (an alias, no copy).
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 6, 8});
  const int32_t h = b.op(OpType::Relu, {x}, {}, "h");
  OpAttributes flat;
  flat.new_shape = {6, 8};
  const int32_t h2d = b.op(OpType::Reshape, {h}, flat, "flat");
  const int32_t g =
      b.op(OpType::Gemm, {h2d, b.weight("w", {8, 8}), b.weight("c", {8})}, {}, "gemm");
  OpAttributes back;
  back.new_shape = {1, 6, 8};
  const int32_t g3d = b.op(OpType::Reshape, {g}, back, "unflat");
  b.g.outputs = {b.op(OpType::Add, {h, g3d}, {}, "residual")};
  CompileReport report;
  const TileGraph tg = compile_graph(b.g, kOptions, &report);
  // h, flat, the residual's reshape, gemm (+residual), unflat.
  REQUIRE(tg.ops.size() == 5);
  const Operator& gemm = tg.ops[3];
  CHECK(gemm.name == "gemm");
  CHECK(gemm.attrs.fused_residual);
  REQUIRE(gemm.inputs.size() == 4);
  const int32_t reshaped = gemm.inputs[3];
  CHECK(tg.tensors[static_cast<size_t>(reshaped)].shape == Shape{6, 8});
  CHECK(tg.ops[2].type == OpType::Reshape);
  CHECK(tg.ops[2].inputs[0] == h);
  CHECK(tg.ops[2].outputs[0] == reshaped);
  CHECK(tg.ops[4].name == "unflat");
  CHECK(tg.ops[4].outputs[0] == tg.outputs[0]);
  // Every Reshape here reads an arena tensor: each is an alias of h or the
  // Gemm output, and the report says so.
  CHECK(tg.tensors[static_cast<size_t>(reshaped)].arena_offset ==
        tg.tensors[static_cast<size_t>(h)].arena_offset);
  CHECK(tg.tensors[static_cast<size_t>(tg.outputs[0])].arena_offset ==
        tg.tensors[static_cast<size_t>(gemm.outputs[0])].arena_offset);
  for (size_t i : {size_t{1}, size_t{2}, size_t{4}})
    CHECK(report.ops[i].note.find("alias (no copy)") != std::string::npos);
  CHECK(report.ops[3].note.find("residual 'residual' fused in") != std::string::npos);
}
