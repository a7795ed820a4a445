// cpu.conv_sparse (kernels/sparse/conv_spardr.hpp), looked up in the
// registry like the runtime does, against the reference conv on sparse
// weights: random shapes (sizes 1, primes, odd channel counts), kernel
// sizes, strides, pads and dilations, densities from all-zero to dense with
// whole output channels empty, fused bias/activation/residual, X, Y and the
// residual each NCHW or NHWC, outputs assembled from random tiles, under
// every SGEMM ISA the CPU supports. Every output starts as NaN: a tile may
// write nothing outside its region. Then applies().
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/layout.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/gemm.hpp"
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
using tessera::test::padded_3x3;
using tessera::test::pick;
namespace cpu = kernels::cpu;

constexpr std::string_view kVariant = "cpu.conv_sparse";

uint64_t base_seed() {
  return tessera::test::base_seed("test_conv_sparse");
}

struct IsaGuard {
  cpu::GemmIsa saved = cpu::gemm_isa();
  ~IsaGuard() { cpu::set_gemm_isa(saved); }
};

// Logical (NCHW) data: X and R dense in [-1, 1], W sparse, B dense.
std::vector<std::vector<float>> make_data(const ConvSpec& s, const ConvCase& c,
                                          std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<std::vector<float>> data(c.shapes.size());
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    data[i].resize(static_cast<size_t>(graph::shape_numel(c.shapes[i])));
    for (float& x : data[i]) x = (i != 1 || coin(rng) < s.density) ? dist(rng) : 0.0f;
  }
  const int64_t per_channel = graph::shape_numel(c.shapes[1]) / s.out_channels;
  for (int64_t oc = 0; oc < s.out_channels; ++oc)
    if (coin(rng) < s.empty_channels)
      std::fill_n(data[1].begin() + oc * per_channel, per_channel, 0.0f);
  return data;
}

void check_conv(const ConvSpec& spec, uint64_t seed) {
  const std::optional<ConvCase> made = make_case(spec);
  if (!made) return;
  const ConvCase& c = *made;
  INFO("seed ", seed, ": ", describe(spec));
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(OpType::Conv, kVariant);
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(OpType::Conv, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(reference != nullptr);
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<float>> data = make_data(spec, c, rng);

  // The reference on logical NCHW data.
  std::vector<ConstTensorView> logical;
  for (size_t i = 0; i < c.shapes.size(); ++i) logical.push_back({data[i].data(), &c.shapes[i]});
  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> expected(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c.output);
  reference->run({.op = &c.op,
                  .inputs = logical.data(),
                  .input_count = logical.size(),
                  .output = {expected.data(), &c.output},
                  .region = &whole});

  // The variant on each operand in its own layout; weights constant at prepare.
  std::vector<std::vector<float>> physical(c.shapes.size());
  std::vector<ConstTensorView> views, prep_views;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    physical[i] = test::to_layout(data[i], c.shapes[i], c.layouts[i]);
    views.push_back({physical[i].data(), &c.shapes[i], c.layouts[i]});
    const bool constant = i == 1 || i == 2;
    prep_views.push_back({constant ? physical[i].data() : nullptr, &c.shapes[i], c.layouts[i]});
  }
  const Layout y_layout = c.output.size() == 4 ? spec.y_layout : Layout::NCHW;
  const std::optional<std::string> why = variant->applies(c.op, prep_views);
  if (why) CHECK_MESSAGE(why->find("density") != std::string::npos, "applies() refused: ", *why);

  // Absolute tolerance: values and weights are within [-1, 1].
  const double tol =
      8.0 * std::numeric_limits<float>::epsilon() * (1.25 * static_cast<double>(c.depth) + 3.5);
  IsaGuard guard;
  for (cpu::GemmIsa isa : {cpu::GemmIsa::kPortable, cpu::GemmIsa::kAvx2, cpu::GemmIsa::kAvx512}) {
    if (!cpu::gemm_isa_supported(isa)) continue;
    INFO("ISA ", cpu::gemm_isa_name(isa));
    cpu::set_gemm_isa(isa);
    const kernels::PreparedOp prepared = variant->prepare(c.op, prep_views);
    std::vector<float> out(static_cast<size_t>(numel), std::numeric_limits<float>::quiet_NaN());
    for (const graph::Region& tile : test::random_tiles(c.output, rng)) {
      const std::vector<float> before = out;
      variant->run({.op = &c.op,
                    .inputs = views.data(),
                    .input_count = views.size(),
                    .output = {out.data(), &c.output, y_layout},
                    .region = &tile,
                    .prepared = prepared.get()});
      int64_t outside = 0;
      for (int64_t p = 0; p < numel; ++p)
        if (!test::inside(tile, c.output, test::logical_index(c.output, y_layout, p)) &&
            std::memcmp(&out[p], &before[p], sizeof(float)) != 0 && outside++ < 3)
          FAIL_CHECK("tile ", graph::region_to_string(tile), " wrote outside at ", p);
      REQUIRE(outside == 0);
    }
    const std::vector<float> got = test::from_layout(out, c.output, y_layout);
    int64_t bad = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (!(std::fabs(static_cast<double>(got[i]) - expected[i]) <= tol) && bad++ < 5)
        FAIL_CHECK("y[", i, "] = ", got[i], ", reference ", expected[i], " (tolerance ", tol, ")");
    REQUIRE(bad == 0);
  }
}

Layout random_layout(std::mt19937_64& rng) {
  return rng() % 2 ? Layout::NHWC : Layout::NCHW;
}

Activation random_activation(std::mt19937_64& rng) {
  return pick(rng, {Activation::None, Activation::Relu, Activation::Clip, Activation::Sigmoid,
                    Activation::Gelu, Activation::Silu, Activation::LeakyRelu});
}

// `base` as case v of 3 (no bias; bias; bias and a residual) with a random
// batch, activation, weight density (one of `densities`) and share of empty
// output channels.
ConvSpec variant_of(const ConvSpec& base, int v, std::mt19937_64& rng,
                    std::initializer_list<double> densities) {
  ConvSpec s = base;
  s.batch = pick<int64_t>(rng, {1, 2});
  s.bias = v != 0;
  s.residual = v == 2;
  s.activation = random_activation(rng);
  s.density = pick(rng, densities);
  s.empty_channels = pick(rng, {0.0, 0.25});
  return s;
}

ConvSpec random_spec(std::mt19937_64& rng) {
  ConvSpec s;
  s.one_d = rng() % 6 == 0;
  s.batch = pick<int64_t>(rng, {1, 1, 2});
  s.channels = pick<int64_t>(rng, {1, 2, 3, 5, 7, 13, 17, 33});
  s.out_channels = pick<int64_t>(rng, {1, 3, 5, 16, 17, 31, 67});
  s.k_w = pick<int64_t>(rng, {1, 1, 2, 3, 3, 5});
  s.k_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 2, 3, 3, 5});
  s.stride_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 2, 3});
  s.stride_w = pick<int64_t>(rng, {1, 1, 2, 3});
  s.dilation_h = s.one_d ? 1 : pick<int64_t>(rng, {1, 1, 1, 2});
  s.dilation_w = pick<int64_t>(rng, {1, 1, 1, 2});
  auto pad = [&](int64_t k) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(k + 1)); };
  s.pad_left = pad(s.k_w / 2 + 1) % s.k_w;
  s.pad_right = pad(s.k_w / 2 + 1) % s.k_w;
  if (!s.one_d) {
    s.pad_top = pad(s.k_h / 2 + 1) % s.k_h;
    s.pad_bottom = pad(s.k_h / 2 + 1) % s.k_h;
  }
  s.in_h = s.one_d ? 1 : 1 + static_cast<int64_t>(rng() % 23);
  s.in_w = 1 + static_cast<int64_t>(rng() % (s.one_d ? 70 : 41));
  s.bias = rng() % 3 != 0;
  s.residual = rng() % 3 == 0;
  s.activation = random_activation(rng);
  s.density = pick(rng, {0.0, 0.02, 0.1, 0.3, 0.6, 1.0});
  s.empty_channels = pick(rng, {0.0, 0.0, 0.3});
  s.x_layout = random_layout(rng);
  s.y_layout = random_layout(rng);
  s.r_layout = random_layout(rng);
  return s;
}

TEST_CASE("cpu.conv_sparse matches the reference conv on random shapes, layouts and tiles") {
  std::mt19937_64 rng(base_seed() + 1);
  uint64_t seed = base_seed() * 31u + 1000;
  for (int i = 0; i < 120; ++i) check_conv(random_spec(rng), seed++);
}

TEST_CASE("cpu.conv_sparse: SparDR's layer forms, with several chunks per tile") {
  std::mt19937_64 rng(base_seed() + 2);
  uint64_t seed = base_seed() * 31u + 2000;
  // 1x1 stride 1 and 2, 3x3 pad 1 stride 1 and 2 (Table II's forms) on
  // sizes where L of a whole tile exceeds one chunk (64 channels × 3 taps ×
  // 41 columns: chunks of ~31 rows), odd and prime sizes, every layout mix.
  const ConvSpec forms[] = {
      padded_3x3(64, 19, 47, 41),
      padded_3x3(64, 23, 57, 41, /*stride=*/2),
      {.channels = 131, .out_channels = 37, .in_h = 29, .in_w = 31},
      {.channels = 131, .out_channels = 37, .in_h = 29, .in_w = 31, .stride_h = 2, .stride_w = 2},
      padded_3x3(11, 7, 1, 1),
  };
  for (const ConvSpec& base : forms)
    for (int v = 0; v < 3; ++v) {
      ConvSpec s = variant_of(base, v, rng, {0.0, 0.05, 0.17});
      s.x_layout = random_layout(rng);
      s.y_layout = random_layout(rng);
      s.r_layout = random_layout(rng);
      check_conv(s, seed++);
    }
}

TEST_CASE("cpu.conv_sparse: the NHWC implicit-GEMM routes, with several chunks per tile") {
  std::mt19937_64 rng(base_seed() + 3);
  uint64_t seed = base_seed() * 31u + 3000;
  // X, Y and R all NHWC: 1x1 stride 1 unpadded reads X as the GEMM's A;
  // stride 1 with dilation_w 1 and no residual takes the stacked rows
  // (131 channels x 3 taps x 43 grid columns: several chunks of rows);
  // the rest (strides, dilation_w 2, a residual) builds patch rows (K =
  // 1179: 64-pixel chunks).
  const ConvSpec three = padded_3x3(131, 19, 47, 41);
  ConvSpec dilated_h = three, dilated_w = three, strided = three, uneven = three;
  dilated_h.dilation_h = 2;
  dilated_w.dilation_w = 2;
  strided.stride_h = strided.stride_w = 2;
  uneven.k_h = 5;
  uneven.k_w = 2;
  uneven.pad_top = 0;
  uneven.pad_left = 1;
  uneven.pad_bottom = 3;
  uneven.pad_right = 0;
  uneven.in_h = 13;
  uneven.in_w = 1;
  const ConvSpec pointwise{.channels = 67, .out_channels = 37, .in_h = 29, .in_w = 31};
  ConvSpec pointwise_strided = pointwise, pointwise_padded = pointwise, single = pointwise;
  pointwise_strided.stride_h = pointwise_strided.stride_w = 2;
  pointwise_padded.pad_top = pointwise_padded.pad_right = 1;
  single.in_h = single.in_w = 1;
  single.channels = 1;
  // 3x3 stride 1 with at most 128 channels on at least 28x28 outputs whose
  // rows are whole lines (out_w 32) reconstructs L from the NHWC rows
  // instead; out_w 30 (rows not whole lines) stays on the stacked rows.
  const ConvSpec few_channels = padded_3x3(61, 19, 29, 32);
  const ConvSpec few_channels_unaligned = padded_3x3(61, 19, 29, 30);
  for (const ConvSpec& base :
       {three, dilated_h, dilated_w, strided, uneven, pointwise, pointwise_strided,
        pointwise_padded, single, few_channels, few_channels_unaligned})
    for (int v = 0; v < 3; ++v) {
      ConvSpec s = variant_of(base, v, rng, {0.05, 0.17, 0.6});
      s.x_layout = s.y_layout = s.r_layout = Layout::NHWC;
      check_conv(s, seed++);
    }
}

std::optional<std::string> applies(const ConvSpec& s, bool constant_weights = true,
                                   int64_t group = 1, Layout x_layout = Layout::NCHW) {
  std::optional<ConvCase> c = make_case(s);
  REQUIRE(c.has_value());
  c->op.attrs.group = group;
  if (group > 1) c->shapes[1][1] = s.channels / group;
  std::mt19937_64 rng(base_seed() + 9);
  ConvSpec data_spec = s;
  const std::vector<std::vector<float>> data = make_data(data_spec, *c, rng);
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < c->shapes.size(); ++i)
    views.push_back({(i == 1 && constant_weights) || i == 2 ? data[i].data() : nullptr,
                     &c->shapes[i], i == 0 ? x_layout : Layout::NCHW});
  const TileKernelVariant* v = kernels::find_tile_kernel_variant(OpType::Conv, kVariant);
  REQUIRE(v != nullptr);
  return v->applies(c->op, views);
}

void check_reason(const std::optional<std::string>& why, const std::string& part) {
  REQUIRE(why.has_value());
  INFO("reason: ", *why);
  CHECK(why->find(part) != std::string::npos);
}

TEST_CASE("cpu.conv_sparse applies below its density crossover and says why not otherwise") {
  ConvSpec s = padded_3x3(32, 32, 14, 14);
  s.density = 1.0;
  check_reason(applies(s), "density 100.0%");
  s.density = 0.6;
  check_reason(applies(s), "not sparse enough");
  s.density = 0.05;
  CHECK_FALSE(applies(s));
  s.density = 0.0;
  CHECK_FALSE(applies(s));
  s.density = 0.05;
  check_reason(applies(s, /*constant_weights=*/false), "not constant");
  check_reason(applies(s, true, /*group=*/2), "group");
  check_reason(applies(s, true, /*group=*/32), "group");

  // A 1x1 conv at 25% density: above the NCHW crossover (20%), below the
  // NHWC one (30%, the implicit GEMM's).
  ConvSpec pointwise{.channels = 64, .out_channels = 64, .in_h = 14, .in_w = 14};
  pointwise.density = 0.25;
  check_reason(applies(pointwise), "not sparse enough");
  CHECK_FALSE(applies(pointwise, true, 1, Layout::NHWC));

  // NHWC 3x3 at 25% density. A 10x10 map is F(2x2)'s on every ISA: the
  // bound against Winograd (12% on small maps with AVX-512, 16% with AVX2).
  // A 7x7 map, F(2x2)'s only with AVX2 and the baseline, keeps the direct
  // conv's bound (30%, 40%) on every ISA: ResNet-50 pruned to 80% ran its
  // 7x7 convs faster sparse. At 14% a 14x14 map is below AVX2's bound
  // against Winograd, not AVX-512's.
  IsaGuard guard;
  for (cpu::GemmIsa isa : {cpu::GemmIsa::kPortable, cpu::GemmIsa::kAvx2, cpu::GemmIsa::kAvx512}) {
    if (!cpu::gemm_isa_supported(isa)) continue;
    INFO("ISA ", cpu::gemm_isa_name(isa));
    cpu::set_gemm_isa(isa);
    ConvSpec small = padded_3x3(64, 64, 7, 7);
    small.density = 0.25;
    CHECK_FALSE(applies(small, true, 1, Layout::NHWC));
    small.in_h = small.in_w = 10;
    check_reason(applies(small, true, 1, Layout::NHWC), "not sparse enough");
    ConvSpec mid = padded_3x3(64, 64, 14, 14);
    mid.density = 0.14;
    const auto why = applies(mid, true, 1, Layout::NHWC);
    if (isa == cpu::GemmIsa::kAvx512)
      check_reason(why, "measured crossovers with avx512");
    else
      CHECK_FALSE(why);
  }
}

TEST_CASE("cpu.conv_sparse ranks above the dense conv variants") {
  const TileKernelVariant* sparse = kernels::find_tile_kernel_variant(OpType::Conv, kVariant);
  REQUIRE(sparse != nullptr);
  CHECK(sparse->report_when_skipped);
  for (const char* dense :
       {"cpu.conv_gemm", "cpu.conv_winograd", "cpu.conv_winograd_2x2", "cpu.conv_depthwise"}) {
    const TileKernelVariant* d = kernels::find_tile_kernel_variant(OpType::Conv, dense);
    REQUIRE(d != nullptr);
    CHECK(sparse->preference > d->preference);
  }
}

}  // namespace
