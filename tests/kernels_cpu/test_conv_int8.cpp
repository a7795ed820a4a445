// cpu.conv_int8 (kernels/cpu/int8_ops.hpp), looked up in the registry like
// the runtime does: cpu.conv_gemm's patches with the int8 GEMM as the
// product. Its output must be, bit for bit, the int8 GEMM (gemm_int8.hpp,
// whose results do not depend on the tiling) of the explicit patch matrix
// [pixels, kH·kW·C] against the weights [OC, kH·kW·C] with the same
// epilogue: on random shapes (sizes 1, primes), kernel sizes, strides, pads
// and dilations, fused bias / activation / residual, X, Y and the residual
// each NCHW or NHWC, outputs assembled from random tiles, under every int8
// ISA the CPU runs; and within int8_error_bound() of the float reference
// conv where no activation follows. Then applies().
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/layout.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_int8.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/tile_kernel.hpp"
#include "tests/kernels_cpu/conv_case.hpp"
#include "tests/kernels_cpu/layouts.hpp"
#include "tests/kernels_cpu/test_random.hpp"
#include "tests/kernels_cpu/tile_grid.hpp"

namespace {

using namespace tessera;
using graph::Activation;
using graph::Layout;
using graph::OpType;
using graph::Shape;
using kernels::ConstTensorView;
using kernels::TileKernelVariant;
using tessera::test::ConvCase;
using tessera::test::ConvSpec;
using tessera::test::describe;
using tessera::test::make_case;
using tessera::test::pick;
namespace cpu = kernels::cpu;

ConvSpec random_spec(std::mt19937_64& rng) {
  ConvSpec s;
  s.batch = pick<int64_t>(rng, {1, 1, 2});
  s.channels = pick<int64_t>(rng, {1, 2, 3, 5, 7, 13, 17, 33, 64});
  s.out_channels = pick<int64_t>(rng, {1, 3, 5, 16, 17, 31, 67});
  s.k_h = pick<int64_t>(rng, {1, 1, 2, 3, 3});
  s.k_w = pick<int64_t>(rng, {1, 1, 2, 3, 3});
  s.stride_h = pick<int64_t>(rng, {1, 1, 2});
  s.stride_w = pick<int64_t>(rng, {1, 1, 2, 3});
  s.dilation_h = pick<int64_t>(rng, {1, 1, 1, 2});
  s.dilation_w = pick<int64_t>(rng, {1, 1, 2});
  s.pad_top = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.k_h));
  s.pad_bottom = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.k_h));
  s.pad_left = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.k_w));
  s.pad_right = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.k_w));
  s.in_h = 1 + static_cast<int64_t>(rng() % 19);
  s.in_w = 1 + static_cast<int64_t>(rng() % 29);
  s.bias = rng() % 3 != 0;
  s.residual = rng() % 3 == 0;
  s.activation = pick(rng, {Activation::None, Activation::None, Activation::Relu, Activation::Clip,
                            Activation::Sigmoid, Activation::Silu});
  auto layout = [&] { return rng() % 2 ? Layout::NHWC : Layout::NCHW; };
  s.x_layout = layout();
  s.y_layout = layout();
  s.r_layout = layout();
  return s;
}

// The conv as cpu.conv_int8 takes it: its weight annotated 8 bits.
std::optional<ConvCase> make_int8_case(const ConvSpec& s) {
  std::optional<ConvCase> c = make_case(s);
  if (c) c->op.attrs.weight_bits = 8;
  return c;
}

// Rows: pixels (n, oh, ow) in order; columns: (kh, kw, c), zero where a tap
// falls in the padding. X logical NCHW.
std::vector<float> patch_matrix(const ConvSpec& s, const ConvCase& c, const std::vector<float>& x) {
  const int64_t k = s.channels * s.k_h * s.k_w;
  std::vector<float> p;
  const int64_t out_h = c.output[2], out_w = c.output[3];
  p.reserve(static_cast<size_t>(s.batch * out_h * out_w * k));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow)
        for (int64_t kh = 0; kh < s.k_h; ++kh)
          for (int64_t kw = 0; kw < s.k_w; ++kw)
            for (int64_t ch = 0; ch < s.channels; ++ch) {
              const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
              const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
              const bool in = ih >= 0 && ih < s.in_h && iw >= 0 && iw < s.in_w;
              p.push_back(
                  in ? x[static_cast<size_t>(((n * s.channels + ch) * s.in_h + ih) * s.in_w + iw)]
                     : 0.0f);
            }
  return p;
}

// W [OC, C, kH, kW] as [OC, (kh, kw, c)].
std::vector<float> permuted_weights(const ConvSpec& s, const std::vector<float>& w) {
  const int64_t taps = s.k_h * s.k_w;
  std::vector<float> out(w.size());
  for (int64_t oc = 0; oc < s.out_channels; ++oc)
    for (int64_t ch = 0; ch < s.channels; ++ch)
      for (int64_t t = 0; t < taps; ++t)
        out[static_cast<size_t>((oc * taps + t) * s.channels + ch)] =
            w[static_cast<size_t>((oc * s.channels + ch) * taps + t)];
  return out;
}

// Pixel-major [pixels, OC] from logical NCHW [N, OC, H, W].
std::vector<float> pixel_major(const std::vector<float>& y, int64_t batch, int64_t oc,
                               int64_t plane) {
  std::vector<float> out(y.size());
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t p = 0; p < plane; ++p)
        out[static_cast<size_t>((n * plane + p) * oc + o)] =
            y[static_cast<size_t>((n * oc + o) * plane + p)];
  return out;
}

struct Int8IsaGuard {
  cpu::Int8Isa saved = cpu::int8_isa();
  ~Int8IsaGuard() { cpu::set_int8_isa(saved); }
};

void check_conv_int8(const ConvSpec& s, uint64_t seed) {
  const std::optional<ConvCase> made = make_int8_case(s);
  if (!made) return;
  const ConvCase& c = *made;
  INFO("seed ", seed, ": ", describe(s));
  const TileKernelVariant* variant =
      kernels::find_tile_kernel_variant(OpType::Conv, "cpu.conv_int8");
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(OpType::Conv, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(reference != nullptr);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> data(c.shapes.size());
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    data[i].resize(static_cast<size_t>(graph::shape_numel(c.shapes[i])));
    for (float& v : data[i]) v = dist(rng);
  }
  const int64_t numel = graph::shape_numel(c.output);
  const int64_t plane = c.output[2] * c.output[3], pixels = s.batch * plane;
  const int64_t k = s.channels * s.k_h * s.k_w;

  // The float reference, logical NCHW.
  std::vector<ConstTensorView> logical;
  for (size_t i = 0; i < c.shapes.size(); ++i) logical.push_back({data[i].data(), &c.shapes[i]});
  std::vector<float> reference_y(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c.output);
  reference->run({.op = &c.op,
                  .inputs = logical.data(),
                  .input_count = logical.size(),
                  .output = {reference_y.data(), &c.output},
                  .region = &whole});

  const std::vector<float> patches = patch_matrix(s, c, data[0]);
  const std::vector<float> weights = permuted_weights(s, data[1]);
  const std::vector<float> residual =
      s.residual ? pixel_major(data[3], s.batch, s.out_channels, plane) : std::vector<float>{};
  cpu::GemmEpilogue ep;
  ep.activation = cpu::gemm_activation(s.activation);
  ep.clip_min = c.op.attrs.clip_min;
  ep.clip_max = c.op.attrs.clip_max;
  if (s.bias || s.residual) {
    ep.bias = data[2].data();
    ep.bias_kind = cpu::GemmBias::kPerColumn;
  }
  if (s.residual) {
    ep.residual = residual.data();
    ep.ld_residual = s.out_channels;
  }

  // The variant on each operand in its own layout; weights constant at prepare.
  std::vector<std::vector<float>> physical(c.shapes.size());
  std::vector<ConstTensorView> views, prep_views;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    physical[i] = test::to_layout(data[i], c.shapes[i], c.layouts[i]);
    views.push_back({physical[i].data(), &c.shapes[i], c.layouts[i]});
    const bool constant = i == 1 || i == 2;
    prep_views.push_back({constant ? physical[i].data() : nullptr, &c.shapes[i], c.layouts[i]});
  }
  // A conv Winograd takes is refused (conv_int8_applies); the rest apply.
  const std::optional<std::string> why = variant->applies(c.op, prep_views);
  if (why && why->find("Winograd") != std::string::npos) return;
  REQUIRE_MESSAGE(!why, "applies() refused: ", why.value_or(""));

  Int8IsaGuard guard;
  for (cpu::Int8Isa isa :
       {cpu::Int8Isa::kPortable, cpu::Int8Isa::kAvx2, cpu::Int8Isa::kAvx512Vnni}) {
    if (!cpu::int8_isa_supported(isa)) continue;
    INFO("int8 ISA ", cpu::int8_isa_name(isa));
    cpu::set_int8_isa(isa);
    // The expectation: the int8 GEMM of the explicit patches, one tile.
    const cpu::QuantizedMatrix q = cpu::quantize_b(weights.data(), k, s.out_channels, k, true);
    std::vector<float> expected_t(static_cast<size_t>(pixels * s.out_channels));
    cpu::int8_gemm_tile(patches.data(), k, q, expected_t.data(), s.out_channels,
                        {.m0 = 0, .m1 = pixels, .n0 = 0, .n1 = s.out_channels}, ep);

    const kernels::PreparedOp prepared = variant->prepare(c.op, prep_views);
    std::vector<float> out(static_cast<size_t>(numel), std::numeric_limits<float>::quiet_NaN());
    for (const graph::Region& tile : test::random_tiles(c.output, rng))
      variant->run({.op = &c.op,
                    .inputs = views.data(),
                    .input_count = views.size(),
                    .output = {out.data(), &c.output, s.y_layout},
                    .region = &tile,
                    .prepared = prepared.get()});
    const std::vector<float> got = test::from_layout(out, c.output, s.y_layout);
    int64_t bad = 0;
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t o = 0; o < s.out_channels; ++o)
        for (int64_t p = 0; p < plane; ++p) {
          const size_t at = static_cast<size_t>((n * s.out_channels + o) * plane + p);
          const int64_t row = n * plane + p;
          const float want = expected_t[static_cast<size_t>(row * s.out_channels + o)];
          if (std::memcmp(&got[at], &want, sizeof(float)) != 0 && bad++ < 5)
            FAIL_CHECK("y[", at, "] = ", got[at], ", the int8 GEMM of the patches ", want);
          if (s.activation != Activation::None) continue;
          // Against float32: the int8 bound of the product, plus rounding
          // of the bias and residual additions.
          const double bound =
              cpu::int8_error_bound(patches.data() + row * k, weights.data(), k, o, k, true) +
              1e-5 * (std::fabs(reference_y[at]) + 2.0);
          if (!(std::fabs(static_cast<double>(got[at]) - reference_y[at]) <= bound) && bad++ < 5)
            FAIL_CHECK("y[", at, "] = ", got[at], ", float reference ", reference_y[at],
                       " beyond the int8 bound ", bound);
        }
    REQUIRE(bad == 0);
  }
}

TEST_CASE("cpu.conv_int8 is the int8 GEMM of the conv's patches on random shapes and layouts") {
  std::mt19937_64 rng(tessera::test::base_seed("test_gemm_int8") + 11);
  uint64_t seed = tessera::test::base_seed("test_gemm_int8") * 29u + 500;
  for (int i = 0; i < 80; ++i) check_conv_int8(random_spec(rng), seed++);
}

// A conv of `spec` with constant weights and bias of 0.5 and X unknown, as
// kernel choice sees it at compile time; `bits` its weight's width.
struct CompileTimeConv {
  ConvCase c;
  std::vector<std::vector<float>> data;
  std::vector<ConstTensorView> views;

  CompileTimeConv(const ConvSpec& spec, int32_t bits) : c(*make_int8_case(spec)) {
    c.op.attrs.weight_bits = bits;
    for (const Shape& shape : c.shapes)
      data.emplace_back(static_cast<size_t>(graph::shape_numel(shape)), 0.5f);
    for (size_t i = 0; i < c.shapes.size(); ++i)
      views.push_back({i == 0 ? nullptr : data[i].data(), &c.shapes[i]});
  }
};

// The 3x3 stride-1 conv on a 16x16 map that Winograd takes.
ConvSpec winograd_conv() {
  return {.channels = 32,
          .out_channels = 48,
          .in_h = 16,
          .in_w = 16,
          .k_h = 3,
          .k_w = 3,
          .pad_top = 1,
          .pad_left = 1,
          .pad_bottom = 1,
          .pad_right = 1};
}

TEST_CASE("cpu.conv_int8 applies only to 8-bit weights, and says why not") {
  const TileKernelVariant* variant =
      kernels::find_tile_kernel_variant(OpType::Conv, "cpu.conv_int8");
  REQUIRE(variant != nullptr);
  CompileTimeConv conv({.channels = 8, .out_channels = 4, .in_h = 5, .in_w = 5}, 8);
  graph::Operator& op = conv.c.op;
  const bool int8_cpu = cpu::int8_isa_supported(cpu::Int8Isa::kAvx2) ||
                        cpu::int8_isa_supported(cpu::Int8Isa::kAvx512Vnni);
  CHECK(variant->applies(op, conv.views).has_value() == !int8_cpu);
  op.attrs.weight_bits = 32;
  const std::optional<std::string> why = variant->applies(op, conv.views);
  REQUIRE(why.has_value());
  CHECK(why->find("annotate \"bits\": 8") != std::string::npos);
  op.attrs.weight_bits = 8;
  op.attrs.fused_input_scale = true;
  REQUIRE(variant->applies(op, conv.views).has_value());

  const CompileTimeConv winograd(winograd_conv(), 8);
  const std::optional<std::string> refused = variant->applies(winograd.c.op, winograd.views);
  REQUIRE(refused.has_value());
  CHECK(refused->find("Winograd runs this 3x3 stride-1 conv faster") != std::string::npos);
}

// The compile report says why an 8-bit weight's conv did not get the int8
// kernel (TileKernelVariant::serves_8bit_weights), and says nothing of it on
// float32 weights.
TEST_CASE("the kernel choice gives 8-bit convs cpu.conv_int8 and explains where it does not") {
  auto choose = [](const ConvSpec& spec, int32_t bits) {
    const CompileTimeConv conv(spec, bits);
    return kernels::choose_kernel(conv.c.op, conv.views, kernels::KernelPolicy::Fastest);
  };
  auto mentions_int8 = [](const kernels::KernelChoice& choice) {
    return std::any_of(choice.skipped.begin(), choice.skipped.end(),
                       [](const std::string& s) { return s.starts_with("cpu.conv_int8"); });
  };
  const bool int8_cpu = cpu::int8_isa_supported(cpu::Int8Isa::kAvx2) ||
                        cpu::int8_isa_supported(cpu::Int8Isa::kAvx512Vnni);
  const ConvSpec pointwise{.channels = 32, .out_channels = 48, .in_h = 14, .in_w = 14};
  const kernels::KernelChoice eight = choose(pointwise, 8);
  CHECK(eight.kernel == (int8_cpu ? "cpu.conv_int8" : "cpu.conv_gemm"));
  CHECK(mentions_int8(eight) == !int8_cpu);
  const kernels::KernelChoice thirty_two = choose(pointwise, 32);
  CHECK(thirty_two.kernel == "cpu.conv_gemm");
  CHECK_FALSE(mentions_int8(thirty_two));
  const kernels::KernelChoice three = choose(winograd_conv(), 8);
  CHECK(three.kernel == "cpu.conv_winograd");
  CHECK(mentions_int8(three));
  // A weight sparse enough for cpu.conv_sparse runs sparse, not int8.
  ConvSpec sparse = pointwise;
  sparse.channels = sparse.out_channels = 64;
  CompileTimeConv pruned(sparse, 8);
  std::vector<float>& w = pruned.data[1];
  for (size_t i = 0; i < w.size(); ++i)
    if (i % 10 != 0) w[i] = 0.0f;  // 10% density
  const kernels::KernelChoice choice =
      kernels::choose_kernel(pruned.c.op, pruned.views, kernels::KernelPolicy::Fastest);
  CHECK(choice.kernel == "cpu.conv_sparse");
}

}  // namespace
