// cpu.matmul_sparse and cpu.gemm_sparse (kernels/sparse/sparse_ops.hpp),
// looked up in the registry like the runtime does, against the reference
// kernel of the same op on sparse weights: random shapes and attributes,
// each output assembled from random tiles under every SGEMM ISA the CPU
// supports. Every output starts as NaN: a tile may write nothing outside its
// region. Then applies(): dense weights are refused with their density.
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
#include <string>
#include <tuple>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_int8.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/tile_kernel.hpp"
#include "tests/kernels_cpu/test_random.hpp"
#include "tests/kernels_cpu/tile_grid.hpp"

namespace {

using namespace tessera;
using graph::OpType;
using graph::Shape;
using kernels::ConstTensorView;
using kernels::TileKernelVariant;
namespace cpu = kernels::cpu;

uint64_t base_seed() {
  return tessera::test::base_seed("test_sparse_ops");
}

struct OpCase {
  graph::Operator op;
  std::vector<Shape> inputs;
  std::vector<bool> constant;
  std::vector<double> density;  // of each input's data (1: dense)
  Shape output;
  int64_t depth = 1;
};

struct IsaGuard {
  cpu::GemmIsa saved = cpu::gemm_isa();
  ~IsaGuard() { cpu::set_gemm_isa(saved); }
};

std::vector<std::vector<float>> make_data(const OpCase& c, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<std::vector<float>> data(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    data[i].resize(static_cast<size_t>(graph::shape_numel(c.inputs[i])));
    for (float& x : data[i]) x = coin(rng) < c.density[i] ? dist(rng) : 0.0f;
  }
  return data;
}

std::vector<ConstTensorView> prepare_views(const OpCase& c,
                                           const std::vector<std::vector<float>>& data) {
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    views.push_back({c.constant[i] ? data[i].data() : nullptr, &c.inputs[i]});
  return views;
}

void check_case(std::string_view variant_name, const OpCase& c, uint64_t seed) {
  INFO(variant_name, " seed ", seed, ": A ", graph::shape_to_string(c.inputs[0]), " B ",
       graph::shape_to_string(c.inputs[1]), " B density ", c.density[1], " inputs ",
       c.inputs.size(), " transB ", c.op.attrs.trans_b, " alpha ", c.op.attrs.alpha, " beta ",
       c.op.attrs.beta, " act ", static_cast<int>(c.op.attrs.activation));
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(c.op.type, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(reference != nullptr);
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<float>> data = make_data(c, rng);
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < c.inputs.size(); ++i) views.push_back({data[i].data(), &c.inputs[i]});
  const std::vector<ConstTensorView> prep_views = prepare_views(c, data);
  // Small random weights can come out denser than the crossover: then
  // applies() must say so, and the kernel must still compute them right.
  const std::optional<std::string> why = variant->applies(c.op, prep_views);
  if (why) CHECK_MESSAGE(why->find("density") != std::string::npos, "applies() refused: ", *why);

  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> expected(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c.output);
  reference->run({.op = &c.op,
                  .inputs = views.data(),
                  .input_count = views.size(),
                  .output = {expected.data(), &c.output},
                  .region = &whole});
  const double tol = 8.0 * std::numeric_limits<float>::epsilon() *
                     (1.25 * static_cast<double>(c.depth) + 1.25 + 1.0 + 1.0);  // + residual
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
                    .output = {out.data(), &c.output},
                    .region = &tile,
                    .prepared = prepared.get()});
      int64_t outside = 0;
      for (int64_t i = 0; i < numel; ++i)
        if (!test::inside(tile, c.output, i) &&
            std::memcmp(&out[i], &before[i], sizeof(float)) != 0 && outside++ < 3)
          FAIL_CHECK("tile ", graph::region_to_string(tile), " wrote outside at ", i);
      REQUIRE(outside == 0);
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (!(std::fabs(static_cast<double>(out[i]) - expected[i]) <= tol) && bad++ < 5)
        FAIL_CHECK("y[", i, "] = ", out[i], ", reference ", expected[i], " (tolerance ", tol, ")");
    REQUIRE(bad == 0);
  }
}

using tessera::test::pick;

graph::Activation random_activation(std::mt19937_64& rng) {
  return pick(rng,
              {graph::Activation::None, graph::Activation::Relu, graph::Activation::Clip,
               graph::Activation::Sigmoid, graph::Activation::Gelu, graph::Activation::GeluTanh,
               graph::Activation::Silu, graph::Activation::LeakyRelu});
}

// With `bias`, the fused per-column bias [N] (graph/fuse_matmul_bias.hpp) as input 2.
OpCase matmul_case(const Shape& batch, int64_t m, int64_t k, int64_t n, double density,
                   graph::Activation act, bool bias = false) {
  OpCase c;
  c.op.name = "matmul";
  c.op.type = OpType::MatMul;
  c.op.attrs.activation = act;
  c.op.attrs.clip_min = 0.0f;
  c.op.attrs.clip_max = 0.5f;
  c.op.attrs.leaky_relu_alpha = 0.3f;
  Shape a = batch;
  a.push_back(m);
  a.push_back(k);
  c.inputs = {a, {k, n}};
  c.constant = {false, true};
  c.density = {1.0, density};
  if (bias) {
    c.inputs.push_back({n});
    c.constant.push_back(true);
    c.density.push_back(1.0);
  }
  c.output = batch;
  c.output.push_back(m);
  c.output.push_back(n);
  c.depth = k;
  return c;
}

// C forms: 0 none, 1 scalar [], 2 [N], 3 [1, N], 4 [M, 1], 5 [M, N].
OpCase gemm_case(int64_t m, int64_t k, int64_t n, bool trans_b, int c_form, float alpha, float beta,
                 double density, graph::Activation act) {
  OpCase c;
  c.op.name = "gemm";
  c.op.type = OpType::Gemm;
  graph::OpAttributes& a = c.op.attrs;
  a.trans_b = trans_b;
  a.alpha = alpha;
  a.beta = beta;
  a.activation = act;
  a.clip_min = -0.25f;
  a.clip_max = 0.5f;
  a.leaky_relu_alpha = 0.1f;
  c.inputs = {{m, k}, trans_b ? Shape{n, k} : Shape{k, n}};
  c.constant = {false, true};
  c.density = {1.0, density};
  const Shape c_shapes[] = {{}, {}, {n}, {1, n}, {m, 1}, {m, n}};
  if (c_form > 0) {
    c.inputs.push_back(c_shapes[c_form]);
    c.constant.push_back(true);
    c.density.push_back(1.0);
  }
  c.output = {m, n};
  c.depth = k;
  return c;
}

TEST_CASE("cpu.matmul_sparse matches the reference matmul, A of rank 2 to 4") {
  std::mt19937_64 rng(base_seed() + 3);
  uint64_t seed = base_seed() * 31u + 3000;
  for (int i = 0; i < 30; ++i) {
    Shape batch;
    const int rank = 2 + static_cast<int>(rng() % 3);
    for (int d = 2; d < rank; ++d) batch.push_back(pick<int64_t>(rng, {1, 2, 3}));
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 13, 37});
    const int64_t k = pick<int64_t>(rng, {1, 4, 19, 67, 200});
    const int64_t n = pick<int64_t>(rng, {1, 7, 64, 71});
    check_case("cpu.matmul_sparse",
               matmul_case(batch, m, k, n, pick(rng, {0.0, 0.01, 0.1, 0.2}), random_activation(rng),
                           /*bias=*/i % 2 == 0),
               seed++);
  }
}

// A fused residual (graph/fuse_residual.hpp): input 3, the output's shape,
// an activation (not constant), after the bias or C and before the activation.
void add_residual(OpCase& c) {
  c.op.attrs.fused_residual = true;
  c.inputs.push_back(c.output);
  c.constant.push_back(false);
  c.density.push_back(1.0);
}

TEST_CASE("cpu.matmul_sparse and cpu.gemm_sparse add a fused residual like the reference") {
  std::mt19937_64 rng(base_seed() + 5);
  uint64_t seed = base_seed() * 31u + 5000;
  for (int i = 0; i < 16; ++i) {
    Shape batch;
    for (int d = 0; d < i % 3; ++d) batch.push_back(pick<int64_t>(rng, {1, 2, 3}));
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 13, 37});
    const int64_t k = pick<int64_t>(rng, {1, 4, 19, 67, 200});
    const int64_t n = pick<int64_t>(rng, {1, 7, 64, 71});
    OpCase mm = matmul_case(batch, m, k, n, pick(rng, {0.0, 0.01, 0.1}), random_activation(rng),
                            /*bias=*/true);
    add_residual(mm);
    check_case("cpu.matmul_sparse", mm, seed++);
    // C forms without a full [M, N] C (that takes the epilogue's residual slot).
    OpCase g = gemm_case(m, k, n, i % 2 == 1, pick(rng, {1, 2, 3, 4}),
                         pick(rng, {1.0f, 0.5f, -1.25f}), pick(rng, {1.0f, 0.75f, 0.0f}),
                         pick(rng, {0.0, 0.02, 0.1}), random_activation(rng));
    add_residual(g);
    check_case("cpu.gemm_sparse", g, seed++);
  }
}

TEST_CASE("cpu.gemm_sparse matches the reference gemm: C forms, trans_b, alpha, beta") {
  std::mt19937_64 rng(base_seed() + 4);
  uint64_t seed = base_seed() * 31u + 4000;
  for (int c_form = 0; c_form < 6; ++c_form)
    for (int t = 0; t < 4; ++t) {
      const int64_t m = pick<int64_t>(rng, {1, 2, 7, 31, 67});
      const int64_t k = pick<int64_t>(rng, {1, 3, 17, 64, 333});
      const int64_t n = pick<int64_t>(rng, {1, 5, 16, 67, 130});
      check_case("cpu.gemm_sparse",
                 gemm_case(m, k, n, t & 1, c_form, pick(rng, {1.0f, 0.5f, -1.25f}),
                           pick(rng, {1.0f, 0.75f, 0.0f}), pick(rng, {0.0, 0.02, 0.1, 0.25}),
                           random_activation(rng)),
                 seed++);
    }
}

std::optional<std::string> applies(std::string_view variant_name, const OpCase& c,
                                   std::mt19937_64& rng) {
  const TileKernelVariant* v = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  REQUIRE(v != nullptr);
  const std::vector<std::vector<float>> data = make_data(c, rng);
  return v->applies(c.op, prepare_views(c, data));
}

void check_reason(const std::optional<std::string>& why, const std::string& part) {
  REQUIRE(why.has_value());
  INFO("reason: ", *why);
  CHECK(why->find(part) != std::string::npos);
}

TEST_CASE("applies() refuses dense weights with their density, and what it cannot run") {
  std::mt19937_64 rng(base_seed() + 5);
  const auto none = graph::Activation::None;
  check_reason(applies("cpu.matmul_sparse", matmul_case({}, 8, 64, 64, 1.0, none), rng),
               "density 100.0%");
  check_reason(applies("cpu.matmul_sparse", matmul_case({}, 8, 64, 64, 0.7, none), rng),
               "not sparse enough");
  CHECK_FALSE(applies("cpu.matmul_sparse", matmul_case({}, 8, 64, 64, 0.05, none), rng));
  OpCase runtime_b = matmul_case({}, 8, 64, 64, 0.05, none);
  runtime_b.constant[1] = false;
  check_reason(applies("cpu.matmul_sparse", runtime_b, rng), "B is not constant");

  check_reason(applies("cpu.gemm_sparse", gemm_case(8, 64, 64, true, 2, 1, 1, 1.0, none), rng),
               "density 100.0%");
  CHECK_FALSE(applies("cpu.gemm_sparse", gemm_case(8, 64, 64, true, 5, 1, 1, 0.05, none), rng));
  OpCase trans_a = gemm_case(8, 64, 8, false, 0, 1, 1, 0.05, none);
  trans_a.op.attrs.trans_a = true;
  trans_a.inputs[0] = {64, 8};  // A^T is [M, K] = [8, 64]
  check_reason(applies("cpu.gemm_sparse", trans_a, rng), "trans_a");
  OpCase runtime_c = gemm_case(8, 64, 64, false, 2, 1, 1, 0.05, none);
  runtime_c.constant[2] = false;
  check_reason(applies("cpu.gemm_sparse", runtime_c, rng), "C is not constant");
  // alpha = 0 makes every weight zero: the sparse kernel applies.
  CHECK_FALSE(applies("cpu.gemm_sparse", gemm_case(8, 64, 64, false, 0, 0, 1, 1.0, none), rng));
}

// A weight both pruned and annotated 8 bits runs whichever of the sparse
// float32 layout and the int8 kernel is expected faster (int8_cost).
TEST_CASE("an 8-bit sparse weight takes the faster of the sparse and the int8 kernels") {
  const bool int8_cpu = cpu::int8_isa_supported(cpu::Int8Isa::kAvx2) ||
                        cpu::int8_isa_supported(cpu::Int8Isa::kAvx512Vnni);
  std::mt19937_64 rng(base_seed() + 7);
  auto choose = [&](OpCase c, int32_t bits) {
    c.op.attrs.weight_bits = bits;
    const std::vector<std::vector<float>> data = make_data(c, rng);
    return kernels::choose_kernel(c.op, prepare_views(c, data), kernels::KernelPolicy::Fastest);
  };
  auto skipped = [](const kernels::KernelChoice& choice, std::string_view variant) {
    for (const std::string& s : choice.skipped)
      if (s.starts_with(variant)) return s;
    return std::string();
  };
  const auto none = graph::Activation::None;
  for (const OpCase& c : {matmul_case({}, 16, 256, 256, 0.1, none),
                          gemm_case(16, 256, 256, true, 2, 1, 1, 0.1, none)}) {
    const std::string sparse_name =
        c.op.type == OpType::MatMul ? "cpu.matmul_sparse" : "cpu.gemm_sparse";
    const std::string int8_name = c.op.type == OpType::MatMul ? "cpu.matmul_int8" : "cpu.gemm_int8";
    INFO(sparse_name);
    // 10% unstructured: CSR (~0.2x the dense time) beats dense int8.
    const kernels::KernelChoice ten = choose(c, 8);
    CHECK(ten.kernel == sparse_name);
    // Half dense: too dense for CSR to beat int8, not for it to beat float32.
    OpCase half = c;
    half.density[1] = 0.5;
    const kernels::KernelChoice denser = choose(half, 8);
    CHECK(denser.kernel == (int8_cpu ? int8_name : sparse_name));
    if (int8_cpu) check_reason(skipped(denser, sparse_name), "int8 kernel is faster");
    CHECK(choose(half, 32).kernel == sparse_name);
  }
  // 32x32 blocks, 1 in 16 kept: int8 blocks beat the float32 blocks.
  OpCase blocks = matmul_case({}, 16, 256, 256, 1.0, none);
  blocks.op.attrs.weight_bits = 8;
  std::vector<std::vector<float>> data = make_data(blocks, rng);
  std::vector<float>& w = data[1];
  for (int64_t k = 0; k < 256; ++k)
    for (int64_t n = 0; n < 256; ++n)
      if ((k / 32 + 3 * (n / 32)) % 16 != 0) w[static_cast<size_t>(k * 256 + n)] = 0.0f;
  const kernels::KernelChoice block_choice = kernels::choose_kernel(
      blocks.op, prepare_views(blocks, data), kernels::KernelPolicy::Fastest);
  CHECK(block_choice.kernel == (int8_cpu ? "cpu.matmul_int8_blocks" : "cpu.matmul_sparse"));
}

TEST_CASE("the sparse variants rank above the dense ones") {
  for (auto [type, sparse_name, dense_name] :
       {std::tuple{OpType::MatMul, "cpu.matmul_sparse", "cpu.matmul"},
        std::tuple{OpType::Gemm, "cpu.gemm_sparse", "cpu.gemm"}}) {
    const TileKernelVariant* s = kernels::find_tile_kernel_variant(type, sparse_name);
    const TileKernelVariant* d = kernels::find_tile_kernel_variant(type, dense_name);
    REQUIRE(s != nullptr);
    REQUIRE(d != nullptr);
    CHECK(s->preference > d->preference);
    CHECK(static_cast<bool>(s->applies));
    CHECK(static_cast<bool>(s->prepare));
  }
}

}  // namespace
