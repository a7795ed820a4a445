// The CPU dense-op variants (cpu.conv_gemm, cpu.conv_depthwise, cpu.gemm,
// cpu.matmul: kernels/cpu/dense_ops.hpp), looked up in the registry like
// the runtime does, against the reference kernel of the same op: named edges
// and random shapes and attributes, each output assembled from random tiles
// in random order, under every SGEMM ISA the CPU supports (the PreparedOp is
// made after set_gemm_isa()). Every output starts as NaN: each tile must
// leave everything outside its region bitwise unchanged, and together the
// tiles must write every element. Seeds: TESSERA_TEST_SEED=<n> replays a run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conv_case.hpp"
#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/tile_kernel.hpp"
#include "layouts.hpp"
#include "test_random.hpp"
#include "tile_grid.hpp"

namespace {

using namespace tessera;
using graph::Activation;
using graph::OpType;
using graph::Shape;
using kernels::ConstTensorView;
using kernels::TileKernelVariant;
namespace cpu = kernels::cpu;

uint64_t base_seed() {
  return tessera::test::base_seed("test_cpu_ops");
}

// One op to test: its operator, input shapes (and which are constants, i.e.
// given to prepare()), output shape, the GEMM depth K for the tolerance.
struct OpCase {
  graph::Operator op;
  std::vector<Shape> inputs;
  std::vector<bool> constant;
  Shape output;
  int64_t depth = 1;
  std::string label;
  // Physical layouts of the inputs (empty: all NCHW) and the output; the
  // reference it is compared with runs all-NCHW.
  std::vector<graph::Layout> layouts;
  graph::Layout out_layout = graph::Layout::NCHW;
};

graph::Layout input_layout(const OpCase& c, size_t i) {
  return i < c.layouts.size() ? c.layouts[i] : graph::Layout::NCHW;
}

std::string activation_name(Activation a) {
  switch (a) {
    case Activation::None:
      return "none";
    case Activation::Relu:
      return "relu";
    case Activation::Clip:
      return "clip";
    case Activation::Sigmoid:
      return "sigmoid";
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::Silu:
      return "silu";
    case Activation::LeakyRelu:
      return "leaky_relu";
  }
  return "?";
}

std::string describe(const OpCase& c) {
  std::ostringstream s;
  s << c.label << " " << graph::op_type_name(c.op.type) << " inputs";
  for (size_t i = 0; i < c.inputs.size(); ++i)
    s << " " << graph::shape_to_string(c.inputs[i]) << (c.constant[i] ? "c" : "");
  const graph::OpAttributes& a = c.op.attrs;
  s << " -> " << graph::shape_to_string(c.output) << " act " << activation_name(a.activation)
    << " [" << a.clip_min << "," << a.clip_max << "]";
  if (c.op.type == OpType::Conv) {
    s << " k";
    for (int64_t v : a.kernel_shape) s << " " << v;
    s << " strides";
    for (int64_t v : a.strides) s << " " << v;
    s << " pads";
    for (int64_t v : a.pads) s << " " << v;
    s << " dilations";
    for (int64_t v : a.dilations) s << " " << v;
    s << " group " << a.group << (a.fused_residual ? " residual" : "")
      << (a.fused_input_scale ? " input scale" : "");
  }
  s << " layouts";
  for (size_t i = 0; i < c.inputs.size(); ++i) s << " " << graph::layout_name(input_layout(c, i));
  s << " -> " << graph::layout_name(c.out_layout);
  if (c.op.type == OpType::Gemm)
    s << " transA " << a.trans_a << " transB " << a.trans_b << " alpha " << a.alpha << " beta "
      << a.beta;
  return s.str();
}

using test::inside;
using test::random_tiles;

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

std::vector<cpu::GemmIsa> supported_isas() {
  std::vector<cpu::GemmIsa> isas;
  for (cpu::GemmIsa isa : {cpu::GemmIsa::kPortable, cpu::GemmIsa::kAvx2, cpu::GemmIsa::kAvx512})
    if (cpu::gemm_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// Restores the SGEMM ISA when a test ends, also by an exception.
struct IsaGuard {
  cpu::GemmIsa saved = cpu::gemm_isa();
  ~IsaGuard() { cpu::set_gemm_isa(saved); }
};

// Runs `variant_name` on the case under every ISA, tile by tile, and
// compares with the reference kernel. `tolerance_scale` widens the bound for
// variants that round more by design (Winograd's transforms);
// `require_applies` false skips applies() for variants whose applies() adds
// a speed rule on top of what they can compute (the test checks that part).
void check_case(std::string_view variant_name, const OpCase& c, uint64_t seed,
                double tolerance_scale = 1.0, bool require_applies = true) {
  INFO(variant_name, " seed ", seed, ": ", describe(c));
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(c.op.type, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(reference != nullptr);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> data(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    data[i].resize(static_cast<size_t>(graph::shape_numel(c.inputs[i])));
    for (float& x : data[i]) x = dist(rng);
  }
  // The variant reads each input in its own layout.
  std::vector<std::vector<float>> physical(c.inputs.size());
  std::vector<ConstTensorView> views(c.inputs.size()), prepare_views(c.inputs.size()),
      variant_views(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    physical[i] = test::to_layout(data[i], c.inputs[i], input_layout(c, i));
    views[i] = {data[i].data(), &c.inputs[i]};
    variant_views[i] = {physical[i].data(), &c.inputs[i], input_layout(c, i)};
    prepare_views[i] = {c.constant[i] ? data[i].data() : nullptr, &c.inputs[i], input_layout(c, i)};
  }
  if (variant->applies && require_applies) {
    const std::optional<std::string> why = variant->applies(c.op, prepare_views);
    REQUIRE_MESSAGE(!why, "applies() refused: ", why.value_or(""));
  }

  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> expected(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c.output);
  kernels::TileArgs ref_args{.op = &c.op,
                             .inputs = views.data(),
                             .input_count = views.size(),
                             .output = {expected.data(), &c.output},
                             .region = &whole};
  reference->run(ref_args);

  // Reference and variant each round a K-term sum: allow a few eps of its
  // largest possible magnitude (alpha and beta are at most 1.25 here).
  double product = 1.25 * static_cast<double>(c.depth) * max_abs(data[0]);
  if (data.size() > 1) product *= max_abs(data[1]);
  double extra = 1.0;
  if (data.size() > 2) extra += 1.25 * max_abs(data[2]);
  if (data.size() > 3) extra += max_abs(data[3]);  // a fused residual
  const double tol =
      4.0 * tolerance_scale * std::numeric_limits<float>::epsilon() * (product + extra);

  IsaGuard guard;
  for (cpu::GemmIsa isa : supported_isas()) {
    INFO("ISA ", cpu::gemm_isa_name(isa));
    cpu::set_gemm_isa(isa);
    const kernels::PreparedOp prepared =
        variant->prepare ? variant->prepare(c.op, prepare_views) : nullptr;
    std::vector<float> out(static_cast<size_t>(numel), std::numeric_limits<float>::quiet_NaN());
    for (const graph::Region& tile : random_tiles(c.output, rng)) {
      const std::vector<float> before = out;
      kernels::TileArgs args{.op = &c.op,
                             .inputs = variant_views.data(),
                             .input_count = variant_views.size(),
                             .output = {out.data(), &c.output, c.out_layout},
                             .region = &tile,
                             .prepared = prepared.get()};
      variant->run(args);
      int64_t outside = 0;
      for (int64_t i = 0; i < numel; ++i)
        if (!inside(tile, c.output, test::logical_index(c.output, c.out_layout, i)) &&
            !same_bits(out[i], before[i]) && outside++ < 3)
          FAIL_CHECK("tile ", graph::region_to_string(tile), " wrote outside at physical index ",
                     i);
      REQUIRE(outside == 0);
    }
    out = test::from_layout(out, c.output, c.out_layout);
    int64_t bad = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (!(std::fabs(static_cast<double>(out[i]) - expected[i]) <= tol) && bad++ < 5)
        FAIL_CHECK("y[", i, "] = ", out[i], ", reference ", expected[i], " (tolerance ", tol, ")");
    REQUIRE(bad == 0);
  }
}

// Random pick from a list.
using tessera::test::pick;

using tessera::test::ConvSpec;
using tessera::test::padded_3x3;

// The conv of `s` as an OpCase; nullopt when the kernel does not fit the
// padded input.
std::optional<OpCase> conv_case(const ConvSpec& s, const std::string& label) {
  std::optional<tessera::test::ConvCase> made = tessera::test::make_case(s);
  if (!made) return std::nullopt;
  OpCase c;
  c.label = label;
  c.op = std::move(made->op);
  c.inputs = std::move(made->shapes);
  c.output = std::move(made->output);
  c.constant = {false, true};
  if (s.bias || s.residual) c.constant.push_back(true);
  if (s.residual) c.constant.push_back(false);
  c.depth = made->depth;
  return c;
}

ConvSpec random_conv_spec(std::mt19937_64& rng, bool depthwise) {
  ConvSpec s;
  s.one_d = rng() % 5 == 0;
  s.batch = pick<int64_t>(rng, {1, 1, 2});
  s.channels = pick<int64_t>(rng, {1, 2, 3, 5, 7, 13, 17, 33});
  s.out_channels = depthwise ? s.channels : pick<int64_t>(rng, {1, 3, 5, 16, 17, 31, 67, 130});
  s.group = depthwise ? s.channels : 1;
  s.k_w = pick<int64_t>(rng, {1, 1, 2, 3, 3, 5, 7});
  s.k_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 2, 3, 3, 5, 7});
  s.stride_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 2, 3});
  s.stride_w = pick<int64_t>(rng, {1, 1, 2, 3});
  s.dilation_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 1, 2});
  s.dilation_w = pick<int64_t>(rng, {1, 1, 1, 2, 3});
  auto pad = [&](int64_t k) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(k)); };
  s.pad_left = pad(s.k_w);
  s.pad_right = pad(s.k_w);
  if (!s.one_d) {
    s.pad_top = pad(s.k_h);
    s.pad_bottom = pad(s.k_h);
  }
  s.in_h = s.one_d ? 1 : 1 + static_cast<int64_t>(rng() % 17);
  s.in_w = 1 + static_cast<int64_t>(rng() % (s.one_d ? 60 : 19));
  s.bias = rng() % 3 != 0;
  s.activation = pick(rng, {Activation::None, Activation::Relu, Activation::Clip,
                            Activation::Sigmoid, Activation::Silu, Activation::LeakyRelu});
  s.residual = rng() % 3 == 0;
  return s;
}

// Random layouts for a conv case: X, Y and the residual each NCHW or NHWC
// (any mix when `uniform` is false), weights and bias NCHW; 1-D stays NCHW.
void randomise_layouts(OpCase& c, std::mt19937_64& rng, bool uniform) {
  if (c.output.size() != 4) return;
  auto random_layout = [&] { return rng() % 2 ? graph::Layout::NHWC : graph::Layout::NCHW; };
  c.out_layout = random_layout();
  c.layouts.assign(c.inputs.size(), graph::Layout::NCHW);
  c.layouts[0] = uniform ? c.out_layout : random_layout();
  if (c.op.attrs.fused_residual) c.layouts[3] = uniform ? c.out_layout : random_layout();
}

// Conv edges named after what they exercise in conv_gemm.cpp.
std::vector<std::pair<std::string, ConvSpec>> conv_edges() {
  std::vector<std::pair<std::string, ConvSpec>> edges;
  auto add = [&](std::string name, ConvSpec s) { edges.emplace_back(std::move(name), s); };
  add("1x1 s1 direct A, C 1", {.channels = 1, .out_channels = 5, .in_h = 3, .in_w = 7});
  add("1x1 s1 direct A, C 70 OC 67",
      {.batch = 2, .channels = 70, .out_channels = 67, .in_h = 5, .in_w = 9});
  add("1x1 s1 padded", {.channels = 6,
                        .out_channels = 9,
                        .in_h = 4,
                        .in_w = 5,
                        .pad_top = 1,
                        .pad_left = 0,
                        .pad_bottom = 0,
                        .pad_right = 1,
                        .activation = Activation::Relu});
  add("1x1 stride 2",
      {.channels = 9, .out_channels = 19, .in_h = 9, .in_w = 8, .stride_h = 2, .stride_w = 2});
  add("7x7 s2 p3 stem", {.channels = 3,
                         .out_channels = 16,
                         .in_h = 23,
                         .in_w = 21,
                         .k_h = 7,
                         .k_w = 7,
                         .stride_h = 2,
                         .stride_w = 2,
                         .pad_top = 3,
                         .pad_left = 3,
                         .pad_bottom = 3,
                         .pad_right = 3,
                         .activation = Activation::Relu});
  add("3x3 K > kc, OC 130 (3 panels)", {.channels = 41,
                                        .out_channels = 130,
                                        .in_h = 6,
                                        .in_w = 7,
                                        .k_h = 3,
                                        .k_w = 3,
                                        .pad_top = 1,
                                        .pad_left = 1,
                                        .pad_bottom = 1,
                                        .pad_right = 1,
                                        .activation = Activation::Clip});
  add("3x3 576 pixels: row chunks", {.channels = 2,
                                     .out_channels = 5,
                                     .in_h = 24,
                                     .in_w = 24,
                                     .k_h = 3,
                                     .k_w = 3,
                                     .pad_top = 1,
                                     .pad_left = 1,
                                     .pad_bottom = 1,
                                     .pad_right = 1});
  add("1-D width 1300: column chunks", {.channels = 2,
                                        .out_channels = 3,
                                        .in_w = 1300,
                                        .k_w = 3,
                                        .pad_left = 2,
                                        .pad_right = 1,
                                        .one_d = true,
                                        .activation = Activation::Sigmoid});
  add("dilated asymmetric", {.channels = 4,
                             .out_channels = 7,
                             .in_h = 11,
                             .in_w = 13,
                             .k_h = 3,
                             .k_w = 2,
                             .stride_h = 1,
                             .stride_w = 2,
                             .dilation_h = 2,
                             .dilation_w = 3,
                             .pad_top = 2,
                             .pad_left = 0,
                             .pad_bottom = 0,
                             .pad_right = 3});
  add("kernel = padded input", {.channels = 3,
                                .out_channels = 2,
                                .in_h = 2,
                                .in_w = 3,
                                .k_h = 4,
                                .k_w = 5,
                                .pad_top = 1,
                                .pad_left = 1,
                                .pad_bottom = 1,
                                .pad_right = 1});
  add("window wholly in padding", {.channels = 2,
                                   .out_channels = 3,
                                   .in_h = 1,
                                   .in_w = 1,
                                   .k_h = 1,
                                   .k_w = 1,
                                   .pad_top = 2,
                                   .pad_left = 1,
                                   .pad_bottom = 2,
                                   .pad_right = 3,
                                   .bias = true});
  return edges;
}

TEST_CASE(
    "transpose_panel: every shape up to 6 x 40, packed and strided, nothing written outside") {
  // Rows 2 and 3 into packed columns take the overlapping-store path; the
  // sentinels after each destination row catch a store past column `cols`.
  std::mt19937_64 rng(base_seed() + 17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  constexpr float kSentinel = 1234.5f;
  for (int64_t rows = 1; rows <= 6; ++rows)
    for (int64_t cols = 1; cols <= 40; ++cols)
      for (const int64_t extra : {int64_t{0}, int64_t{3}}) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(extra);
        const int64_t ld_src = cols + 5, ld_dst = rows + extra;
        std::vector<float> src(static_cast<size_t>(rows * ld_src));
        for (float& v : src) v = dist(rng);
        std::vector<float> dst(static_cast<size_t>(cols * ld_dst + 8), kSentinel);
        cpu::transpose_panel(src.data(), ld_src, rows, cols, dst.data(), ld_dst);
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t i = 0; i < ld_dst; ++i) {
            const float got = dst[static_cast<size_t>(j * ld_dst + i)];
            if (i < rows)
              CHECK(got == src[static_cast<size_t>(i * ld_src + j)]);
            else
              CHECK(got == kSentinel);
          }
        for (size_t k = static_cast<size_t>(cols * ld_dst); k < dst.size(); ++k)
          CHECK(dst[k] == kSentinel);
      }
}

TEST_CASE("cpu.conv_gemm matches the reference conv") {
  uint64_t seed = base_seed() * 7919u + 1;
  for (const auto& [name, spec] : conv_edges()) {
    const std::optional<OpCase> c = conv_case(spec, name);
    REQUIRE(c.has_value());
    check_case("cpu.conv_gemm", *c, seed++);
  }
  std::mt19937_64 rng(base_seed() + 11);
  for (int i = 0; i < 150;) {
    std::optional<OpCase> c = conv_case(random_conv_spec(rng, false), "random");
    if (!c) continue;
    randomise_layouts(*c, rng, /*uniform=*/false);
    check_case("cpu.conv_gemm", *c, seed++);
    ++i;
  }
}

// A random 2-D ConvTranspose: groups, strides, dilations, pads with end pads
// down to -(stride - 1) (output_padding), with and without a bias.
OpCase random_conv_transpose(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  while (true) {
    OpCase c;
    c.op.type = OpType::ConvTranspose;
    c.op.name = "conv_transpose";
    c.label = "random";
    graph::OpAttributes& a = c.op.attrs;
    a.group = pick(1, 3);
    const int64_t cg = pick(1, 9), mg = pick(1, 7), kh = pick(1, 4), kw = pick(1, 4);
    a.kernel_shape = {kh, kw};
    a.strides = {pick(1, 3), pick(1, 3)};
    a.dilations = {pick(1, 2), pick(1, 2)};
    a.pads = {pick(0, 2), pick(0, 2), pick(1 - a.strides[0], 2), pick(1 - a.strides[1], 2)};
    c.inputs = {{pick(1, 2), cg * a.group, pick(1, 9), pick(1, 20)}, {cg * a.group, mg, kh, kw}};
    c.constant = {false, true};
    if (pick(0, 2) > 0) {
      c.inputs.push_back({mg * a.group});
      c.constant.push_back(true);
    }
    c.depth = cg * kh * kw;
    try {
      c.output = graph::infer_output_shape(c.op, c.inputs);
      return c;
    } catch (const tessera::Error&) {
      // pads larger than the taps reach: draw again
    }
  }
}

TEST_CASE("cpu.conv_transpose matches the reference; tilings agree bitwise") {
  uint64_t seed = base_seed() * 7919u + 401;
  std::mt19937_64 rng(base_seed() + 41);
  for (int i = 0; i < 120; ++i)
    check_case("cpu.conv_transpose", random_conv_transpose(rng), seed++);
  // The same case as one tile and as random tiles: the same bits.
  const TileKernelVariant* variant =
      kernels::find_tile_kernel_variant(OpType::ConvTranspose, "cpu.conv_transpose");
  REQUIRE(variant != nullptr);
  for (int i = 0; i < 40; ++i) {
    const OpCase c = random_conv_transpose(rng);
    INFO(describe(c));
    std::vector<std::vector<float>> data(c.inputs.size());
    std::vector<ConstTensorView> views(c.inputs.size());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      data[k].resize(static_cast<size_t>(graph::shape_numel(c.inputs[k])));
      for (float& v : data[k]) v = dist(rng);
      views[k] = {data[k].data(), &c.inputs[k]};
    }
    const kernels::PreparedOp prepared = variant->prepare(c.op, views);
    auto run = [&](const std::vector<graph::Region>& tiles) {
      std::vector<float> out(static_cast<size_t>(graph::shape_numel(c.output)));
      for (const graph::Region& tile : tiles) {
        kernels::TileArgs args{.op = &c.op,
                               .inputs = views.data(),
                               .input_count = views.size(),
                               .output = {out.data(), &c.output},
                               .region = &tile,
                               .prepared = prepared.get()};
        variant->run(args);
      }
      return out;
    };
    const std::vector<float> whole = run({graph::Region::whole(c.output)});
    const std::vector<float> tiled = run(random_tiles(c.output, rng));
    for (size_t k = 0; k < whole.size(); ++k)
      if (!same_bits(whole[k], tiled[k])) {
        FAIL_CHECK("element ", k, ": ", whole[k], " as one tile, ", tiled[k], " tiled");
        break;
      }
  }
  graph::Operator activation;
  activation.type = OpType::ConvTranspose;
  activation.attrs.activation = Activation::Relu;
  const Shape x{1, 2, 3, 3}, w{2, 1, 2, 2};
  std::vector<float> weights(8, 1.0f);
  const ConstTensorView refused[] = {{nullptr, &x}, {weights.data(), &w}};
  REQUIRE(cpu::conv_transpose_applies(activation, refused));
}

TEST_CASE("cpu.conv_gemm: few channels (K = 1 to 40) and patch runs of every length") {
  // MobileNetV2's shapes in small: 1×1 expansions over C = 1..40 channels
  // (A read in place, short k loops) and a 3×3 stride-2 stem-like conv whose
  // patch runs (kW·C floats, or C per tap when dilated) are shorter than,
  // equal to or longer than the 16-float blocks conv_gemm copies them in,
  // and past 256 floats (the memcpy path). NHWC as compiled, plus NCHW.
  uint64_t seed = base_seed() * 7919u + 900;
  const Activation activations[] = {Activation::None, Activation::Relu, Activation::Clip};
  for (int64_t c = 1; c <= 40; ++c) {
    ConvSpec one_by_one{.channels = c,
                        .out_channels = 3 + (c * 7) % 61,
                        .in_h = 2 + c % 5,
                        .in_w = 3 + c % 7,
                        .activation = activations[c % 3]};
    ConvSpec stem{.channels = c % 9 + 1,
                  .out_channels = 5 + c % 29,
                  .in_h = 7 + c % 4,
                  .in_w = 5 + c % 6,
                  .k_h = 3,
                  .k_w = 3,
                  .stride_h = 2,
                  .stride_w = 2,
                  .pad_top = 1,
                  .pad_left = 1,
                  .pad_bottom = 1,
                  .pad_right = 1,
                  .activation = activations[(c + 1) % 3]};
    if (c > 30) stem.channels = 80 + c;   // kW·C > 256
    if (c % 4 == 0) stem.dilation_w = 2;  // one run of C per tap
    for (const ConvSpec& spec : {one_by_one, stem}) {
      std::optional<OpCase> conv = conv_case(spec, "few channels");
      REQUIRE(conv.has_value());
      const graph::Layout layout = c % 5 == 0 ? graph::Layout::NCHW : graph::Layout::NHWC;
      conv->layouts.assign(conv->inputs.size(), graph::Layout::NCHW);
      conv->layouts[0] = layout;
      conv->out_layout = layout;
      check_case("cpu.conv_gemm", *conv, seed++);
    }
  }
}

TEST_CASE("cpu.conv_gemm: NCHW input of 1-5 channels into NHWC (the stems' implicit GEMM)") {
  // Up to 4 channels an NCHW input with an NHWC output runs through
  // gemm_tile_indirect (k offsets into padded input planes); 5 takes the
  // patch path. Random kernels, strides, dilations and pads (some larger
  // than the kernel), chunks of whole and part rows (random tiles), a
  // residual in either layout, and the stems themselves in small.
  uint64_t seed = base_seed() * 7919u + 1300;
  std::mt19937_64 rng(seed);
  auto pick_in = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const Activation activations[] = {Activation::None, Activation::Relu, Activation::Clip};
  std::vector<ConvSpec> specs = {
      // ResNet's 7×7 stride-2 stem and MobileNetV2's 3×3 stride-2 one.
      {.channels = 3,
       .out_channels = 64,
       .in_h = 30,
       .in_w = 33,
       .k_h = 7,
       .k_w = 7,
       .stride_h = 2,
       .stride_w = 2,
       .pad_top = 3,
       .pad_left = 3,
       .pad_bottom = 3,
       .pad_right = 3,
       .activation = Activation::Relu},
      {.channels = 3,
       .out_channels = 32,
       .in_h = 19,
       .in_w = 24,
       .k_h = 3,
       .k_w = 3,
       .stride_h = 2,
       .stride_w = 2,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .activation = Activation::Clip},
  };
  for (int i = 0; i < 30; ++i) {
    ConvSpec s{.batch = pick_in(1, 2),
               .channels = pick_in(1, 5),
               .out_channels = pick_in(1, 70),
               .in_h = pick_in(1, 17),
               .in_w = pick_in(1, 40),
               .k_h = pick_in(1, 5),
               .k_w = pick_in(1, 7),
               .stride_h = pick_in(1, 3),
               .stride_w = pick_in(1, 3),
               .dilation_h = pick_in(1, 2),
               .dilation_w = pick_in(1, 2),
               .pad_top = pick_in(0, 3),
               .pad_left = pick_in(0, 4),
               .pad_bottom = pick_in(0, 3),
               .pad_right = pick_in(0, 4),
               .activation = activations[i % 3],
               .residual = i % 4 == 1};
    specs.push_back(s);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    std::optional<OpCase> conv = conv_case(specs[i], "NCHW to NHWC, few channels");
    if (!conv) continue;  // the kernel does not fit the padded input
    conv->layouts.assign(conv->inputs.size(), graph::Layout::NCHW);
    conv->out_layout = graph::Layout::NHWC;
    if (specs[i].residual && i % 8 == 1) conv->layouts[3] = graph::Layout::NHWC;
    check_case("cpu.conv_gemm", *conv, seed++);
  }
}

TEST_CASE("cpu.conv_gemm: every mix of NCHW and NHWC input, output and residual") {
  uint64_t seed = base_seed() * 7919u + 500;
  // 1×1 stride 1 (A is the NHWC input itself, no chunks when Y is NHWC
  // too), a 3×3 with padding (window from NHWC rows), 1×1 stride 2, and
  // OC/C not multiples of the vector width or register block.
  const ConvSpec specs[] = {
      {.batch = 2, .channels = 37, .out_channels = 67, .in_h = 5, .in_w = 11},
      {.channels = 1, .out_channels = 1, .in_h = 1, .in_w = 1},
      {.channels = 19,
       .out_channels = 33,
       .in_h = 13,
       .in_w = 7,
       .k_h = 3,
       .k_w = 3,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .activation = Activation::Relu},
      {.channels = 9, .out_channels = 17, .in_h = 9, .in_w = 8, .stride_h = 2, .stride_w = 2},
      {.channels = 64, .out_channels = 129, .in_h = 40, .in_w = 41, .activation = Activation::Clip},
      // No padding: an NHWC input is gathered from in place, runs of whole
      // 16-float blocks (C = 32; 3 × 16) and not (3 × 5).
      {.channels = 32, .out_channels = 20, .in_h = 7, .in_w = 9, .stride_h = 2, .stride_w = 3},
      {.channels = 16, .out_channels = 24, .in_h = 6, .in_w = 8, .k_h = 3, .k_w = 3},
      {.channels = 5,
       .out_channels = 7,
       .in_h = 9,
       .in_w = 6,
       .k_h = 3,
       .k_w = 3,
       .stride_h = 2,
       .activation = Activation::Relu},
  };
  for (const ConvSpec& base : specs)
    for (int residual = 0; residual < 2; ++residual)
      for (int mask = 0; mask < 8; ++mask) {
        ConvSpec spec = base;
        spec.residual = residual == 1;
        if (!spec.residual && (mask & 4)) continue;
        std::optional<OpCase> c = conv_case(spec, "layouts");
        REQUIRE(c.has_value());
        const auto layout = [&](int bit) {
          return (mask >> bit) & 1 ? graph::Layout::NHWC : graph::Layout::NCHW;
        };
        c->layouts.assign(c->inputs.size(), graph::Layout::NCHW);
        c->layouts[0] = layout(0);
        c->out_layout = layout(1);
        if (spec.residual) c->layouts[3] = layout(2);
        check_case("cpu.conv_gemm", *c, seed++);
      }
}

// A fused input scale (graph/fuse_input_scale.hpp): the reference against
// itself run on X * S computed first (the Mul the scale replaces), bitwise;
// then cpu.conv_gemm against the reference, in every layout mix, with and
// without residual, a per-image and a shared scale. The other conv variants
// refuse it.
TEST_CASE("a fused input scale: the reference is the Mul then the conv; cpu.conv_gemm matches") {
  uint64_t seed = base_seed() * 7919u + 900;
  std::mt19937_64 rng(seed);
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(OpType::Conv, "reference");
  REQUIRE(reference != nullptr);
  for (int t = 0; t < 40; ++t) {
    ConvSpec spec;
    spec.batch = pick<int64_t>(rng, {1, 2, 3});
    spec.channels = pick<int64_t>(rng, {1, 5, 16, 33, 96});
    spec.out_channels = pick<int64_t>(rng, {1, 7, 16, 40});
    spec.in_h = 1 + static_cast<int64_t>(rng() % 9);
    spec.in_w = 1 + static_cast<int64_t>(rng() % 13);
    spec.bias = true;
    spec.residual = rng() % 2 == 0;
    spec.activation = pick(rng, {Activation::None, Activation::Relu, Activation::Silu});
    std::optional<OpCase> c = conv_case(spec, "input scale");
    REQUIRE(c.has_value());
    const bool shared = rng() % 3 == 0;
    const graph::Shape scale_shape{shared ? 1 : spec.batch, spec.channels, 1, 1};
    c->op.attrs.fused_input_scale = true;
    c->inputs.push_back(scale_shape);
    c->constant.push_back(false);
    INFO(describe(*c), " shared scale ", shared);

    // The reference, NCHW, whole output: fused vs X * S then the unfused conv.
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<std::vector<float>> data(c->inputs.size());
    for (size_t i = 0; i < data.size(); ++i) {
      data[i].resize(static_cast<size_t>(graph::shape_numel(c->inputs[i])));
      for (float& v : data[i]) v = dist(rng);
    }
    std::vector<float> scaled = data[0];
    const int64_t plane = spec.in_h * spec.in_w;
    for (int64_t n = 0; n < spec.batch; ++n)
      for (int64_t ch = 0; ch < spec.channels; ++ch)
        for (int64_t p = 0; p < plane; ++p)
          scaled[static_cast<size_t>((n * spec.channels + ch) * plane + p)] *=
              data.back()[static_cast<size_t>((shared ? 0 : n) * spec.channels + ch)];
    const graph::Region whole = graph::Region::whole(c->output);
    const auto numel = static_cast<size_t>(graph::shape_numel(c->output));
    std::vector<ConstTensorView> views;
    for (size_t i = 0; i < data.size(); ++i) views.push_back({data[i].data(), &c->inputs[i]});
    std::vector<float> fused(numel), unfused(numel);
    reference->run({.op = &c->op,
                    .inputs = views.data(),
                    .input_count = views.size(),
                    .output = {fused.data(), &c->output},
                    .region = &whole});
    graph::Operator plain = c->op;
    plain.attrs.fused_input_scale = false;
    views[0].data = scaled.data();
    reference->run({.op = &plain,
                    .inputs = views.data(),
                    .input_count = views.size() - 1,
                    .output = {unfused.data(), &c->output},
                    .region = &whole});
    int64_t differ = 0;
    for (size_t i = 0; i < numel; ++i) differ += !same_bits(fused[i], unfused[i]);
    CHECK(differ == 0);

    randomise_layouts(*c, rng, /*uniform=*/false);
    check_case("cpu.conv_gemm", *c, seed + static_cast<uint64_t>(t));
    std::vector<ConstTensorView> prepare_views;
    for (size_t i = 0; i < c->inputs.size(); ++i)
      prepare_views.push_back({c->constant[i] ? data[i].data() : nullptr, &c->inputs[i]});
    for (const char* other :
         {"cpu.conv_depthwise", "cpu.conv_winograd", "cpu.conv_winograd_2x2", "cpu.conv_sparse"}) {
      const TileKernelVariant* v = kernels::find_tile_kernel_variant(OpType::Conv, other);
      REQUIRE(v != nullptr);
      CHECK(v->applies(c->op, prepare_views).has_value());
    }
  }
  // Not a 1x1 stride-1 unpadded conv: cpu.conv_gemm refuses the scale.
  ConvSpec spec{.channels = 4, .out_channels = 4, .in_h = 5, .in_w = 5, .k_h = 3, .k_w = 3};
  std::optional<OpCase> c = conv_case(spec, "3x3 with a scale");
  REQUIRE(c.has_value());
  c->op.attrs.fused_input_scale = true;
  c->inputs.push_back({1, 4, 1, 1});
  std::vector<float> w(4 * 4 * 9, 0.5f);
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < c->inputs.size(); ++i)
    views.push_back({i == 1 ? w.data() : nullptr, &c->inputs[i]});
  const std::optional<std::string> why =
      kernels::find_tile_kernel_variant(OpType::Conv, "cpu.conv_gemm")->applies(c->op, views);
  REQUIRE(why.has_value());
  CHECK(why->find("1x1") != std::string::npos);
}

TEST_CASE("cpu.conv_depthwise matches the reference conv") {
  uint64_t seed = base_seed() * 7919u + 1000;
  ConvSpec wide3x3{.channels = 5,
                   .out_channels = 5,
                   .in_h = 7,
                   .in_w = 40,
                   .k_h = 3,
                   .k_w = 3,
                   .pad_top = 1,
                   .pad_left = 1,
                   .pad_bottom = 1,
                   .pad_right = 1,
                   .group = 5,
                   .activation = Activation::Clip};
  ConvSpec wide3x3_dilated = wide3x3;
  wide3x3_dilated.dilation_w = 2;
  wide3x3_dilated.pad_right = 0;
  ConvSpec stride2{.channels = 3,
                   .out_channels = 3,
                   .in_h = 9,
                   .in_w = 33,
                   .k_h = 5,
                   .k_w = 5,
                   .stride_h = 2,
                   .stride_w = 2,
                   .pad_top = 2,
                   .pad_left = 2,
                   .pad_bottom = 1,
                   .pad_right = 2,
                   .group = 3,
                   .bias = false,
                   .activation = Activation::Relu};
  ConvSpec single{
      .channels = 1, .out_channels = 1, .in_h = 1, .in_w = 1, .k_h = 1, .k_w = 1, .group = 1};
  for (const auto& [name, spec] : {std::pair<std::string, ConvSpec>{"3x3 s1 interior", wide3x3},
                                   {"3x3 s1 dilated", wide3x3_dilated},
                                   {"5x5 s2", stride2},
                                   {"1 channel 1x1", single}}) {
    const std::optional<OpCase> c = conv_case(spec, name);
    REQUIRE(c.has_value());
    check_case("cpu.conv_depthwise", *c, seed++);
  }
  std::mt19937_64 rng(base_seed() + 13);
  for (int i = 0; i < 100;) {
    std::optional<OpCase> c = conv_case(random_conv_spec(rng, true), "random");
    if (!c) continue;
    randomise_layouts(*c, rng, /*uniform=*/true);
    check_case("cpu.conv_depthwise", *c, seed++);
    ++i;
  }
}

// NHWC depthwise (conv_depthwise_nhwc_impl.hpp): X, Y and the residual all
// NHWC. Channel counts around the register blocks (1, 2 vectors of 4/8/16
// floats) and primes, so the scalar tail, the single-vector and the
// two-vector blocks all run; widths around the 4-pixel block with and
// without border columns; the 3×3 stride 1/2 specialisations and the
// generic path (other kernels, strides, dilations). check_case runs every
// ISA the CPU has (AVX-512, AVX2 forced, SSE2) on random tilings that also
// cut the channels, so tails start at any channel.
ConvSpec random_nhwc_depthwise_spec(std::mt19937_64& rng) {
  ConvSpec s;
  s.batch = pick<int64_t>(rng, {1, 1, 2});
  s.channels = pick<int64_t>(rng, {1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 37, 48, 67, 96});
  s.out_channels = s.group = s.channels;
  const int shape = static_cast<int>(rng() % 6);
  s.k_h = s.k_w = shape < 4 ? 3 : pick<int64_t>(rng, {1, 2, 5, 7});
  s.stride_h = s.stride_w = shape < 2 ? 1 : shape < 4 ? 2 : pick<int64_t>(rng, {1, 2, 3});
  if (rng() % 4 == 0) s.stride_h = pick<int64_t>(rng, {1, 2});  // unequal strides
  if (rng() % 5 == 0) s.dilation_h = 2;
  if (rng() % 5 == 0) s.dilation_w = pick<int64_t>(rng, {2, 3});
  auto pad = [&](int64_t k) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(k + 1)); };
  s.pad_top = pad(s.k_h / 2 + 1);
  s.pad_bottom = pad(s.k_h / 2 + 1);
  s.pad_left = pad(s.k_w / 2 + 1);
  s.pad_right = pad(s.k_w / 2 + 1);
  s.in_h = pick<int64_t>(rng, {1, 2, 3, 5, 6, 11});
  s.in_w = pick<int64_t>(rng, {1, 2, 4, 5, 7, 9, 13, 23, 30});
  s.bias = rng() % 4 != 0;
  s.activation = pick(rng, {Activation::None, Activation::Relu, Activation::Clip,
                            Activation::Sigmoid, Activation::Silu, Activation::LeakyRelu});
  s.residual = rng() % 3 == 0;
  return s;
}

void make_nhwc(OpCase& c) {
  c.layouts.assign(c.inputs.size(), graph::Layout::NCHW);
  c.layouts[0] = graph::Layout::NHWC;
  if (c.op.attrs.fused_residual) c.layouts[3] = graph::Layout::NHWC;
  c.out_layout = graph::Layout::NHWC;
}

// A k×k depthwise conv over `channels` channels of an in_h × in_w map, the
// same stride both ways and a "same" padding of k / 2 on every side.
ConvSpec square_depthwise(int64_t channels, int64_t in_h, int64_t in_w, int64_t k, int64_t stride,
                          Activation activation, int64_t batch = 1, bool residual = false) {
  const int64_t pad = k / 2;
  return {.batch = batch,
          .channels = channels,
          .out_channels = channels,
          .in_h = in_h,
          .in_w = in_w,
          .k_h = k,
          .k_w = k,
          .stride_h = stride,
          .stride_w = stride,
          .pad_top = pad,
          .pad_left = pad,
          .pad_bottom = pad,
          .pad_right = pad,
          .group = channels,
          .activation = activation,
          .residual = residual};
}

TEST_CASE("cpu.conv_depthwise NHWC: pixel blocks, borders and channel tails under every ISA") {
  uint64_t seed = base_seed() * 7919u + 3000;
  // MobileNetV2's shapes, scaled down: 3×3 s1 p1 and s2 with the ONNX
  // export's symmetric pad 1 (the s2 window overhangs only the left edge).
  const ConvSpec named[] = {
      {.channels = 32,
       .out_channels = 32,
       .in_h = 9,
       .in_w = 14,
       .k_h = 3,
       .k_w = 3,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .group = 32,
       .activation = Activation::Clip},
      {.channels = 144,
       .out_channels = 144,
       .in_h = 8,
       .in_w = 11,
       .k_h = 3,
       .k_w = 3,
       .stride_h = 2,
       .stride_w = 2,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .group = 144,
       .activation = Activation::Clip},
      {.channels = 1,
       .out_channels = 1,
       .in_h = 1,
       .in_w = 1,
       .k_h = 3,
       .k_w = 3,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .group = 1,
       .residual = true},
      {.batch = 2,
       .channels = 19,
       .out_channels = 19,
       .in_h = 4,
       .in_w = 29,
       .k_h = 3,
       .k_w = 3,
       .pad_top = 2,
       .pad_left = 2,
       .pad_bottom = 2,
       .pad_right = 2,
       .group = 19,
       .activation = Activation::Relu,
       .residual = true},
      // EfficientNet's 5×5 s1 and s2 (pad 2), each with its own register
      // path, over channels that leave a vector and a scalar tail.
      square_depthwise(43, 9, 13, 5, 1, Activation::Silu),
      square_depthwise(43, 9, 13, 5, 2, Activation::Silu, 1, false),
  };
  for (const ConvSpec& spec : named) {
    std::optional<OpCase> c = conv_case(spec, "nhwc named");
    REQUIRE(c.has_value());
    make_nhwc(*c);
    check_case("cpu.conv_depthwise", *c, seed++);
  }
  std::mt19937_64 rng(base_seed() + 17);
  for (int i = 0; i < 120;) {
    std::optional<OpCase> c = conv_case(random_nhwc_depthwise_spec(rng), "nhwc random");
    if (!c) continue;
    make_nhwc(*c);
    check_case("cpu.conv_depthwise", *c, seed++);
    ++i;
  }
}

// A depthwise conv over C channels with a fused 1x1 expansion from cin
// channels (attrs.fused_expand): X [N, cin, H, W], then the inputs of the
// depthwise spec (its bias always present), then EW [C, cin, 1, 1] and EB
// [C]. X, Y and the residual NHWC, as cpu.conv_expand_depthwise needs.
std::optional<OpCase> expand_depthwise_case(ConvSpec spec, int64_t cin, Activation expand,
                                            const std::string& label) {
  spec.bias = true;
  std::optional<OpCase> c = conv_case(spec, label);
  if (!c) return c;
  graph::OpAttributes& a = c->op.attrs;
  a.fused_expand = true;
  a.expand_activation = expand;
  a.expand_clip_min = -0.5f;
  a.expand_clip_max = 0.75f;
  c->inputs[0][1] = cin;
  c->inputs.push_back({spec.channels, cin, 1, 1});
  c->inputs.push_back({spec.channels});
  c->constant.push_back(true);
  c->constant.push_back(true);
  c->depth = spec.k_h * spec.k_w * cin;
  make_nhwc(*c);
  return c;
}

TEST_CASE("the reference's fused expansion is the 1x1 conv, then the depthwise conv, bit for bit") {
  std::mt19937_64 rng(base_seed() + 29);
  for (int i = 0; i < 40;) {
    ConvSpec spec = random_nhwc_depthwise_spec(rng);
    if (spec.one_d) continue;
    const int64_t cin = pick<int64_t>(rng, {1, 3, 8, 17});
    const Activation expand =
        pick(rng, {Activation::None, Activation::Relu, Activation::Clip, Activation::Silu});
    std::optional<OpCase> fused = expand_depthwise_case(spec, cin, expand, "reference");
    if (!fused) continue;
    ++i;
    INFO(describe(*fused));
    std::vector<std::vector<float>> data(fused->inputs.size());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t t = 0; t < data.size(); ++t) {
      data[t].resize(static_cast<size_t>(graph::shape_numel(fused->inputs[t])));
      for (float& x : data[t]) x = dist(rng);
    }
    const TileKernelVariant* reference =
        kernels::find_tile_kernel_variant(OpType::Conv, "reference");
    auto run = [&](const graph::Operator& op, std::vector<size_t> which, const Shape& out_shape,
                   std::vector<std::vector<float>>& all) {
      std::vector<ConstTensorView> views;
      for (size_t t : which) views.push_back({all[t].data(), &fused->inputs[t]});
      std::vector<float> out(static_cast<size_t>(graph::shape_numel(out_shape)));
      const graph::Region whole = graph::Region::whole(out_shape);
      reference->run({.op = &op,
                      .inputs = views.data(),
                      .input_count = views.size(),
                      .output = {out.data(), &out_shape},
                      .region = &whole});
      return out;
    };
    // The unfused pair: E = act(Conv1x1(X)), then the depthwise conv on E.
    const size_t e = graph::expand_weight_input(fused->op.attrs);
    graph::Operator expand_op;
    expand_op.type = OpType::Conv;
    expand_op.attrs.kernel_shape = {1, 1};
    expand_op.attrs.strides = {1, 1};
    expand_op.attrs.pads = {0, 0, 0, 0};
    expand_op.attrs.dilations = {1, 1};
    expand_op.attrs.activation = expand;
    expand_op.attrs.clip_min = fused->op.attrs.expand_clip_min;
    expand_op.attrs.clip_max = fused->op.attrs.expand_clip_max;
    const Shape& x = fused->inputs[0];
    const Shape e_shape = {x[0], spec.channels, x[2], x[3]};
    const size_t count = fused->inputs.size();
    data.push_back(run(expand_op, {0, e, e + 1}, e_shape, data));
    fused->inputs.push_back(e_shape);  // index count: E, for the views
    graph::Operator dw_op = fused->op;
    dw_op.attrs.fused_expand = false;
    std::vector<size_t> dw_inputs = {count, 1, 2};
    if (dw_op.attrs.fused_residual) dw_inputs.push_back(3);
    const std::vector<float> unfused = run(dw_op, dw_inputs, fused->output, data);
    std::vector<size_t> all_inputs(count);
    for (size_t t = 0; t < count; ++t) all_inputs[t] = t;
    const std::vector<float> direct = run(fused->op, all_inputs, fused->output, data);
    int64_t bad = 0;
    for (size_t t = 0; t < unfused.size(); ++t)
      if (!same_bits(unfused[t], direct[t]) && bad++ < 5)
        FAIL_CHECK("y[", t, "] = ", direct[t], ", unfused ", unfused[t]);
    CHECK(bad == 0);
  }
}

// cpu.conv_expand_depthwise against the reference: MobileNetV2's block
// shapes scaled down, one large enough that a tile's rows take several
// chunks of the band (the rows two chunks share moved, not recomputed), and
// random depthwise shapes (kernels, strides, dilations, pads, residuals,
// activations) with random input widths; check_case's random tiles cut
// rows, columns (so the band holds only the columns a tile reads) and
// channels, under every ISA.
TEST_CASE("cpu.conv_expand_depthwise matches the reference") {
  uint64_t seed = base_seed() * 7919u + 5000;
  struct Named {
    ConvSpec spec;
    int64_t cin;
    Activation expand;
  };
  const Named named[] = {
      {square_depthwise(96, 12, 12, 3, 2, Activation::Clip), 16, Activation::Clip},
      {square_depthwise(144, 9, 10, 3, 1, Activation::Clip), 24, Activation::Clip},
      // 48 × 160 floats per band row: 17 rows of 512 KiB, so the 40 rows
      // of a whole-height tile run as three chunks.
      {square_depthwise(160, 40, 48, 3, 1, Activation::Relu, 1, true), 8, Activation::Silu},
      {square_depthwise(170, 37, 45, 5, 2, Activation::Silu, 2), 5, Activation::None},
  };
  for (const Named& n : named) {
    std::optional<OpCase> c = expand_depthwise_case(n.spec, n.cin, n.expand, "expand named");
    REQUIRE(c.has_value());
    check_case("cpu.conv_expand_depthwise", *c, seed++);
  }
  std::mt19937_64 rng(base_seed() + 31);
  for (int i = 0; i < 60;) {
    ConvSpec spec = random_nhwc_depthwise_spec(rng);
    const int64_t cin = pick<int64_t>(rng, {1, 3, 8, 16, 17, 40});
    const Activation expand = pick(rng, {Activation::None, Activation::Relu, Activation::Clip,
                                         Activation::Sigmoid, Activation::Silu});
    std::optional<OpCase> c = expand_depthwise_case(spec, cin, expand, "expand random");
    if (!c) continue;
    check_case("cpu.conv_expand_depthwise", *c, seed++);
    ++i;
  }
}

TEST_CASE("cpu.conv_expand_depthwise refuses NCHW operands and unfused convs") {
  const ConvSpec spec = square_depthwise(16, 5, 5, 3, 1, Activation::None);
  std::optional<OpCase> c = expand_depthwise_case(spec, 4, Activation::Relu, "refusals");
  REQUIRE(c.has_value());
  const TileKernelVariant* fused =
      kernels::find_tile_kernel_variant(OpType::Conv, "cpu.conv_expand_depthwise");
  REQUIRE(fused != nullptr);
  std::vector<std::vector<float>> data(c->inputs.size());
  std::vector<ConstTensorView> views(c->inputs.size());
  for (size_t i = 0; i < c->inputs.size(); ++i) {
    data[i].assign(static_cast<size_t>(graph::shape_numel(c->inputs[i])), 0.5f);
    views[i] = {c->constant[i] ? data[i].data() : nullptr, &c->inputs[i], input_layout(*c, i)};
  }
  CHECK_FALSE(fused->applies(c->op, views).has_value());
  views[0].layout = graph::Layout::NCHW;
  const std::optional<std::string> nchw = fused->applies(c->op, views);
  REQUIRE(nchw.has_value());
  CHECK(nchw->find("NHWC") != std::string::npos);
  views[0].layout = graph::Layout::NHWC;
  // The other conv variants leave a fused expansion alone.
  for (const char* other :
       {"cpu.conv_depthwise", "cpu.conv_gemm", "cpu.conv_winograd", "cpu.conv_winograd_2x2"}) {
    const TileKernelVariant* v = kernels::find_tile_kernel_variant(OpType::Conv, other);
    REQUIRE(v != nullptr);
    const std::optional<std::string> why = v->applies(c->op, views);
    INFO(other);
    REQUIRE(why.has_value());
    CHECK(why->find("expansion") != std::string::npos);
  }
  std::optional<OpCase> plain = conv_case(spec, "plain depthwise");
  REQUIRE(plain.has_value());
  std::vector<ConstTensorView> plain_views;
  for (size_t i = 0; i < plain->inputs.size(); ++i)
    plain_views.push_back({nullptr, &plain->inputs[i], graph::Layout::NHWC});
  const std::optional<std::string> unfused = fused->applies(plain->op, plain_views);
  REQUIRE(unfused.has_value());
  CHECK(unfused->find("no fused 1x1 expansion") != std::string::npos);
}

// The dataflow executor promises bitwise-identical outputs for any thread
// count, i.e. for any tiling: a channel must give the same bits whether it
// falls in a two-vector block, a single vector or the scalar tail of its
// tile, and a pixel whether it is in a 4-pixel block or alone.
TEST_CASE(
    "cpu.conv_depthwise NHWC: every tiling, with W prepared or transposed per tile, gives the same "
    "bits") {
  const ConvSpec specs[] = {
      {.channels = 53,
       .out_channels = 53,
       .in_h = 7,
       .in_w = 19,
       .k_h = 3,
       .k_w = 3,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .group = 53,
       .activation = Activation::Clip,
       .residual = true},
      {.channels = 45,
       .out_channels = 45,
       .in_h = 9,
       .in_w = 17,
       .k_h = 3,
       .k_w = 3,
       .stride_h = 2,
       .stride_w = 2,
       .pad_top = 1,
       .pad_left = 1,
       .pad_bottom = 1,
       .pad_right = 1,
       .group = 45,
       .activation = Activation::Relu},
      {.channels = 29,
       .out_channels = 29,
       .in_h = 6,
       .in_w = 13,
       .k_h = 5,
       .k_w = 5,
       .dilation_w = 2,
       .pad_top = 2,
       .pad_left = 3,
       .pad_bottom = 2,
       .pad_right = 3,
       .group = 29},
  };
  std::mt19937_64 rng(base_seed() + 19);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const TileKernelVariant* variant =
      kernels::find_tile_kernel_variant(OpType::Conv, "cpu.conv_depthwise");
  REQUIRE(variant != nullptr);
  IsaGuard guard;
  for (const ConvSpec& spec : specs) {
    std::optional<OpCase> c = conv_case(spec, "nhwc tilings");
    REQUIRE(c.has_value());
    make_nhwc(*c);
    INFO(describe(*c));
    std::vector<std::vector<float>> data(c->inputs.size());
    std::vector<ConstTensorView> views(c->inputs.size());
    for (size_t i = 0; i < c->inputs.size(); ++i) {
      data[i].resize(static_cast<size_t>(graph::shape_numel(c->inputs[i])));
      for (float& x : data[i]) x = dist(rng);
      views[i] = {data[i].data(), &c->inputs[i], input_layout(*c, i)};
    }
    const size_t numel = static_cast<size_t>(graph::shape_numel(c->output));
    // W a constant (transposed tap-major once, at prepare) and W known only
    // at run time (transposed per tile): the same bits either way.
    const kernels::PreparedOp constant_w = variant->prepare(c->op, views);
    std::vector<ConstTensorView> runtime_views = views;
    runtime_views[1].data = nullptr;
    const kernels::PreparedOp runtime_w = variant->prepare(c->op, runtime_views);
    for (cpu::GemmIsa isa : supported_isas()) {
      INFO("ISA ", cpu::gemm_isa_name(isa));
      cpu::set_gemm_isa(isa);
      auto run = [&](const std::vector<graph::Region>& tiles, const kernels::PreparedOp& prep) {
        std::vector<float> out(numel, std::numeric_limits<float>::quiet_NaN());
        for (const graph::Region& tile : tiles)
          variant->run({&c->op,
                        views.data(),
                        views.size(),
                        {out.data(), &c->output, graph::Layout::NHWC},
                        &tile,
                        prep.get()});
        return out;
      };
      const std::vector<float> whole = run({graph::Region::whole(c->output)}, constant_w);
      for (int trial = 0; trial < 6; ++trial) {
        const std::vector<graph::Region> tiles = random_tiles(c->output, rng);
        const std::vector<float> tiled = run(tiles, constant_w);
        CHECK(std::memcmp(whole.data(), tiled.data(), numel * sizeof(float)) == 0);
        const std::vector<float> per_tile_w = run(tiles, runtime_w);
        CHECK(std::memcmp(whole.data(), per_tile_w.data(), numel * sizeof(float)) == 0);
      }
    }
  }
}

// Gemm: C forms by name.
enum class CForm { kNone, kRank0, kOne, kOneByOne, kColumns, kOneByColumns, kRowsByOne, kFull };

OpCase gemm_case(int64_t m, int64_t k, int64_t n, bool trans_a, bool trans_b, float alpha,
                 float beta, CForm form, bool c_constant, Activation act) {
  OpCase c;
  c.label = "gemm";
  c.op.name = "gemm";
  c.op.type = OpType::Gemm;
  graph::OpAttributes& a = c.op.attrs;
  a.trans_a = trans_a;
  a.trans_b = trans_b;
  a.alpha = alpha;
  a.beta = beta;
  a.activation = act;
  a.clip_min = -0.5f;
  a.clip_max = 0.75f;
  a.leaky_relu_alpha = 0.2f;
  c.inputs = {trans_a ? Shape{k, m} : Shape{m, k}, trans_b ? Shape{n, k} : Shape{k, n}};
  c.constant = {false, true};
  switch (form) {
    case CForm::kNone:
      break;
    case CForm::kRank0:
      c.inputs.push_back({});
      break;
    case CForm::kOne:
      c.inputs.push_back({1});
      break;
    case CForm::kOneByOne:
      c.inputs.push_back({1, 1});
      break;
    case CForm::kColumns:
      c.inputs.push_back({n});
      break;
    case CForm::kOneByColumns:
      c.inputs.push_back({1, n});
      break;
    case CForm::kRowsByOne:
      c.inputs.push_back({m, 1});
      break;
    case CForm::kFull:
      c.inputs.push_back({m, n});
      break;
  }
  if (form != CForm::kNone) c.constant.push_back(c_constant);
  c.output = {m, n};
  c.depth = k;
  return c;
}

TEST_CASE("cpu.gemm matches the reference gemm: every C form, transposes, alpha, beta") {
  uint64_t seed = base_seed() * 7919u + 2000;
  std::mt19937_64 rng(base_seed() + 17);
  const CForm forms[] = {CForm::kNone,    CForm::kRank0,        CForm::kOne,       CForm::kOneByOne,
                         CForm::kColumns, CForm::kOneByColumns, CForm::kRowsByOne, CForm::kFull};
  // Every C form × constness × transposes once, on random sizes.
  for (CForm form : forms)
    for (bool c_constant : {true, false})
      for (int t = 0; t < 4; ++t) {
        const int64_t m = pick<int64_t>(rng, {1, 2, 7, 13, 31, 67});
        const int64_t k = pick<int64_t>(rng, {1, 3, 17, 64, 333});
        const int64_t n = pick<int64_t>(rng, {1, 5, 16, 67, 130});
        const float alpha = pick(rng, {1.0f, 0.5f, -1.25f});
        const float beta = pick(rng, {1.0f, 0.75f, 0.0f});
        const Activation act =
            pick(rng, {Activation::None, Activation::Relu, Activation::Clip, Activation::Sigmoid,
                       Activation::Silu, Activation::LeakyRelu});
        check_case("cpu.gemm", gemm_case(m, k, n, t & 1, t & 2, alpha, beta, form, c_constant, act),
                   seed++);
      }
  // trans_a with more rows than one A^T panel holds (2^17 floats / K).
  check_case(
      "cpu.gemm",
      gemm_case(150, 1000, 20, true, false, 1.0f, 1.0f, CForm::kRowsByOne, true, Activation::Relu),
      seed++);
}

// With `bias`, the fused per-column bias [N] (graph/fuse_matmul_bias.hpp) as input 2.
OpCase matmul_case(const Shape& a_batch, int64_t m, int64_t k, int64_t n, Activation act,
                   bool bias = false) {
  OpCase c;
  c.label = "matmul";
  c.op.name = "matmul";
  c.op.type = OpType::MatMul;
  c.op.attrs.activation = act;
  c.op.attrs.clip_min = 0.0f;
  c.op.attrs.clip_max = 0.5f;
  c.op.attrs.leaky_relu_alpha = 0.3f;
  Shape a = a_batch;
  a.push_back(m);
  a.push_back(k);
  c.inputs = {a, {k, n}};
  c.constant = {false, true};
  if (bias) {
    c.label += "_bias";
    c.inputs.push_back({n});
    c.constant.push_back(true);
  }
  c.output = a_batch;
  c.output.push_back(m);
  c.output.push_back(n);
  c.depth = k;
  return c;
}

TEST_CASE("cpu.matmul matches the reference matmul for A of rank 2 to 4") {
  uint64_t seed = base_seed() * 7919u + 3000;
  std::mt19937_64 rng(base_seed() + 19);
  for (int i = 0; i < 60; ++i) {
    Shape batch;
    const int rank = 2 + static_cast<int>(rng() % 3);
    for (int d = 2; d < rank; ++d) batch.push_back(pick<int64_t>(rng, {1, 2, 3}));
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 13, 37});
    const int64_t k = pick<int64_t>(rng, {1, 4, 19, 330});
    const int64_t n = pick<int64_t>(rng, {1, 7, 64, 71});
    const Activation act = pick(
        rng, {Activation::None, Activation::Relu, Activation::Clip, Activation::Sigmoid,
              Activation::Gelu, Activation::GeluTanh, Activation::Silu, Activation::LeakyRelu});
    check_case("cpu.matmul", matmul_case(batch, m, k, n, act, /*bias=*/i % 2 == 1), seed++);
  }
}

// Attention's products: A [..., M, K] · B [..., K, N], B an activation whose
// batch dims equal A's or are 1 (broadcast).
TEST_CASE("cpu.matmul_batched matches the reference matmul (activation B, batch broadcast)") {
  uint64_t seed = base_seed() * 7919u + 4000;
  std::mt19937_64 rng(base_seed() + 23);
  for (int i = 0; i < 60; ++i) {
    const int rank = 2 + static_cast<int>(rng() % 3);
    Shape a_batch, b_batch;
    for (int d = 2; d < rank; ++d) {
      a_batch.push_back(pick<int64_t>(rng, {1, 2, 3, 5}));
      b_batch.push_back(rng() % 3 == 0 ? 1 : a_batch.back());
    }
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 13, 37});
    const int64_t k = pick<int64_t>(rng, {1, 4, 19, 64});
    const int64_t n = pick<int64_t>(rng, {1, 7, 16, 71});
    OpCase c = matmul_case(a_batch, m, k, n,
                           pick(rng, {Activation::None, Activation::Relu, Activation::Clip,
                                      Activation::Sigmoid, Activation::Gelu, Activation::GeluTanh,
                                      Activation::Silu, Activation::LeakyRelu}));
    c.label = "matmul_batched";
    c.inputs[1] = b_batch;
    c.inputs[1].push_back(k);
    c.inputs[1].push_back(n);
    c.constant = {false, false};
    check_case("cpu.matmul_batched", c, seed++);
  }
}

// A fused residual (graph/fuse_residual.hpp): input 3, the output's shape,
// an activation, added after the bias or C and before the activation.
OpCase with_residual(OpCase c) {
  c.label += "_residual";
  c.op.attrs.fused_residual = true;
  c.inputs.push_back(c.output);
  c.constant.push_back(false);
  return c;
}

TEST_CASE("cpu.matmul, cpu.matmul_batched and cpu.gemm add a fused residual like the reference") {
  uint64_t seed = base_seed() * 7919u + 5000;
  std::mt19937_64 rng(base_seed() + 29);
  for (int i = 0; i < 30; ++i) {
    Shape batch;
    for (int d = 0; d < i % 3; ++d) batch.push_back(pick<int64_t>(rng, {1, 2, 3}));
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 13, 37});
    const int64_t k = pick<int64_t>(rng, {1, 4, 19, 330});
    const int64_t n = pick<int64_t>(rng, {1, 7, 16, 64, 71});
    const Activation act = pick(
        rng, {Activation::None, Activation::Relu, Activation::Clip, Activation::Sigmoid,
              Activation::Gelu, Activation::GeluTanh, Activation::Silu, Activation::LeakyRelu});
    check_case("cpu.matmul", with_residual(matmul_case(batch, m, k, n, act, /*bias=*/true)),
               seed++);
    // B an activation (2-D: the fused bias needs that).
    OpCase batched = with_residual(matmul_case({}, m, k, n, act, /*bias=*/true));
    batched.constant[1] = false;
    check_case("cpu.matmul_batched", batched, seed++);
    // Every C form but a full [M, N] one (it takes the residual's slot),
    // constant or not (a run-time C with beta != 1 is added after the GEMM).
    const CForm form = pick(rng, {CForm::kRank0, CForm::kOne, CForm::kOneByOne, CForm::kColumns,
                                  CForm::kOneByColumns, CForm::kRowsByOne});
    check_case("cpu.gemm",
               with_residual(gemm_case(m, k, n, i & 1, i & 2, pick(rng, {1.0f, 0.5f, -1.25f}),
                                       pick(rng, {1.0f, 0.75f, 0.0f}), form, i % 4 < 2, act)),
               seed++);
  }
}

TEST_CASE("applies(): a fused residual beside a full C, or of the wrong shape") {
  const OpCase full_c = with_residual(
      gemm_case(3, 4, 5, false, false, 1.0f, 1.0f, CForm::kFull, true, Activation::None));
  const TileKernelVariant* v = kernels::find_tile_kernel_variant(OpType::Gemm, "cpu.gemm");
  REQUIRE(v != nullptr);
  static const float dummy[1] = {0.0f};
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < full_c.inputs.size(); ++i)
    views.push_back({full_c.constant[i] ? dummy : nullptr, &full_c.inputs[i]});
  const std::optional<std::string> why = v->applies(full_c.op, views);
  REQUIRE(why.has_value());
  CHECK(why->find("fused residual") != std::string::npos);
  OpCase mm = with_residual(matmul_case({2}, 3, 4, 5, Activation::None, /*bias=*/true));
  mm.inputs[3] = {3, 5};  // not the output's [2, 3, 5]
  const TileKernelVariant* m = kernels::find_tile_kernel_variant(OpType::MatMul, "cpu.matmul");
  REQUIRE(m != nullptr);
  std::vector<ConstTensorView> mm_views;
  for (size_t i = 0; i < mm.inputs.size(); ++i)
    mm_views.push_back({mm.constant[i] ? dummy : nullptr, &mm.inputs[i]});
  const std::optional<std::string> mm_why = m->applies(mm.op, mm_views);
  REQUIRE(mm_why.has_value());
  CHECK(mm_why->find("fused residual") != std::string::npos);
}

// applies() for a case, the constants as the case marks them.
std::optional<std::string> applies(std::string_view variant_name, const OpCase& c) {
  const TileKernelVariant* v = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  REQUIRE(v != nullptr);
  REQUIRE(static_cast<bool>(v->applies));
  static const float dummy[1] = {0.0f};  // applies() only tests data for null
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    views.push_back({c.constant[i] ? dummy : nullptr, &c.inputs[i]});
  return v->applies(c.op, views);
}

void check_reason(const std::optional<std::string>& why, const std::string& part) {
  REQUIRE(why.has_value());
  INFO("reason: ", *why);
  CHECK(why->find(part) != std::string::npos);
}

TEST_CASE("applies() says why a variant does not fit") {
  ConvSpec grouped{
      .channels = 4, .out_channels = 6, .in_h = 5, .in_w = 5, .k_h = 3, .k_w = 3, .group = 2};
  const OpCase grouped_case = *conv_case(grouped, "grouped");
  check_reason(applies("cpu.conv_gemm", grouped_case), "groups > 1");
  check_reason(applies("cpu.conv_depthwise", grouped_case), "not depthwise");

  ConvSpec depthwise = grouped;
  depthwise.group = 4;
  depthwise.out_channels = 4;
  const OpCase depthwise_case = *conv_case(depthwise, "depthwise");
  CHECK_FALSE(applies("cpu.conv_depthwise", depthwise_case).has_value());
  check_reason(applies("cpu.conv_gemm", depthwise_case), "groups > 1");
  ConvSpec multiplier = depthwise;  // depth multiplier 2: OC = 2·C
  multiplier.out_channels = 8;
  check_reason(applies("cpu.conv_depthwise", *conv_case(multiplier, "multiplier")),
               "not depthwise");

  OpCase runtime_weights =
      *conv_case({.channels = 3, .out_channels = 2, .in_h = 4, .in_w = 4}, "runtime weights");
  CHECK_FALSE(applies("cpu.conv_gemm", runtime_weights).has_value());
  runtime_weights.constant[1] = false;
  check_reason(applies("cpu.conv_gemm", runtime_weights), "weights are not constant");
  OpCase conv3d = runtime_weights;
  conv3d.inputs = {{1, 3, 4, 4, 4}, {2, 3, 1, 1, 1}, {2}};
  check_reason(applies("cpu.conv_gemm", conv3d), "only 1-D and 2-D");

  OpCase g = gemm_case(4, 5, 6, false, false, 1.0f, 1.0f, CForm::kFull, false, Activation::None);
  CHECK_FALSE(applies("cpu.gemm", g).has_value());
  g.constant[1] = false;
  check_reason(applies("cpu.gemm", g), "B is not constant");
  OpCase bad_c = gemm_case(4, 5, 6, false, false, 1.0f, 1.0f, CForm::kFull, true, Activation::None);
  bad_c.inputs[2] = {4, 3};
  check_reason(applies("cpu.gemm", bad_c), "does not broadcast");

  OpCase mm = matmul_case({2}, 3, 4, 5, Activation::None);
  CHECK_FALSE(applies("cpu.matmul", mm).has_value());
  OpCase batched_b = mm;
  batched_b.inputs[1] = {2, 4, 5};
  check_reason(applies("cpu.matmul", batched_b), "not 2-D");
  OpCase vector_a = mm;
  vector_a.inputs[0] = {4};
  check_reason(applies("cpu.matmul", vector_a), "rank >= 2");
  mm.constant[1] = false;
  check_reason(applies("cpu.matmul", mm), "B is not constant");
}

TEST_CASE("the CPU variants are registered above the reference") {
  for (auto [type, name] :
       {std::pair{OpType::Conv, "cpu.conv_gemm"}, std::pair{OpType::Conv, "cpu.conv_depthwise"},
        std::pair{OpType::Gemm, "cpu.gemm"}, std::pair{OpType::MatMul, "cpu.matmul"}}) {
    const TileKernelVariant* v = kernels::find_tile_kernel_variant(type, name);
    REQUIRE(v != nullptr);
    CHECK(v->preference > kernels::find_tile_kernel_variant(type, "reference")->preference);
    CHECK(static_cast<bool>(v->applies));
  }
}

// A tile's result may not depend on the thread that runs it, i.e. on the
// history (size, alignment, stale contents) of its per-thread scratch: the
// dataflow executor promises bitwise-identical outputs for any thread count.
TEST_CASE("conv variants give bitwise-identical tiles whatever ran on the thread before") {
  for (const char* name :
       {"cpu.conv_depthwise", "cpu.conv_gemm", "cpu.conv_winograd", "cpu.conv_winograd_2x2"}) {
    INFO(name);
    const bool depthwise = std::string(name) == "cpu.conv_depthwise";
    graph::Operator op;
    op.name = "conv";
    op.type = OpType::Conv;
    op.attrs.kernel_shape = {3, 3};
    op.attrs.strides = {1, 1};
    op.attrs.pads = {1, 1, 1, 1};
    op.attrs.dilations = {1, 1};
    op.attrs.group = depthwise ? 8 : 1;
    op.attrs.activation = Activation::Relu;
    const graph::Shape xs{1, 8, 9, 9}, ws{8, depthwise ? 1 : 8, 3, 3}, bs{8}, ys{1, 8, 9, 9};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(648), w(static_cast<size_t>(graph::shape_numel(ws))), b(8);
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : b) v = u(rng);
    const ConstTensorView in[3] = {{x.data(), &xs}, {w.data(), &ws}, {b.data(), &bs}};
    const TileKernelVariant* variant = kernels::find_tile_kernel_variant(OpType::Conv, name);
    REQUIRE(variant != nullptr);
    const kernels::PreparedOp prepared =
        variant->prepare ? variant->prepare(op, std::span<const ConstTensorView>(in)) : nullptr;
    auto run_tiles = [&](std::vector<float>& y, int history) {
      std::vector<float> junk(648);
      for (int i = 0; i < history; ++i) {  // other tile shapes grow the scratch first
        graph::Region r{{0, 0, 0, 0}, {1, 8, 1 + i % 9, 9}};
        variant->run({&op, in, 3, {junk.data(), &ys}, &r, prepared.get()});
      }
      for (int64_t t = 0; t < 7; ++t) {
        graph::Region r{{0, 0, t * 9 / 7, 0}, {1, 8, (t + 1) * 9 / 7, 9}};
        variant->run({&op, in, 3, {y.data(), &ys}, &r, prepared.get()});
      }
    };
    std::vector<float> first(648), fresh(648), later(648);
    run_tiles(first, 0);
    std::thread([&] { run_tiles(fresh, 0); }).join();
    std::thread([&] { run_tiles(later, 6); }).join();
    CHECK(std::memcmp(first.data(), fresh.data(), first.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(first.data(), later.data(), first.size() * sizeof(float)) == 0);
  }
}

// cpu.conv_winograd (F(4×4, 3×3)): its transforms scale values by up to
// 10·10 on the way in and 19·19 on the way out (the rows of B^T and A^T), so
// it rounds more than a direct sum. On ResNet-50's layers its max error is
// 2-4× conv_gemm's (bench_conv ... winograd); 16× the direct bound leaves
// headroom for the unlucky random shapes here without hiding a wrong
// transform (which errs by O(1), not O(eps)).
constexpr double kWinogradToleranceScale = 16.0;
// cpu.conv_winograd_2x2 (F(2×2, 3×3)): its transforms only add and halve
// (rows of B^T, G and A^T have at most 3 terms of ±1 or ±1/2), so it rounds
// about as a direct sum; 4× the direct bound.
constexpr double kWinograd2x2ToleranceScale = 4.0;

// The Winograd forms, with the tolerance each is tested to.
constexpr std::pair<const char*, double> kWinogradForms[] = {
    {"cpu.conv_winograd", kWinogradToleranceScale},
    {"cpu.conv_winograd_2x2", kWinograd2x2ToleranceScale}};

ConvSpec random_winograd_spec(std::mt19937_64& rng) {
  ConvSpec s;
  s.batch = pick<int64_t>(rng, {1, 1, 2});
  s.channels = pick<int64_t>(rng, {1, 2, 3, 5, 7, 13, 17, 33, 64});
  s.out_channels = pick<int64_t>(rng, {1, 3, 5, 16, 17, 31, 67, 130});
  s.k_h = s.k_w = 3;
  s.in_h = 1 + static_cast<int64_t>(rng() % 13);
  s.in_w = 1 + static_cast<int64_t>(rng() % 13);
  s.pad_top = static_cast<int64_t>(rng() % 3);
  s.pad_left = static_cast<int64_t>(rng() % 3);
  s.pad_bottom = static_cast<int64_t>(rng() % 3);
  s.pad_right = static_cast<int64_t>(rng() % 3);
  s.bias = rng() % 3 != 0;
  s.activation = pick(rng, {Activation::None, Activation::Relu, Activation::Clip,
                            Activation::Sigmoid, Activation::Silu, Activation::LeakyRelu});
  s.residual = rng() % 3 == 0;
  return s;
}

// Both forms on the case.
void check_winograd_case(const OpCase& c, uint64_t seed) {
  std::vector<ConstTensorView> views;
  std::vector<float> dummy(1 << 16);
  for (size_t i = 0; i < c.inputs.size(); ++i)
    views.push_back({c.constant[i] ? dummy.data() : nullptr, &c.inputs[i]});
  const std::optional<std::string> why = cpu::conv_winograd_supports(c.op, views);
  REQUIRE_MESSAGE(!why, describe(c), ": ", why.value_or(""));
  for (const auto& [form, tolerance_scale] : kWinogradForms)
    check_case(form, c, seed, tolerance_scale, /*require_applies=*/false);
}

TEST_CASE("cpu.conv_winograd and cpu.conv_winograd_2x2 match the reference conv") {
  uint64_t seed = base_seed() * 7919u + 3001;
  const ConvSpec p1{
      .k_h = 3, .k_w = 3, .pad_top = 1, .pad_left = 1, .pad_bottom = 1, .pad_right = 1};
  auto with = [](ConvSpec s, auto&& edit) {
    edit(s);
    return s;
  };
  const std::pair<const char*, ConvSpec> named[] = {
      {"1x1 image, pad 1", with(p1, [](ConvSpec& s) { s.out_channels = 3; })},
      {"ResNet-like 64 -> 64 at 14x14, residual, relu", with(p1,
                                                             [](ConvSpec& s) {
                                                               s.channels = s.out_channels = 64;
                                                               s.in_h = s.in_w = 14;
                                                               s.residual = true;
                                                               s.activation = Activation::Relu;
                                                             })},
      {"C 130 OC 67, 9x11 (partial blocks), no pad", with(p1,
                                                          [](ConvSpec& s) {
                                                            s.channels = 130;
                                                            s.out_channels = 67;
                                                            s.in_h = 9;
                                                            s.in_w = 11;
                                                            s.pad_top = s.pad_left = s.pad_bottom =
                                                                s.pad_right = 0;
                                                          })},
      {"pad 2 on every side, 5x4", with(p1,
                                        [](ConvSpec& s) {
                                          s.channels = 17;
                                          s.out_channels = 16;
                                          s.in_h = 5;
                                          s.in_w = 4;
                                          s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 2;
                                        })},
      {"24x24: several chunks of blocks", with(p1,
                                               [](ConvSpec& s) {
                                                 s.channels = 256;
                                                 s.out_channels = 260;
                                                 s.in_h = s.in_w = 24;
                                                 s.batch = 2;
                                               })},
  };
  for (const auto& [name, spec] : named) {
    std::optional<OpCase> c = conv_case(spec, name);
    REQUIRE(c.has_value());
    check_winograd_case(*c, seed++);
    std::mt19937_64 rng(seed);
    randomise_layouts(*c, rng, /*uniform=*/false);
    check_winograd_case(*c, seed++);
  }
  std::mt19937_64 rng(base_seed() + 3011);
  for (int i = 0; i < 200;) {
    std::optional<OpCase> c = conv_case(random_winograd_spec(rng), "random");
    if (!c) continue;
    randomise_layouts(*c, rng, /*uniform=*/false);
    check_winograd_case(*c, seed++);
    ++i;
  }
}

TEST_CASE("cpu.conv_winograd and cpu.conv_winograd_2x2 read only the input their tile depends on") {
  // A tile of 1-3 rows or columns is covered by whole 4x4 (2x2) blocks that
  // overhang it; the input past the tile's dependencies (tile_dependencies())
  // may be being written by another tile, or hold an earlier tensor's bytes
  // in the arena. NaN there must not reach the tile's pixels.
  ConvSpec spec{.channels = 33, .out_channels = 40, .in_h = 14, .in_w = 13, .k_h = 3, .k_w = 3};
  spec.pad_top = spec.pad_left = spec.pad_bottom = spec.pad_right = 1;
  std::optional<OpCase> c = conv_case(spec, "14x13");
  REQUIRE(c.has_value());
  std::mt19937_64 rng(base_seed() + 4099);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> data(c->inputs.size());
  for (size_t i = 0; i < data.size(); ++i) {
    data[i].resize(static_cast<size_t>(graph::shape_numel(c->inputs[i])));
    for (float& x : data[i]) x = dist(rng);
  }
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < data.size(); ++i) views.push_back({data[i].data(), &c->inputs[i]});
  const int64_t numel = graph::shape_numel(c->output);
  std::vector<float> expected(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c->output);
  kernels::find_tile_kernel_variant(OpType::Conv, "reference")
      ->run({.op = &c->op,
             .inputs = views.data(),
             .input_count = views.size(),
             .output = {expected.data(), &c->output},
             .region = &whole});
  IsaGuard guard;
  for (const auto& [form, tolerance_scale] : kWinogradForms)
    for (cpu::GemmIsa isa : supported_isas())
      for (graph::Layout layout : {graph::Layout::NCHW, graph::Layout::NHWC})
        for (const auto& [rows, cols] :
             {std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>{{0, 1}, {0, 13}},
              {{3, 5}, {0, 13}},
              {{5, 8}, {2, 5}},
              {{13, 14}, {11, 13}}}) {
          const TileKernelVariant* winograd = kernels::find_tile_kernel_variant(OpType::Conv, form);
          REQUIRE(winograd != nullptr);
          const double tol = 4.0 * tolerance_scale * std::numeric_limits<float>::epsilon() *
                             (static_cast<double>(c->depth) * max_abs(data[0]) * max_abs(data[1]) +
                              1.0 + max_abs(data[2]));
          INFO(form, ", ISA ", cpu::gemm_isa_name(isa), ", ", graph::layout_name(layout), ", rows ",
               rows.first, ":", rows.second, ", columns ", cols.first, ":", cols.second);
          cpu::set_gemm_isa(isa);
          graph::Region tile = whole;
          tile.begin[2] = rows.first, tile.end[2] = rows.second;
          tile.begin[3] = cols.first, tile.end[3] = cols.second;
          graph::Region needed;
          for (const graph::InputDependency& dep :
               graph::tile_dependencies(c->op, c->inputs, c->output, tile))
            if (dep.operand == 0) needed = dep.region;
          REQUIRE(needed.begin.size() == 4);
          std::vector<float> poisoned = data[0];
          for (int64_t i = 0; i < static_cast<int64_t>(poisoned.size()); ++i)
            if (!inside(needed, c->inputs[0], i))
              poisoned[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> x = test::to_layout(poisoned, c->inputs[0], layout);
          std::vector<ConstTensorView> run_views = views;
          run_views[0] = {x.data(), &c->inputs[0], layout};
          const kernels::PreparedOp prepared = winograd->prepare(c->op, views);
          std::vector<float> out(static_cast<size_t>(numel), 0.0f);
          winograd->run({.op = &c->op,
                         .inputs = run_views.data(),
                         .input_count = run_views.size(),
                         .output = {out.data(), &c->output, layout},
                         .region = &tile,
                         .prepared = prepared.get()});
          out = test::from_layout(out, c->output, layout);
          int64_t bad = 0;
          for (int64_t i = 0; i < numel; ++i)
            if (inside(tile, c->output, i) &&
                !(std::fabs(static_cast<double>(out[i]) - expected[i]) <= tol) && bad++ < 3)
              FAIL_CHECK("y[", i, "] = ", out[i], ", reference ", expected[i]);
          CHECK(bad == 0);
        }
}

// The compiler's choice among the 3x3 conv variants, and its report: each
// Winograd form on the maps it takes, and variants skipped for the same
// reason named together in one entry.
TEST_CASE("the kernel choice picks the Winograd form by map size and explains it") {
  auto choose = [](const ConvSpec& spec) {
    const OpCase c = *conv_case(spec, "choice");
    std::vector<std::vector<float>> data;
    std::vector<ConstTensorView> views;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      data.emplace_back(static_cast<size_t>(graph::shape_numel(c.inputs[i])), 1.0f);
    for (size_t i = 0; i < c.inputs.size(); ++i)
      views.push_back({c.constant[i] ? data[i].data() : nullptr, &c.inputs[i]});
    return kernels::choose_kernel(c.op, views, kernels::KernelPolicy::Fastest);
  };
  auto reported = [](const kernels::KernelChoice& choice, const std::string& text) {
    return std::find(choice.skipped.begin(), choice.skipped.end(), text) != choice.skipped.end();
  };
  ConvSpec spec = padded_3x3(32, 48, 13, 13);
  CHECK(choose(spec).kernel == "cpu.conv_winograd_2x2");
  spec.in_h = spec.in_w = 14;
  CHECK(choose(spec).kernel == "cpu.conv_winograd");
  // F(2x2)'s smallest map depends on the SGEMM's ISA: 10x10 with AVX-512,
  // 7x7 with AVX2 and the baseline (conv_winograd_2x2_applies()).
  IsaGuard guard;
  for (cpu::GemmIsa isa : supported_isas()) {
    INFO("ISA ", cpu::gemm_isa_name(isa));
    cpu::set_gemm_isa(isa);
    const bool avx512 = isa == cpu::GemmIsa::kAvx512;
    spec.in_h = spec.in_w = 7;
    const kernels::KernelChoice seven = choose(spec);
    CHECK(seven.kernel == (avx512 ? "cpu.conv_gemm" : "cpu.conv_winograd_2x2"));
    CHECK(reported(seven,
                   "cpu.conv_winograd: output 7x7 is below 14x14 (too few 4x4 blocks to win)"));
    CHECK(reported(seven,
                   "cpu.conv_winograd_2x2: output 7x7 is below 10x10 (too few 2x2 "
                   "blocks to win)") == avx512);
    spec.in_h = spec.in_w = 6;
    CHECK(choose(spec).kernel == "cpu.conv_gemm");
  }
  spec.k_h = spec.k_w = 1;
  spec.pad_top = spec.pad_left = spec.pad_bottom = spec.pad_right = 0;
  const kernels::KernelChoice pointwise = choose(spec);
  CHECK(pointwise.kernel == "cpu.conv_gemm");
  CHECK(reported(pointwise, "cpu.conv_winograd, cpu.conv_winograd_2x2: kernel 1x1 is not 3x3"));
}

TEST_CASE("cpu.conv_winograd says which convs it cannot compute") {
  const ConvSpec base{.channels = 4, .out_channels = 6, .in_h = 8, .in_w = 8, .k_h = 3, .k_w = 3};
  CHECK_FALSE(applies("cpu.conv_gemm", *conv_case(base, "3x3")).has_value());
  std::vector<float> dummy(1024);
  auto supports = [&](const OpCase& c) {
    std::vector<ConstTensorView> views;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      views.push_back({c.constant[i] ? dummy.data() : nullptr, &c.inputs[i]});
    return cpu::conv_winograd_supports(c.op, views);
  };
  CHECK_FALSE(supports(*conv_case(base, "3x3")).has_value());
  ConvSpec s = base;
  s.k_h = 5;
  check_reason(supports(*conv_case(s, "5x3")), "is not 3x3");
  s = base;
  s.stride_w = 2;
  check_reason(supports(*conv_case(s, "stride 2")), "stride is not 1");
  s = base;
  s.dilation_h = 2;
  check_reason(supports(*conv_case(s, "dilated")), "dilation is not 1");
  s = base;
  s.group = 2;
  check_reason(supports(*conv_case(s, "grouped")), "groups > 1");
  s = base;
  s.one_d = true;
  s.k_h = 1;
  check_reason(supports(*conv_case(s, "1-D")), "not a 2-D conv");
  OpCase runtime_weights = *conv_case(base, "runtime weights");
  runtime_weights.constant[1] = false;
  check_reason(supports(runtime_weights), "weights are not constant");
  // The registry's applies() (supports + the speed rule) explains itself too.
  check_reason(applies("cpu.conv_winograd", *conv_case(s, "1-D")), "not a 2-D conv");
  const ConvSpec fits = padded_3x3(32, 48, 28, 30);
  CHECK_FALSE(applies("cpu.conv_winograd", *conv_case(fits, "fits")).has_value());
  ConvSpec small_map = fits;
  small_map.in_h = 13;
  check_reason(applies("cpu.conv_winograd", *conv_case(small_map, "13 rows")), "is below 14x14");
  small_map.in_h = 14;
  CHECK_FALSE(applies("cpu.conv_winograd", *conv_case(small_map, "14 rows")).has_value());
  ConvSpec narrow = fits;
  narrow.channels = 16;
  check_reason(applies("cpu.conv_winograd", *conv_case(narrow, "16 channels")),
               "the transforms cost more");
  // F(2x2, 3x3) takes the small maps F(4x4, 3x3) refuses, from 10x10, and
  // no others: at most one form applies.
  check_reason(applies("cpu.conv_winograd_2x2", *conv_case(fits, "fits")), "cpu.conv_winograd's");
  ConvSpec map13 = fits;
  map13.in_h = map13.in_w = 13;
  CHECK_FALSE(applies("cpu.conv_winograd_2x2", *conv_case(map13, "13x13")).has_value());
  ConvSpec tall = map13;
  tall.in_h = 40;  // 40x13: too narrow for F(4x4)
  CHECK_FALSE(applies("cpu.conv_winograd_2x2", *conv_case(tall, "40x13")).has_value());
  check_reason(applies("cpu.conv_winograd", *conv_case(tall, "40x13")), "is below 14x14");
  ConvSpec map9 = fits;
  map9.in_h = map9.in_w = 9;
  ConvSpec map6 = fits;
  map6.in_h = map6.in_w = 6;
  {
    IsaGuard guard;
    for (cpu::GemmIsa isa : supported_isas()) {
      INFO("ISA ", cpu::gemm_isa_name(isa));
      cpu::set_gemm_isa(isa);
      if (isa == cpu::GemmIsa::kAvx512)
        check_reason(applies("cpu.conv_winograd_2x2", *conv_case(map9, "9x9")), "is below 10x10");
      else
        CHECK_FALSE(applies("cpu.conv_winograd_2x2", *conv_case(map9, "9x9")).has_value());
      check_reason(applies("cpu.conv_winograd_2x2", *conv_case(map6, "6x6")),
                   isa == cpu::GemmIsa::kAvx512 ? "is below 10x10" : "is below 7x7");
    }
  }
  map13.out_channels = 16;
  check_reason(applies("cpu.conv_winograd_2x2", *conv_case(map13, "16 channels")),
               "the transforms cost more");
  s = base;
  s.stride_h = 2;
  check_reason(applies("cpu.conv_winograd_2x2", *conv_case(s, "stride 2")), "stride is not 1");
}

}  // namespace
