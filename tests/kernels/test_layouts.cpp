// The reference kernels in NHWC (graph/layout.hpp): for every op whose
// reference is marked LayoutSupport::Any, any mix of NCHW and NHWC operands
// must give bitwise the all-NCHW result (same arithmetic, other addresses),
// tile by tile. And the fused residual of Conv against Conv + Add.
#include "kernel_test_util.hpp"

#include "graph/compiler.hpp"
#include "graph/layout.hpp"
#include "graph/op_shape.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/layout_assignment.hpp"

namespace tessera::kernels::test {
namespace {

using graph::Layout;

int64_t logical_index(const Shape& shape, Layout layout, int64_t p) {
  if (layout != Layout::NHWC || shape.size() != 4) return p;
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  const int64_t ch = p % c, pixel = p / c;
  return ((pixel / (w * h) * c + ch) * h + (pixel / w) % h) * w + pixel % w;
}

std::vector<float> to_layout(const Tensor& t, Layout layout) {
  std::vector<float> out(t.data.size());
  for (size_t p = 0; p < out.size(); ++p)
    out[p] = t.data[static_cast<size_t>(logical_index(t.shape, layout, static_cast<int64_t>(p)))];
  return out;
}

Layout random_layout(Rng& rng) {
  return rng.coin() ? Layout::NHWC : Layout::NCHW;
}

// Runs `op`'s reference on random tiles with the given layouts (rank-4
// operands only; others stay NCHW) and compares with the NCHW result bitwise.
void check_layouts(const graph::Operator& op, const std::vector<Tensor>& inputs,
                   const Shape& out_shape, Rng& rng) {
  // Weights (Conv's W) are never NHWC: only activations get layouts.
  const auto may_be_nhwc = [&](size_t i) {
    return inputs[i].shape.size() == 4 && !(op.type == OpType::Conv && i == 1);
  };
  INFO(describe(op, inputs, out_shape));
  const TileKernelVariant* variant = find_tile_kernel_variant(op.type, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(variant->layouts == LayoutSupport::Any);
  const TileKernel kernel = variant->run;
  const std::vector<float> expected = run_whole(kernel, op, inputs, out_shape);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<std::vector<float>> physical;
    std::vector<Layout> chosen;
    std::vector<ConstTensorView> views;
    std::string layouts;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      chosen.push_back(may_be_nhwc(i) ? random_layout(rng) : Layout::NCHW);
      physical.push_back(to_layout(t, chosen.back()));
      layouts += std::string(graph::layout_name(chosen.back())) + " ";
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      views.push_back({physical[i].data(), &inputs[i].shape, chosen[i]});
    const Layout out_layout = out_shape.size() == 4 ? random_layout(rng) : Layout::NCHW;
    INFO("layouts " << layouts << "-> " << graph::layout_name(out_layout));
    std::vector<float> out(expected.size(), sentinel());
    for (const Region& region : random_tiling(out_shape, rng)) {
      TileArgs args;
      args.op = &op;
      args.inputs = views.data();
      args.input_count = views.size();
      args.output = {out.data(), &out_shape, out_layout};
      args.region = &region;
      kernel(args);
    }
    size_t bad = 0;
    for (size_t p = 0; p < out.size(); ++p) {
      const auto l =
          static_cast<size_t>(logical_index(out_shape, out_layout, static_cast<int64_t>(p)));
      if (std::bit_cast<uint32_t>(out[p]) != std::bit_cast<uint32_t>(expected[l]) && bad++ < 5)
        FAIL_CHECK("logical element " << l << ": " << out[p] << " vs NCHW " << expected[l]);
    }
    CHECK(bad == 0);
  }
}

Shape random_map(Rng& rng) {
  return {rng.uniform(1, 2), rng.size(13), rng.size(11), rng.size(11)};
}

}  // namespace

TEST_CASE("Reference kernels in NHWC: bitwise the NCHW result, any mix of layouts") {
  for (int trial = 0; trial < 60; ++trial) {
    const uint64_t seed = base_seed() + 7000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const Shape x = random_map(rng);
    {  // Conv, maybe with a fused residual and an activation
      graph::Operator op = make_op(OpType::Conv);
      const int64_t m = rng.size(7), k = rng.uniform(1, 3);
      op.attrs.kernel_shape = {k, k};
      op.attrs.strides = {rng.uniform(1, 2), rng.uniform(1, 2)};
      op.attrs.dilations = {1, rng.uniform(1, 2)};
      op.attrs.pads = {k / 2, k / 2, k / 2, k / 2};
      op.attrs.activation = rng.coin() ? graph::Activation::Relu : graph::Activation::None;
      const int64_t oh = (x[2] + 2 * (k / 2) - (k - 1) - 1) / op.attrs.strides[0] + 1;
      const int64_t ow =
          (x[3] + 2 * (k / 2) - op.attrs.dilations[1] * (k - 1) - 1) / op.attrs.strides[1] + 1;
      if (oh >= 1 && ow >= 1 && x[3] + 2 * (k / 2) >= op.attrs.dilations[1] * (k - 1) + 1) {
        const Shape y{x[0], m, oh, ow};
        std::vector<Tensor> in{random_tensor(x, rng), random_tensor({m, x[1], k, k}, rng),
                               random_tensor({m}, rng)};
        if (rng.coin()) {
          op.attrs.fused_residual = true;
          in.push_back(random_tensor(y, rng));
        }
        check_layouts(op, in, y, rng);
      }
    }
    for (OpType type : {OpType::Relu, OpType::Clip, OpType::Sigmoid}) {
      graph::Operator op = make_op(type);
      op.attrs.clip_min = -0.5f;
      op.attrs.clip_max = 0.5f;
      check_layouts(op, {random_tensor(x, rng)}, x, rng);
    }
    for (OpType type :
         {OpType::LeakyRelu, OpType::HardSigmoid, OpType::HardSwish, OpType::Neg, OpType::Exp,
          OpType::Log, OpType::Reciprocal, OpType::Abs, OpType::Softplus}) {
      graph::Operator op = make_op(type);
      op.attrs.alpha = 0.2f;
      op.attrs.beta = 0.4f;
      Tensor t = random_tensor(x, rng);
      if (type == OpType::Log)
        for (float& v : t.data) v = std::fabs(v) + 0.1f;
      check_layouts(op, {t}, x, rng);
    }
    for (OpType type : {OpType::Add, OpType::Mul, OpType::Max, OpType::Min}) {
      graph::Operator op = make_op(type);
      const Shape other = rng.coin() ? x : rng.coin() ? Shape{x[1], 1, 1} : Shape{1, 1, x[2], 1};
      check_layouts(op, {random_tensor(x, rng), random_tensor(other, rng)}, x, rng);
    }
    for (OpType type : {OpType::MaxPool, OpType::AveragePool}) {
      graph::Operator op = make_op(type);
      op.attrs.kernel_shape = {rng.uniform(1, 3), rng.uniform(1, 3)};
      op.attrs.strides = {rng.uniform(1, 2), rng.uniform(1, 2)};
      op.attrs.dilations = {1, 1};
      op.attrs.pads = {0, 0, 0, 0};
      if (op.attrs.kernel_shape[0] > x[2] || op.attrs.kernel_shape[1] > x[3]) continue;
      const Shape y{x[0], x[1], (x[2] - op.attrs.kernel_shape[0]) / op.attrs.strides[0] + 1,
                    (x[3] - op.attrs.kernel_shape[1]) / op.attrs.strides[1] + 1};
      check_layouts(op, {random_tensor(x, rng)}, y, rng);
    }
    {
      graph::Operator op = make_op(OpType::GlobalAveragePool);
      check_layouts(op, {random_tensor(x, rng)}, {x[0], x[1], 1, 1}, rng);
    }
    {  // Concat along any axis, mostly channels
      graph::Operator op = make_op(OpType::Concat);
      op.attrs.axis = rng.coin(0.7) ? 1 : rng.uniform(0, 3);
      Shape y = x;
      std::vector<Tensor> in;
      y[static_cast<size_t>(op.attrs.axis)] = 0;
      for (int64_t i = 0, count = rng.uniform(1, 3); i < count; ++i) {
        Shape part = x;
        part[static_cast<size_t>(op.attrs.axis)] = rng.size(5);
        y[static_cast<size_t>(op.attrs.axis)] += part[static_cast<size_t>(op.attrs.axis)];
        in.push_back(random_tensor(part, rng));
      }
      check_layouts(op, in, y, rng);
    }
  }
}

TEST_CASE("Conv reference: a fused residual is Conv, then + R, then the activation") {
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t seed = base_seed() + 9000 + trial;
    INFO("seed " << seed);
    Rng rng(seed);
    const Shape x = random_map(rng);
    const int64_t m = rng.size(7);
    graph::Operator plain = make_op(OpType::Conv);
    plain.attrs.kernel_shape = {3, 3};
    plain.attrs.strides = {1, 1};
    plain.attrs.dilations = {1, 1};
    plain.attrs.pads = {1, 1, 1, 1};
    const Shape y{x[0], m, x[2], x[3]};
    std::vector<Tensor> in{random_tensor(x, rng), random_tensor({m, x[1], 3, 3}, rng),
                           random_tensor({m}, rng)};
    const Tensor residual = random_tensor(y, rng);
    const std::vector<float> conv =
        run_whole(find_tile_kernel(OpType::Conv, "reference"), plain, in, y);
    graph::Operator fused = plain;
    fused.attrs.fused_residual = true;
    fused.attrs.activation = rng.coin() ? graph::Activation::Relu : graph::Activation::Clip;
    fused.attrs.clip_min = -0.25f;
    fused.attrs.clip_max = 0.5f;
    in.push_back(residual);
    const std::vector<float> out =
        run_whole(find_tile_kernel(OpType::Conv, "reference"), fused, in, y);
    for (size_t i = 0; i < out.size(); ++i) {
      float v = conv[i] + residual.data[i];
      v = fused.attrs.activation == graph::Activation::Relu ? (v > 0.0f ? v : 0.0f)
                                                            : std::min(std::max(v, -0.25f), 0.5f);
      REQUIRE(std::bit_cast<uint32_t>(out[i]) == std::bit_cast<uint32_t>(v));
    }
  }
}

namespace {

// A tiny operator-graph builder for the layout pass.
struct Builder {
  graph::Graph g;
  int32_t tensor(const std::string& name, Shape shape, bool weight = false) {
    graph::TensorInfo info{name, shape, graph::DType::Float32, weight, {}};
    if (weight) info.weight.assign(static_cast<size_t>(graph::shape_numel(shape)), 0.5f);
    g.tensors.push_back(std::move(info));
    return static_cast<int32_t>(g.tensors.size() - 1);
  }
  int32_t op(OpType type, std::vector<int32_t> inputs, graph::OpAttributes attrs,
             const std::string& name) {
    graph::Operator o;
    o.type = type;
    o.name = name;
    o.attrs = std::move(attrs);
    o.inputs = std::move(inputs);
    std::vector<Shape> shapes;
    for (int32_t t : o.inputs) shapes.push_back(g.tensors[static_cast<size_t>(t)].shape);
    o.outputs = {tensor(name + ".out", graph::infer_output_shape(o, shapes))};
    g.ops.push_back(o);
    return o.outputs[0];
  }
};

graph::OpAttributes spatial(int64_t k, int64_t pad) {
  graph::OpAttributes a;
  a.kernel_shape = {k, k};
  a.strides = {1, 1};
  a.dilations = {1, 1};
  a.pads = {pad, pad, pad, pad};
  return a;
}

graph::TileGraph compiled(const graph::Graph& g, KernelPolicy policy) {
  graph::TileGraph tg = graph::compile_graph(
      g, graph::CompileOptions{.tiles = 2, .threads = 1, .target = "test"}, nullptr);
  choose_kernels(tg, policy);
  return tg;
}

Layout layout_of(const graph::TileGraph& tg, const std::string& name) {
  for (const graph::CompiledTensor& t : tg.tensors)
    if (t.name == name) return t.layout;
  FAIL("no tensor " << name);
  return Layout::NCHW;
}

}  // namespace

TEST_CASE("assign_layouts: NHWC between NHWC-capable kernels, never at the model's edges") {
  Builder b;
  const int32_t x = b.tensor("x", {1, 4, 9, 9});
  b.g.inputs = {x};
  const int32_t y1 =
      b.op(OpType::Conv, {x, b.tensor("w1", {8, 4, 3, 3}, true)}, spatial(3, 1), "conv1");
  const int32_t y2 = b.op(OpType::MaxPool, {y1}, spatial(2, 0), "pool");
  const int32_t y3 =
      b.op(OpType::Conv, {y2, b.tensor("w2", {6, 8, 1, 1}, true)}, spatial(1, 0), "conv2");
  const int32_t y4 = b.op(OpType::GlobalAveragePool, {y3}, {}, "gap");
  graph::OpAttributes flat;
  flat.axis = 1;
  flat.new_shape = {1, 6};
  const int32_t y5 = b.op(OpType::Flatten, {y4}, flat, "flatten");
  const int32_t y6 = b.op(OpType::Softmax, {y5}, flat, "softmax");
  b.g.outputs = {y6};
  for (KernelPolicy policy : {KernelPolicy::Fastest, KernelPolicy::ReferenceOnly}) {
    graph::TileGraph tg = compiled(b.g, policy);
    const LayoutAssignment a = assign_layouts(tg, LayoutPolicy::Auto);
    CHECK(a.material_tensors == 4);  // x, conv1, pool, conv2 outputs
    CHECK(a.nhwc_tensors == 3);
    CHECK(a.kept_nchw.empty());  // x is a model input: no reason needed
    CHECK(layout_of(tg, "x") == Layout::NCHW);
    CHECK(layout_of(tg, "conv1.out") == Layout::NHWC);
    CHECK(layout_of(tg, "pool.out") == Layout::NHWC);
    CHECK(layout_of(tg, "conv2.out") == Layout::NHWC);
    CHECK(layout_of(tg, "gap.out") == Layout::NCHW);  // H·W = 1: immaterial
    for (const graph::Operator& op : tg.ops) {
      const TileKernelVariant* v = find_tile_kernel_variant(op.type, op.kernel);
      REQUIRE(v != nullptr);
      CHECK_FALSE(layout_contract_violation(tg, op, *v));
    }
    const LayoutAssignment off = assign_layouts(tg, LayoutPolicy::Nchw);
    CHECK(off.nhwc_tensors == 0);
    for (const graph::CompiledTensor& t : tg.tensors) CHECK(t.layout == Layout::NCHW);
  }
}

TEST_CASE("assign_layouts: an output written over its fused residual keeps the residual's order") {
  // y1 = conv1(x); y2 = conv2(y1) + y1 (fused); y1 also feeds an NCHW-only
  // Flatten. Where y2 shares y1's bytes (graph/memory_plan.hpp) y2 stays
  // NCHW with y1; where it has bytes of its own it may be NHWC.
  Builder b;
  const int32_t x = b.tensor("x", {1, 4, 9, 9});
  b.g.inputs = {x};
  const int32_t y1 =
      b.op(OpType::Conv, {x, b.tensor("w1", {4, 4, 3, 3}, true)}, spatial(3, 1), "conv1");
  graph::OpAttributes fused = spatial(1, 0);
  fused.fused_residual = true;
  const int32_t y2 =
      b.op(OpType::Conv, {y1, b.tensor("w2", {4, 4, 1, 1}, true), b.tensor("b2", {4}, true), y1},
           fused, "conv2");
  const int32_t y3 =
      b.op(OpType::Conv, {y2, b.tensor("w3", {4, 4, 1, 1}, true)}, spatial(1, 0), "conv3");
  graph::OpAttributes flat;
  flat.axis = 1;
  flat.new_shape = {1, 4 * 9 * 9};
  b.g.outputs = {y3, b.op(OpType::Flatten, {y1}, flat, "flatten")};
  for (const bool shared : {false, true}) {
    CAPTURE(shared);
    graph::TileGraph tg = compiled(b.g, KernelPolicy::Fastest);
    graph::CompiledTensor& out = tg.tensors[static_cast<size_t>(y2)];
    const uint64_t residual_offset = tg.tensors[static_cast<size_t>(y1)].arena_offset;
    if (shared)
      out.arena_offset = residual_offset;
    else if (out.arena_offset == residual_offset)
      out.arena_offset += 64;
    assign_layouts(tg, LayoutPolicy::Auto);
    CHECK(layout_of(tg, "conv1.out") == Layout::NCHW);  // the Flatten reads it
    CHECK(layout_of(tg, "conv2.out") == (shared ? Layout::NCHW : Layout::NHWC));
  }
}

// cpu.conv_depthwise is Uniform over X, Y and the residual; its weights
// (rank 4, H·W > 1, never NHWC) must not tie the activations to NCHW.
TEST_CASE("assign_layouts: a depthwise conv between convs runs NHWC, its weights stay NCHW") {
  Builder b;
  const int32_t x = b.tensor("x", {1, 4, 9, 9});
  b.g.inputs = {x};
  const int32_t y1 =
      b.op(OpType::Conv, {x, b.tensor("w1", {8, 4, 3, 3}, true)}, spatial(3, 1), "conv1");
  graph::OpAttributes depthwise = spatial(3, 1);
  depthwise.group = 8;
  const int32_t y2 =
      b.op(OpType::Conv, {y1, b.tensor("wd", {8, 1, 3, 3}, true), b.tensor("bd", {8}, true)},
           depthwise, "dw");
  const int32_t y3 =
      b.op(OpType::Conv, {y2, b.tensor("w2", {6, 8, 1, 1}, true)}, spatial(1, 0), "conv2");
  b.g.outputs = {y3};
  graph::TileGraph tg = compiled(b.g, KernelPolicy::Fastest);
  const LayoutAssignment a = assign_layouts(tg, LayoutPolicy::Auto);
  CHECK(layout_of(tg, "conv1.out") == Layout::NHWC);
  CHECK(layout_of(tg, "dw.out") == Layout::NHWC);
  CHECK(layout_of(tg, "wd") == Layout::NCHW);
  CHECK(a.nhwc_tensors == 2);
  for (const graph::Operator& op : tg.ops) {
    if (op.name == "dw") CHECK(op.kernel == "cpu.conv_depthwise");
    const TileKernelVariant* v = find_tile_kernel_variant(op.type, op.kernel);
    REQUIRE(v != nullptr);
    CHECK_FALSE(layout_contract_violation(tg, op, *v));
  }
}

TEST_CASE("assign_layouts: NCHW-only consumers and Uniform ties to model inputs keep NCHW") {
  Builder b;
  const int32_t x = b.tensor("x", {1, 3, 5, 5});
  b.g.inputs = {x};
  // Relu (Uniform) reads the model input: its output is tied to x's NCHW.
  const int32_t r = b.op(OpType::Relu, {x}, {}, "relu");
  const int32_t y =
      b.op(OpType::Conv, {r, b.tensor("w", {4, 3, 3, 3}, true)}, spatial(3, 1), "conv");
  // Softmax's kernel (cpu.softmax) is NCHW-only: the conv output stays NCHW.
  graph::OpAttributes soft;
  soft.axis = 1;
  const int32_t s = b.op(OpType::Softmax, {y}, soft, "softmax");
  b.g.outputs = {s};
  graph::TileGraph tg = compiled(b.g, KernelPolicy::Fastest);
  const LayoutAssignment a = assign_layouts(tg, LayoutPolicy::Auto);
  CHECK(a.nhwc_tensors == 0);
  REQUIRE(a.kept_nchw.size() == 2);
  std::string all;
  for (const std::string& why : a.kept_nchw) all += why + "\n";
  CHECK(all.find("'relu.out' stays NCHW") != std::string::npos);
  CHECK(all.find("'conv.out' stays NCHW: consumer 'softmax' (Softmax, cpu.softmax) is NCHW-only") !=
        std::string::npos);

  // A file claiming NHWC for the conv output breaks Softmax's contract.
  for (graph::CompiledTensor& t : tg.tensors)
    if (t.name == "conv.out") t.layout = Layout::NHWC;
  const graph::Operator& softmax = tg.ops.back();
  const auto why = layout_contract_violation(
      tg, softmax, *find_tile_kernel_variant(softmax.type, softmax.kernel));
  REQUIRE(why);
  CHECK(why->find("NCHW only") != std::string::npos);
}

}  // namespace tessera::kernels::test
