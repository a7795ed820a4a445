// The transformer-op CPU variants (cpu.binary's Sub/Div/Max/Min,
// cpu.binary_broadcast, cpu.unary's vector ops, cpu.softmax, cpu.layer_norm,
// cpu.transpose: kernels/cpu/simple_ops.hpp) against the reference kernel of
// the same op, looked up in the registry, on random shapes (sizes 1, primes,
// non-multiples of 16 and 8), each output assembled from random tiles in
// random order, under every ISA the CPU has (set_gemm_isa). Exact ops must
// match the reference bitwise; the polynomial ones within their stated bound
// (kernels/cpu/vector_math.hpp), and give the same bits for every tiling and
// on every ISA with FMA (AVX2, AVX-512; the baseline SSE2 path, which has no
// FMA, agrees with them on the exact ops only). Every output starts as a NaN sentinel; a tile may
// write only its region. Seeds: TESSERA_TEST_SEED=<n> replays a run.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/simple_ops.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "kernels/tile_kernel.hpp"
#include "test_random.hpp"
#include "tile_grid.hpp"

namespace {

using namespace tessera;
using graph::OpType;
using graph::Shape;
using kernels::ConstTensorView;
using kernels::TileKernelVariant;
namespace cpu = kernels::cpu;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint64_t base_seed() {
  return tessera::test::base_seed("test_cpu_transformer_ops");
}

using tessera::test::pick;

int64_t random_size(std::mt19937_64& rng) {
  return pick<int64_t>(rng, {1, 1, 2, 3, 5, 7, 13, 17, 31, 37});
}

Shape random_shape(std::mt19937_64& rng, size_t rank) {
  Shape s(rank);
  for (int64_t& d : s) d = random_size(rng);
  return s;
}

uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

float sentinel() {
  return std::bit_cast<float>(uint32_t{0x7fc0dead});
}

std::vector<cpu::GemmIsa> supported_isas() {
  std::vector<cpu::GemmIsa> isas;
  for (cpu::GemmIsa isa : {cpu::GemmIsa::kPortable, cpu::GemmIsa::kAvx2, cpu::GemmIsa::kAvx512})
    if (cpu::gemm_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// The ISAs whose multiply-adds are fused (vector_math.hpp): they round alike.
bool fuses(cpu::GemmIsa isa) {
  return isa != cpu::GemmIsa::kPortable;
}

// Restores the ISA when a test ends, also by an exception.
struct IsaGuard {
  cpu::GemmIsa saved = cpu::gemm_isa();
  ~IsaGuard() { cpu::set_gemm_isa(saved); }
};

// Values in [-4, 4] with ties, signed zeros and (when `specials`) ±inf, NaN.
std::vector<float> random_values(const Shape& shape, std::mt19937_64& rng, bool specials,
                                 float range = 4.0f) {
  std::vector<float> v(static_cast<size_t>(graph::shape_numel(shape)));
  std::uniform_real_distribution<float> dist(-range, range);
  for (float& x : v) {
    const uint64_t k = rng() % 20;
    if (k == 0)
      x = std::round(dist(rng));
    else if (k == 1)
      x = -0.0f;
    else if (k == 2 && specials)
      x = pick(rng, {kInf, -kInf, kNaN});
    else
      x = dist(rng);
  }
  return v;
}

struct Case {
  graph::Operator op;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> data;
  Shape output;
};

std::string describe(const Case& c) {
  std::string s = std::string(graph::op_type_name(c.op.type)) + " inputs";
  for (const Shape& in : c.shapes) s += " " + graph::shape_to_string(in);
  s += " -> " + graph::shape_to_string(c.output) + " axis " + std::to_string(c.op.attrs.axis) +
       (c.op.attrs.softmax_coerce_2d ? " coerce_2d" : "") + (c.op.attrs.gelu_tanh ? " tanh" : "");
  if (!c.op.attrs.perm.empty()) s += " perm " + graph::shape_to_string(c.op.attrs.perm);
  return s;
}

std::vector<ConstTensorView> views_of(const Case& c) {
  std::vector<ConstTensorView> v;
  for (size_t i = 0; i < c.shapes.size(); ++i) v.push_back({c.data[i].data(), &c.shapes[i]});
  return v;
}

// `variant` of c.op's type over the whole output (no tiles).
std::vector<float> run_whole(std::string_view variant_name, const Case& c) {
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  REQUIRE(variant != nullptr);
  const std::vector<ConstTensorView> views = views_of(c);
  std::vector<float> out(static_cast<size_t>(graph::shape_numel(c.output)));
  const graph::Region whole = graph::Region::whole(c.output);
  variant->run({.op = &c.op,
                .inputs = views.data(),
                .input_count = views.size(),
                .output = {out.data(), &c.output},
                .region = &whole});
  return out;
}

std::vector<float> run_reference(const Case& c) {
  return run_whole("reference", c);
}

// The variant over random tiles; checks that each tile writes only its
// region and that everything is written.
std::vector<float> run_tiled(const TileKernelVariant& variant, const Case& c, std::mt19937_64& rng,
                             const void* prepared = nullptr) {
  const std::vector<ConstTensorView> views = views_of(c);
  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> out(static_cast<size_t>(numel), sentinel());
  for (const graph::Region& tile : test::random_tiles(c.output, rng)) {
    const std::vector<float> before = out;
    variant.run({.op = &c.op,
                 .inputs = views.data(),
                 .input_count = views.size(),
                 .output = {out.data(), &c.output},
                 .region = &tile,
                 .prepared = prepared});
    int64_t outside = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (!test::inside(tile, c.output, i) && bits(out[i]) != bits(before[i]) && outside++ < 3)
        FAIL_CHECK("tile ", graph::region_to_string(tile), " wrote outside at ", i);
    REQUIRE(outside == 0);
  }
  int64_t unwritten = 0;
  for (int64_t i = 0; i < numel; ++i) unwritten += bits(out[i]) == bits(sentinel());
  REQUIRE_MESSAGE(unwritten == 0, unwritten, " elements never written");
  return out;
}

// `tolerance(i, reference)` < 0: bitwise equality; else |diff| <= it, and
// NaN where the reference is NaN. Under every ISA, with the same bits on
// each and for two different tilings.
template <class Tolerance>
void check_case(std::string_view variant_name, const Case& c, uint64_t seed, Tolerance&& tolerance,
                bool check_applies = true) {
  INFO(variant_name, " seed ", seed, ": ", describe(c));
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  REQUIRE(variant != nullptr);
  std::vector<ConstTensorView> shape_views;
  for (const Shape& s : c.shapes) shape_views.push_back({nullptr, &s});
  // (Variants that need constant data check applies() themselves.)
  const std::optional<std::string> why =
      check_applies ? variant->applies(c.op, shape_views) : std::nullopt;
  REQUIRE_MESSAGE(!why, "applies() refused: ", why.value_or(""));
  const std::vector<float> expected = run_reference(c);
  std::mt19937_64 rng(seed);
  IsaGuard guard;
  std::optional<std::vector<float>> first, first_fused, first_unfused;
  for (cpu::GemmIsa isa : supported_isas()) {
    INFO("ISA ", cpu::gemm_isa_name(isa));
    cpu::set_gemm_isa(isa);
    const std::vector<float> out = run_tiled(*variant, c, rng);
    int64_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double tol = tolerance(i, expected[i]);
      const bool ok = tol < 0 ? bits(out[i]) == bits(expected[i])
                      : std::isnan(expected[i])
                          ? std::isnan(out[i])
                          : out[i] == expected[i] ||
                                std::fabs(static_cast<double>(out[i]) - expected[i]) <= tol;
      if (!ok && bad++ < 5)
        FAIL_CHECK("y[", i, "] = ", out[i], ", reference ", expected[i], " (tolerance ", tol, ")");
    }
    REQUIRE(bad == 0);
    // The same bits for another tiling, on every ISA with FMA, and (exact
    // elements) on every ISA. A NaN's sign and payload may differ where the
    // values are compared with a tolerance.
    const bool fused = fuses(isa);
    auto same = [&](size_t i, float a, float b, bool same_rounding) {
      const bool toleranced = !(tolerance(i, 0.0f) < 0);
      return bits(a) == bits(b) || (toleranced && !same_rounding) ||
             (toleranced && std::isnan(a) && std::isnan(b));
    };
    auto differences = [&](const std::vector<float>& other, bool same_rounding) {
      int64_t count = 0;
      for (size_t i = 0; i < out.size(); ++i)
        if (!same(i, other[i], out[i], same_rounding) && count++ < 3)
          FAIL_CHECK("y[", i, "] = ", out[i], ", other run ", other[i]);
      return count;
    };
    if (!first)
      first = out;
    else
      REQUIRE(differences(*first, fuses(supported_isas().front()) == fused) == 0);
    std::optional<std::vector<float>>& group = fused ? first_fused : first_unfused;
    if (!group) {
      group = out;
      REQUIRE(differences(run_tiled(*variant, c, rng), true) == 0);  // another tiling
    } else {
      REQUIRE(differences(*group, true) == 0);
    }
  }
}

auto exact = [](size_t, float) { return -1.0; };

// ---- vector math -------------------------------------------------------------

// Every 509th float bit pattern (both signs, all exponents: zeros,
// denormals, normals, ±inf and NaNs) plus the edges.
std::vector<float> sweep_inputs() {
  std::vector<float> v;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 509) v.push_back(std::bit_cast<float>(uint32_t(b)));
  for (float x : {0.0f,
                  -0.0f,
                  1e-45f,
                  -1e-45f,
                  1.17549435e-38f,
                  88.7228317f,
                  88.7228394f,
                  89.0f,
                  -87.3365479f,
                  -103.972076f,
                  -103.972084f,
                  -104.0f,
                  0.921875f,
                  0.92187506f,
                  3.925f,
                  0.625f,
                  0.62499994f,
                  9.0f,
                  kInf,
                  -kInf,
                  kNaN,
                  std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest()})
    v.push_back(x);
  return v;
}

double ref_math(cpu::UnaryMath op, float x) {
  switch (op) {
    case cpu::UnaryMath::kExp:
      return std::exp(x);
    case cpu::UnaryMath::kErf:
      return std::erf(x);
    case cpu::UnaryMath::kTanh:
      return std::tanh(x);
    case cpu::UnaryMath::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
    case cpu::UnaryMath::kGeluTanh:
      return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case cpu::UnaryMath::kSigmoid:
      return 1.0f / (1.0f + std::exp(-x));  // the reference kernel's float expression
    default:
      return 0.0;
  }
}

}  // namespace

TEST_CASE("exp_nonpositive_or_zero: exp_approx's bits for x in [-87, 0], 0 below, NaN as NaN") {
  // The softmax's and erf's shortcut (vector_math.hpp) against exp_approx
  // with the same cut at -87, checked here in this file's own batches: both
  // share exp_parts, so the identity does not depend on the ISA. Every float
  // in [-1, 0] at a stride, the span down to -90 around the -87 cut, far
  // below it, and the specials.
  using B = xsimd::batch<float>;
  constexpr size_t W = B::size;
  std::vector<float> x;
  for (uint32_t b = std::bit_cast<uint32_t>(-0.0f); b <= std::bit_cast<uint32_t>(-1.0f); b += 97)
    x.push_back(std::bit_cast<float>(b));
  for (float v = -1.0f; v > -90.0f; v = std::nextafter(v, -100.0f) - 1e-4f * std::fabs(v))
    x.push_back(v);
  for (float v :
       {-86.99999f, -87.0f, -87.00001f, -103.9f, -1e30f, -std::numeric_limits<float>::max(),
        -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::denorm_min(), 0.0f,
        std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  while (x.size() % W) x.push_back(-1.0f);
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); i += W) {
    const B v = B::load_unaligned(x.data() + i);
    alignas(64) float fast[W], full[W];
    cpu::exp_nonpositive_or_zero(v).store_aligned(fast);
    const auto below = v < B(-87.0f);
    xsimd::select(below, B(0.0f), cpu::exp_approx(xsimd::select(below, B(-87.0f), v)))
        .store_aligned(full);
    for (size_t l = 0; l < W; ++l) {
      const bool same =
          bits(fast[l]) == bits(full[l]) || (std::isnan(fast[l]) && std::isnan(full[l]));
      if (!same && differ++ < 5) FAIL_CHECK("x = ", x[i + l], ": ", fast[l], " against ", full[l]);
    }
  }
  CHECK(differ == 0);
  CHECK(x.size() > 100000);
}

TEST_CASE(
    "vector exp/erf/tanh/gelu: within the stated bound of the C library, same bits with FMA") {
  const std::vector<float> x = sweep_inputs();
  IsaGuard guard;
  for (cpu::UnaryMath op :
       {cpu::UnaryMath::kExp, cpu::UnaryMath::kErf, cpu::UnaryMath::kTanh, cpu::UnaryMath::kGeluErf,
        cpu::UnaryMath::kGeluTanh, cpu::UnaryMath::kSigmoid}) {
    INFO("op ", static_cast<int>(op));
    const bool gelu = op == cpu::UnaryMath::kGeluErf || op == cpu::UnaryMath::kGeluTanh;
    // Sigmoid: its e^-r polynomial's 7.5e-8 plus the roundings (4.0e-7 seen), 2^-20.
    const int rel_bits = op == cpu::UnaryMath::kSigmoid ? -20 : -21;
    std::optional<std::vector<float>> first;
    for (cpu::GemmIsa isa : supported_isas()) {
      INFO("ISA ", cpu::gemm_isa_name(isa));
      cpu::set_gemm_isa(isa);
      std::vector<float> y(x.size());
      cpu::vector_ops().unary(op, x.data(), y.data(), static_cast<int64_t>(x.size()), {});
      int64_t bad = 0;
      double worst = 0.0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double ref = ref_math(op, x[i]);
        if (std::isnan(ref)) {
          if (!std::isnan(y[i]) && bad++ < 5) FAIL_CHECK("f(", x[i], ") = ", y[i], ", want NaN");
          continue;
        }
        if (std::isinf(ref)) {
          if (y[i] != ref && bad++ < 5) FAIL_CHECK("f(", x[i], ") = ", y[i], ", want ", ref);
          continue;
        }
        // exp/erf/tanh: 2^-21 relative (2^-148 absolute below the normal
        // range). GELU: the erf/tanh bound times 0.5|x| plus the final
        // roundings, 2^-21 |x| + 2^-21 |y|.
        const double err = std::fabs(static_cast<double>(y[i]) - ref);
        const double tol =
            gelu ? std::ldexp(std::fabs(x[i]) + std::fabs(ref), -21)
                 : std::max(std::ldexp(std::fabs(ref), rel_bits), std::ldexp(1.0, -148));
        if (!gelu) worst = std::max(worst, err / std::max(std::fabs(ref), 1e-30));
        if (!(err <= tol) && bad++ < 5)
          FAIL_CHECK("f(", x[i], ") = ", y[i], ", C library ", ref, " (tolerance ", tol, ")");
      }
      MESSAGE("op ", static_cast<int>(op), " ", cpu::gemm_isa_name(isa), ": worst relative error ",
              worst);
      CHECK(bad == 0);
      if (!fuses(isa)) continue;  // SSE2 has no FMA: its own bits, within the bound
      if (!first) {
        first = y;
      } else {
        int64_t differ = 0;
        for (size_t i = 0; i < y.size(); ++i) differ += bits((*first)[i]) != bits(y[i]);
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("cpu.unary vector ops vs the reference: algebraic ones bitwise, others within bound") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 150; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7727 + 13);
    Case c;
    c.op.name = "unary";
    c.op.type = pick(rng, {OpType::Exp, OpType::Erf, OpType::Tanh, OpType::Gelu, OpType::Sqrt,
                           OpType::Neg, OpType::Abs, OpType::Reciprocal, OpType::LeakyRelu,
                           OpType::HardSigmoid, OpType::HardSwish, OpType::Sigmoid});
    c.op.attrs.gelu_tanh = rng() % 2;
    c.op.attrs.alpha = pick(rng, {0.01f, 0.2f, 1.5f});
    c.op.attrs.beta = pick(rng, {0.5f, 0.0f, -0.25f});
    c.output = random_shape(rng, static_cast<size_t>(rng() % 5));
    if (rng() % 4 == 0) c.output.push_back(pick<int64_t>(rng, {16, 33, 64, 127}));
    c.shapes = {c.output};
    c.data = {random_values(c.output, rng, true, pick(rng, {4.0f, 20.0f}))};
    const bool polynomial = c.op.type == OpType::Exp || c.op.type == OpType::Erf ||
                            c.op.type == OpType::Tanh || c.op.type == OpType::Gelu ||
                            c.op.type == OpType::Sigmoid;
    const std::vector<float>& x = c.data[0];
    check_case("cpu.unary", c, seed, [&](size_t i, float ref) {
      if (!polynomial) return -1.0;
      const double r = std::fabs(ref);
      if (c.op.type == OpType::Gelu) return std::ldexp(std::fabs(x[i]) + r, -21);
      return std::max(std::ldexp(r, c.op.type == OpType::Sigmoid ? -20 : -21),
                      std::ldexp(1.0, -148));
    });
  }
}

// One sigmoid, SiLU and GELU in the codebase: the GEMM epilogue (vector
// lanes in the microkernel, the scalar form on the edge columns), the
// span form (depthwise NCHW, Gemm with C) and cpu.unary give the same bits
// for the same pre-activation values, on every ISA. B is the sweep as one
// row and A a column of 1s, so each row of the tile's pre-activation values
// is the sweep (up to the sign of zero: `pre` is what the microkernel
// computed): one row goes through the edge kernels, 16 rows through whole
// MR-row blocks too (their deferred activation runs a block at a time).
TEST_CASE("fused Sigmoid/SiLU/GELU epilogues give cpu.unary's bits on every ISA") {
  const std::vector<float> x = sweep_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  constexpr int64_t kRows = 16;
  const std::vector<float> ones(kRows, 1.0f);
  IsaGuard guard;
  for (cpu::GemmIsa isa : supported_isas())
    for (int64_t rows : {int64_t{1}, kRows}) {
      INFO("ISA ", cpu::gemm_isa_name(isa), ", rows ", rows);
      cpu::set_gemm_isa(isa);
      const cpu::PackedMatrix b = cpu::pack_b(x.data(), 1, n, n, false);
      const cpu::GemmTile row_tile{.m0 = 0, .m1 = 1, .n0 = 0, .n1 = n};
      const cpu::GemmTile tile{.m0 = 0, .m1 = rows, .n0 = 0, .n1 = n};
      std::vector<float> pre(x.size());
      cpu::gemm_tile(ones.data(), 1, b, pre.data(), n, row_tile);
      std::vector<float> sigmoid(x.size());
      cpu::vector_ops().unary(cpu::UnaryMath::kSigmoid, pre.data(), sigmoid.data(), n, {});
      for (cpu::GemmActivation act : {cpu::GemmActivation::kSigmoid, cpu::GemmActivation::kSilu,
                                      cpu::GemmActivation::kGelu, cpu::GemmActivation::kGeluTanh}) {
        INFO("activation ", static_cast<int>(act));
        std::vector<float> want(x.size());
        if (act == cpu::GemmActivation::kSigmoid) want = sigmoid;
        if (act == cpu::GemmActivation::kSilu)
          for (size_t i = 0; i < x.size(); ++i)
            want[i] = pre[i] * sigmoid[i];  // Mul(x, Sigmoid(x))
        if (act == cpu::GemmActivation::kGelu)
          cpu::vector_ops().unary(cpu::UnaryMath::kGeluErf, pre.data(), want.data(), n, {});
        if (act == cpu::GemmActivation::kGeluTanh)
          cpu::vector_ops().unary(cpu::UnaryMath::kGeluTanh, pre.data(), want.data(), n, {});
        const cpu::GemmEpilogue ep{.activation = act};
        std::vector<float> fused(static_cast<size_t>(rows * n));
        cpu::gemm_tile(ones.data(), 1, b, fused.data(), n, tile, ep);
        std::vector<float> span = pre;
        cpu::apply_activation_span(ep, span.data(), n);
        int64_t fused_differ = 0, scalar_differ = 0, span_differ = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const uint32_t w = bits(want[i]);
          for (int64_t r = 0; r < rows; ++r) fused_differ += bits(fused[r * n + i]) != w;
          span_differ += bits(span[i]) != w;
          scalar_differ +=
              bits(cpu::apply_epilogue_scalar(pre[i], ep, 0, static_cast<int64_t>(i))) != w;
        }
        CHECK(fused_differ == 0);
        CHECK(span_differ == 0);
        CHECK(scalar_differ == 0);
      }
    }
}

TEST_CASE("cpu.binary Sub/Div/Max/Min and cpu.binary_broadcast match the reference bitwise") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 6007 + 17);
    Case c;
    c.op.name = "binary";
    c.op.type =
        pick(rng, {OpType::Add, OpType::Mul, OpType::Sub, OpType::Div, OpType::Max, OpType::Min});
    const size_t rank = 1 + static_cast<size_t>(rng() % 4);
    c.output = random_shape(rng, rank);
    if (rng() % 3 == 0) c.output.back() = pick<int64_t>(rng, {16, 17, 64});
    // Each operand: full, scalar, or leading 1s then the output's trailing dims.
    bool trailing = false;
    auto operand = [&]() -> Shape {
      const uint64_t kind = rng() % 3;
      if (kind == 0) return c.output;
      if (kind == 1) return Shape(rng() % (rank + 1), 1);
      const size_t t0 = 1 + static_cast<size_t>(rng() % rank);  // first dim kept
      Shape s(c.output.begin() + static_cast<ptrdiff_t>(t0 - 1), c.output.end());
      s[0] = 1;
      if (rng() % 2) s.erase(s.begin());  // drop the leading 1
      if (s.size() < rank && rng() % 2) s.insert(s.begin(), 1);
      trailing = true;
      return s;
    };
    c.shapes = {operand(), operand()};
    for (const Shape& s : c.shapes) c.data.push_back(random_values(s, rng, true));
    std::vector<ConstTensorView> shape_views;
    for (const Shape& s : c.shapes) shape_views.push_back({nullptr, &s});
    // The suffix may also be a plain full / channel / scalar operand: then
    // cpu.binary runs it (and cpu.binary_broadcast declines).
    const bool plain = !cpu::binary_applies(c.op, shape_views);
    CHECK(plain != !cpu::binary_broadcast_applies(c.op, shape_views));
    if (!trailing) CHECK(plain);
    check_case(plain ? "cpu.binary" : "cpu.binary_broadcast", c, seed, exact);
  }
}

TEST_CASE("cpu.binary_broadcast: the transformer shapes, and reasons where it does not apply") {
  const uint64_t seed = base_seed();
  std::mt19937_64 rng(seed);
  for (auto [a, b] : {std::pair<Shape, Shape>{{1, 128, 768}, {768}},
                      {{1, 12, 128, 128}, {1, 1, 1, 128}},
                      {{1, 1, 128, 128}, {1, 12, 128, 128}},
                      {{1}, {1, 12, 128, 128}}}) {
    Case c;
    c.op.type = pick(rng, {OpType::Add, OpType::Sub, OpType::Mul, OpType::Div});
    c.shapes = {a, b};
    c.output = graph::shape_numel(a) > graph::shape_numel(b) ? a : b;
    for (const Shape& s : c.shapes) c.data.push_back(random_values(s, rng, false));
    std::vector<ConstTensorView> views;
    for (const Shape& s : c.shapes) views.push_back({nullptr, &s});
    check_case(cpu::binary_applies(c.op, views) ? "cpu.binary_broadcast" : "cpu.binary", c, seed,
               exact);
  }
  graph::Operator op;
  op.type = OpType::Add;
  auto reason = [&](Shape a, Shape b) {
    const ConstTensorView views[] = {{nullptr, &a}, {nullptr, &b}};
    return cpu::binary_broadcast_applies(op, views);
  };
  CHECK_FALSE(reason({2, 3, 5}, {5}));
  CHECK_FALSE(reason({2, 3, 5}, {1, 3, 5}));
  REQUIRE(reason({2, 3, 5}, {2, 3, 5}));  // no trailing operand: cpu.binary's
  CHECK(reason({2, 3, 5}, {2, 3, 5})->find("cpu.binary runs it") != std::string::npos);
  CHECK_FALSE(reason({4, 1}, {1, 5}));  // a channel and a trailing operand
  for (auto [a, b] : {std::pair<Shape, Shape>{{2, 3, 5}, {2, 1, 5}}, {{2, 1, 5}, {1, 3, 1}}}) {
    const std::optional<std::string> why = reason(a, b);
    REQUIRE(why);
    CHECK(why->find("cpu.broadcast runs it") != std::string::npos);
  }
  op.type = OpType::Pow;
  CHECK(reason({2}, {2}));
}

TEST_CASE("cpu.broadcast: any broadcast of the binary ops and Where, bitwise the reference") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7331 + 11);
    Case c;
    c.op.name = "broadcast";
    c.op.type = pick(rng, {OpType::Add, OpType::Mul, OpType::Sub, OpType::Div, OpType::Max,
                           OpType::Min, OpType::Where, OpType::Where});
    const size_t rank = 1 + static_cast<size_t>(rng() % 4);
    Shape full = random_shape(rng, rank);
    if (rng() % 3 == 0) full.back() = pick<int64_t>(rng, {1, 16, 17, 64});
    // Each operand: a suffix of the output's dims, each kept or set to 1.
    auto operand = [&]() -> Shape {
      Shape s(full.begin() + static_cast<ptrdiff_t>(rng() % (rank + 1)), full.end());
      for (int64_t& d : s)
        if (rng() % 2) d = 1;
      return s;
    };
    const size_t count = c.op.type == OpType::Where ? 3 : 2;
    for (size_t i = 0; i < count; ++i) c.shapes.push_back(operand());
    if (rng() % 4 == 0) c.shapes[rng() % count] = full;  // the output's whole shape
    // The output is what the operands broadcast to (dims all 1 may stay 1).
    c.output = Shape(rank, 1);
    for (const Shape& s : c.shapes)
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d] != 1) c.output[d + rank - s.size()] = s[d];
    for (size_t i = 0; i < count; ++i) {
      std::vector<float> v = random_values(c.shapes[i], rng, true);
      if (c.op.type == OpType::Where && i == 0)  // a condition: 0 or 1 (ONNX bool)
        for (float& x : v) x = static_cast<float>(rng() % 2);
      c.data.push_back(std::move(v));
    }
    check_case("cpu.broadcast", c, seed, exact);
  }
  // GPT-2's masked attention scores and BERT batch 8's mask, as compiled.
  const uint64_t seed = base_seed();
  std::mt19937_64 rng(seed);
  Case where;
  where.op.type = OpType::Where;
  where.shapes = {{1, 1, 16, 16}, {1, 3, 16, 16}, {}};
  where.output = {1, 3, 16, 16};
  where.data = {std::vector<float>(256),
                random_values(where.shapes[1], rng, false),
                {std::numeric_limits<float>::lowest()}};
  for (int64_t q = 0; q < 16; ++q)
    for (int64_t k = 0; k <= q; ++k) where.data[0][static_cast<size_t>(q * 16 + k)] = 1.0f;
  check_case("cpu.broadcast", where, seed, exact);
  Case mask;
  mask.op.type = OpType::Add;
  mask.shapes = {{8, 2, 9, 9}, {8, 1, 1, 9}};
  mask.output = {8, 2, 9, 9};
  for (const Shape& s : mask.shapes) mask.data.push_back(random_values(s, rng, false));
  std::vector<ConstTensorView> views;
  for (const Shape& s : mask.shapes) views.push_back({nullptr, &s});
  CHECK(cpu::binary_applies(mask.op, views));  // neither of the span variants takes it
  CHECK(cpu::binary_broadcast_applies(mask.op, views));
  check_case("cpu.broadcast", mask, seed, exact);

  graph::Operator op;
  op.type = OpType::Pow;
  const Shape two{2}, three{3};
  const ConstTensorView pair[] = {{nullptr, &two}, {nullptr, &two}};
  CHECK(cpu::broadcast_applies(op, pair));
  op.type = OpType::Add;
  const ConstTensorView mismatched[] = {{nullptr, &two}, {nullptr, &three}};
  CHECK(cpu::broadcast_applies(op, mismatched));
  op.type = OpType::Where;
  CHECK(cpu::broadcast_applies(op, pair));  // two inputs
}

TEST_CASE("cpu.pow: constant exponents 2 and 3 within 2 ulp of std::pow; others refused") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 100; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 1621 + 31);
    Case c;
    c.op.name = "pow";
    c.op.type = OpType::Pow;
    c.output = random_shape(rng, static_cast<size_t>(rng() % 5));
    c.shapes = {c.output, Shape(rng() % (c.output.size() + 1), 1)};
    c.data = {random_values(c.output, rng, true, pick(rng, {4.0f, 1e12f})),
              {pick(rng, {2.0f, 3.0f})}};
    // The reference's std::pow rounds once, x*x*x twice: 2 ulp <= 2^-22 relative.
    const TileKernelVariant* variant = kernels::find_tile_kernel_variant(OpType::Pow, "cpu.pow");
    REQUIRE(variant != nullptr);
    const std::vector<ConstTensorView> views = views_of(c);
    REQUIRE_FALSE(variant->applies(c.op, views));
    check_case(
        "cpu.pow", c, seed,
        [](size_t, float ref) { return std::ldexp(std::fabs(static_cast<double>(ref)), -22); },
        /*check_applies=*/false);
  }
  graph::Operator op;
  op.type = OpType::Pow;
  const Shape x{2, 3}, e{1};
  const float half = 0.5f;
  const ConstTensorView constant[] = {{nullptr, &x}, {&half, &e}};
  REQUIRE(cpu::pow_applies(op, constant));
  CHECK(cpu::pow_applies(op, constant)->find("uses the reference") != std::string::npos);
  const ConstTensorView activation[] = {{nullptr, &x}, {nullptr, &e}};
  CHECK(cpu::pow_applies(op, activation));
}

// Two exps within 2^-21 each; sums of n positive terms (the reference's
// sequential, ours in 16 lanes) within (n + 4) u each; the reference's
// division against our product with 1 / sum (1.5 u). And
// exp(x - max) < e^-87 (1.6e-38) is 0 in cpu.softmax, where the reference
// may give a subnormal (exp_nonpositive_or_zero): 2^-125 absolute covers it.
auto softmax_tolerance(int64_t n) {
  const double rel =
      2.0 * std::ldexp(1.0, -21) + (2.0 * static_cast<double>(n) + 12.0) * std::ldexp(1.0, -24);
  return [rel](size_t, float ref) { return rel * std::fabs(ref) + std::ldexp(1.0, -125); };
}

TEST_CASE("cpu.softmax vs the reference on any axis, opset 13 and coerce_2d") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 4099 + 19);
    Case c;
    c.op.name = "softmax";
    c.op.type = OpType::Softmax;
    const size_t rank = 1 + static_cast<size_t>(rng() % 4);
    do {
      c.output = random_shape(rng, rank);
      if (rng() % 3 == 0) c.output.back() = pick<int64_t>(rng, {16, 33, 128, 129});
    } while (graph::shape_numel(c.output) > 20000);
    c.op.attrs.axis = static_cast<int64_t>(rng() % rank);
    if (rng() % 2) c.op.attrs.axis = static_cast<int64_t>(rank - 1);
    c.op.attrs.softmax_coerce_2d = rng() % 4 == 0;
    c.shapes = {c.output};
    c.data = {random_values(c.output, rng, rng() % 8 == 0, pick(rng, {4.0f, 30.0f}))};
    const auto axis = static_cast<size_t>(c.op.attrs.axis);
    const int64_t n =
        c.op.attrs.softmax_coerce_2d
            ? graph::shape_numel(Shape(c.output.begin() + c.op.attrs.axis, c.output.end()))
            : c.output[axis];
    check_case("cpu.softmax", c, seed, softmax_tolerance(n));
  }
  graph::Operator op;
  op.type = OpType::Softmax;
  const Shape scalar{};
  const ConstTensorView views[] = {{nullptr, &scalar}};
  REQUIRE(cpu::softmax_applies(op, views));
  CHECK(cpu::softmax_applies(op, views)->find("uses the reference") != std::string::npos);
}

TEST_CASE("cpu.softmax on masked rows: lanes more than 87 below the row's max are exactly 0") {
  // GPT-2's causal mask puts -3.4e38 (float's lowest) where a query may not
  // look; lanes 80..110 below lane 0 straddle the point where exp turns
  // subnormal (computed as 0 here, so no such lane pays a microcode assist).
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 40; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 613 + 5);
    Case c;
    c.op.name = "masked softmax";
    c.op.type = OpType::Softmax;
    c.op.attrs.axis = 2;
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
    const int64_t n = pick<int64_t>(rng, {1, 7, 16, 33, 128, 129, 1024});
    c.output = {1, rows, n};
    c.shapes = {c.output};
    std::vector<float> x = random_values(c.output, rng, false, 4.0f);
    std::uniform_real_distribution<float> boundary(-110.0f, -80.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 1; i < n; ++i) {  // lane 0 stays: some lane of each row is unmasked
        float& v = x[static_cast<size_t>(r * n + i)];
        const uint64_t k = rng() % 4;
        if (k == 0) v = std::numeric_limits<float>::lowest();
        if (k == 1) v = x[static_cast<size_t>(r * n)] + boundary(rng);
      }
    c.data = {x};
    const std::vector<float> out = [&] {
      check_case("cpu.softmax", c, seed, softmax_tolerance(n));
      return run_tiled(*kernels::find_tile_kernel_variant(OpType::Softmax, "cpu.softmax"), c, rng);
    }();
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = x.begin() + r * n;
      const float max = *std::max_element(row, row + n);
      for (int64_t i = 0; i < n; ++i) {
        const auto at = static_cast<size_t>(r * n + i);
        if (x[at] - max < -87.0f) CHECK(out[at] == 0.0f);
      }
    }
  }
}

TEST_CASE("Softmax with a fused scale and mask: the reference is Mul, Add, Softmax; cpu.softmax") {
  // graph/fuse_softmax_input.hpp: softmax(alpha * x + m) along the last
  // axis, m broadcast to x (GPT-2: [1, 1, S, S] over [1, 12, S, S]).
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 120; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7001 + 3);
    const size_t rank = 1 + static_cast<size_t>(rng() % 4);
    Shape x_shape;
    do {
      x_shape = random_shape(rng, rank);
      if (rng() % 3 == 0) x_shape.back() = pick<int64_t>(rng, {16, 33, 128, 129});
    } while (graph::shape_numel(x_shape) > 20000);
    const bool with_mask = rng() % 4 != 0;
    const float alpha =
        with_mask ? pick(rng, {1.0f, 0.125f, 0.3f, -2.0f}) : pick(rng, {0.125f, 3.0f});
    Shape m_shape;  // x's trailing dims, each kept or 1
    for (size_t d = rng() % rank; d < rank; ++d) m_shape.push_back(rng() % 3 == 0 ? 1 : x_shape[d]);
    Case fused;
    fused.op.name = "scaled masked softmax";
    fused.op.type = OpType::Softmax;
    fused.op.attrs.axis = static_cast<int64_t>(rank - 1);
    fused.op.attrs.alpha = alpha;
    fused.output = x_shape;
    fused.shapes = {x_shape};
    fused.data = {random_values(x_shape, rng, false, 4.0f)};
    if (with_mask) {
      fused.shapes.push_back(m_shape);
      fused.data.push_back(random_values(m_shape, rng, false, 4.0f));
    }
    // The unfused ops, each through its reference kernel.
    Case mul{
        .op = {}, .shapes = {x_shape, {1}}, .data = {fused.data[0], {alpha}}, .output = x_shape};
    mul.op.type = OpType::Mul;
    std::vector<float> z = run_reference(mul);
    if (with_mask) {
      Case add{
          .op = {}, .shapes = {x_shape, m_shape}, .data = {z, fused.data[1]}, .output = x_shape};
      add.op.type = OpType::Add;
      z = run_reference(add);
    }
    Case plain{.op = fused.op, .shapes = {x_shape}, .data = {z}, .output = x_shape};
    plain.op.attrs.alpha = 1.0f;
    const std::vector<float> unfused = run_reference(plain);
    const std::vector<float> reference = run_reference(fused);
    INFO("seed ", seed, ": ", describe(fused), " alpha ", alpha);
    int64_t differ = 0;
    for (size_t i = 0; i < reference.size(); ++i) differ += bits(reference[i]) != bits(unfused[i]);
    CHECK(differ == 0);
    check_case("cpu.softmax", fused, seed, softmax_tolerance(x_shape.back()));
  }
  // Off the last axis a fused scale has no fast path.
  graph::Operator op;
  op.type = OpType::Softmax;
  op.attrs.axis = 0;
  op.attrs.alpha = 0.5f;
  const Shape two_d{3, 4};
  const ConstTensorView views[] = {{nullptr, &two_d}};
  REQUIRE(cpu::softmax_applies(op, views));
  CHECK(cpu::softmax_applies(op, views)->find("uses the reference") != std::string::npos);
}

// Equal bits, or NaN on both sides: a NaN's payload is whichever operand the
// compiler put first in a product (both NaN once a row's sum is).
bool same_bits_or_nan(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && bits(a[i]) != bits(b[i])) return false;
  return true;
}

TEST_CASE("softmax_row gives softmax_stats + softmax_scale's bits, in place too, on every ISA") {
  // cpu.softmax runs a tile that holds whole rows through softmax_row (each
  // exp once, kept in y); partial rows through the two-pass functions.
  const uint64_t seed = base_seed();
  std::mt19937_64 rng(seed * 7919 + 3);
  IsaGuard guard;
  for (cpu::GemmIsa isa : supported_isas()) {
    INFO("ISA ", cpu::gemm_isa_name(isa), " seed ", seed);
    cpu::set_gemm_isa(isa);
    const cpu::VectorOps& ops = cpu::vector_ops();
    for (const int64_t n : {1, 2, 7, 15, 16, 17, 31, 33, 97, 128, 1024, 1031}) {
      CAPTURE(n);
      const std::vector<float> x =
          random_values(Shape{n}, rng, rng() % 4 == 0, pick(rng, {4.0f, 30.0f}));
      std::vector<float> two_pass(static_cast<size_t>(n)), one_pass(static_cast<size_t>(n));
      ops.softmax_scale(x.data(), two_pass.data(), n, ops.softmax_stats(x.data(), n));
      ops.softmax_row(x.data(), one_pass.data(), n);
      CHECK(same_bits_or_nan(one_pass, two_pass));
      std::vector<float> in_place = x;
      ops.softmax_row(in_place.data(), in_place.data(), n);
      CHECK(same_bits_or_nan(in_place, two_pass));
    }
  }
}

TEST_CASE(
    "cpu.layer_norm vs the reference (double sums): any axis, with and without B; "
    "RMSNormalization") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 3319 + 23);
    Case c;
    c.op.name = "layer_norm";
    const bool rms = t % 3 == 2;  // x / RMS(x) · Scale, no B
    c.op.type = rms ? OpType::RMSNormalization : OpType::LayerNormalization;
    const size_t rank = 1 + static_cast<size_t>(rng() % 4);
    do {
      c.output = random_shape(rng, rank);
      if (rng() % 3 == 0) c.output.back() = pick<int64_t>(rng, {16, 33, 768});
    } while (graph::shape_numel(c.output) > 20000);
    c.op.attrs.axis = static_cast<int64_t>(rng() % rank);
    if (rng() % 2) c.op.attrs.axis = static_cast<int64_t>(rank - 1);
    c.op.attrs.epsilon = pick(rng, {1e-5f, 1e-12f, 0.1f});
    const Shape normalized(c.output.begin() + c.op.attrs.axis, c.output.end());
    c.shapes = {c.output, normalized};
    if (rng() % 2 && !rms) c.shapes.push_back(normalized);
    // An offset mean, as real activations have.
    std::vector<float> x = random_values(c.output, rng, false);
    const float shift = pick(rng, {0.0f, 3.0f, -10.0f});
    for (float& v : x) v += shift;
    c.data = {x};
    for (size_t i = 1; i < c.shapes.size(); ++i)
      c.data.push_back(random_values(c.shapes[i], rng, false));
    // Float statistics around the row's first element against double ones:
    // errors relative to the deviations' scale (not the mean's), times
    // |Scale| <= 4, plus the output's roundings.
    check_case("cpu.layer_norm", c, seed,
               [](size_t, float ref) { return 2e-5 * (std::fabs(ref) + 4.0); });
  }
  graph::Operator op;
  op.type = OpType::LayerNormalization;
  op.attrs.axis = 1;
  const Shape x{2, 3}, bad{1};
  const ConstTensorView views[] = {{nullptr, &x}, {nullptr, &bad}};
  REQUIRE(cpu::layer_norm_applies(op, views));
  CHECK(cpu::layer_norm_applies(op, views)->find("uses the reference") != std::string::npos);
}

TEST_CASE("cpu.slice matches the reference bitwise: any starts and steps, GPT-2's QKV split") {
  // Random ranks 0-5, each dim sliced from a random start with a step of
  // -3..3 (not 0) over as many elements as fit; random tiles (check_case).
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7919 + 31);
    Case c;
    c.op.name = "slice";
    c.op.type = OpType::Slice;
    const size_t rank = static_cast<size_t>(rng() % 6);
    const Shape in = random_shape(rng, rank);
    c.output = Shape(rank);
    c.op.attrs.starts.resize(rank);
    c.op.attrs.steps.resize(rank);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = in[d];
      int64_t step = static_cast<int64_t>(rng() % 7) - 3;
      if (step == 0 || rng() % 3 == 0) step = 1;  // contiguous runs often
      const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      const int64_t room = step > 0 ? (n - 1 - start) / step : start / -step;
      c.op.attrs.starts[d] = start;
      c.op.attrs.steps[d] = step;
      c.output[d] = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(room + 1));
    }
    c.shapes = {in};
    c.data = {random_values(in, rng, true)};
    check_case("cpu.slice", c, seed, exact);
  }
  for (int64_t part = 0; part < 3; ++part) {  // [1, 128, 2304] into three [1, 128, 768]
    Case c;
    c.op.type = OpType::Slice;
    c.op.attrs.starts = {0, 0, part * 768};
    c.op.attrs.steps = {1, 1, 1};
    c.output = {1, 128, 768};
    c.shapes = {{1, 128, 2304}};
    std::mt19937_64 rng(seed0 + static_cast<uint64_t>(part));
    c.data = {random_values(c.shapes[0], rng, false)};
    check_case("cpu.slice", c, seed0, exact);
  }
  graph::Operator op;
  op.type = OpType::Slice;
  op.attrs.starts = {0};
  op.attrs.steps = {1};
  const Shape x{2, 3};
  const ConstTensorView views[] = {{nullptr, &x}};
  REQUIRE(cpu::slice_applies(op, views));
  CHECK(cpu::slice_applies(op, views)->find("uses the reference") != std::string::npos);
}

TEST_CASE("cpu.transpose matches the reference bitwise: any perm, BERT's head split") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 2663 + 29);
    Case c;
    c.op.name = "transpose";
    c.op.type = OpType::Transpose;
    const size_t rank = static_cast<size_t>(rng() % 6);
    Shape in = random_shape(rng, rank);
    if (rank > 0 && rng() % 3 == 0) in[rng() % rank] = pick<int64_t>(rng, {16, 33, 64});
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    c.op.attrs.perm = perm;
    c.output = Shape(rank);
    for (size_t i = 0; i < rank; ++i) c.output[i] = in[static_cast<size_t>(perm[i])];
    c.shapes = {in};
    c.data = {random_values(in, rng, true)};
    check_case("cpu.transpose", c, seed, exact);
  }
  for (auto [in, perm] : {std::pair<Shape, std::vector<int64_t>>{{1, 128, 12, 64}, {0, 2, 1, 3}},
                          {{1, 12, 128, 64}, {0, 1, 3, 2}},
                          {{1, 128, 12, 64}, {0, 2, 3, 1}}}) {
    Case c;
    c.op.type = OpType::Transpose;
    c.op.attrs.perm = perm;
    c.output = Shape(in.size());
    for (size_t i = 0; i < in.size(); ++i) c.output[i] = in[static_cast<size_t>(perm[i])];
    c.shapes = {in};
    std::mt19937_64 rng(seed0);
    c.data = {random_values(in, rng, false)};
    check_case("cpu.transpose", c, seed0, exact);
  }
  graph::Operator op;
  op.type = OpType::Transpose;
  op.attrs.perm = {0, 0};
  const Shape x{2, 3};
  const ConstTensorView views[] = {{nullptr, &x}};
  CHECK(cpu::transpose_applies(op, views));
}

TEST_CASE(
    "cpu.gather matches the reference bitwise: any axis but the last, run-time or constant "
    "indices, negative ones") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 150; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7919 + 3);
    Case c;
    c.op.name = "gather";
    c.op.type = OpType::Gather;
    const size_t rank = 2 + static_cast<size_t>(rng() % 3);
    const Shape data = random_shape(rng, rank);
    c.op.attrs.axis = static_cast<int64_t>(rng() % (rank - 1));
    const Shape indices = random_shape(rng, static_cast<size_t>(rng() % 3));
    const int64_t axis_size = data[static_cast<size_t>(c.op.attrs.axis)];
    std::vector<int64_t> ids(static_cast<size_t>(graph::shape_numel(indices)));
    for (int64_t& i : ids)
      i = static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * axis_size)) - axis_size;
    c.output.assign(data.begin(), data.begin() + c.op.attrs.axis);
    c.output.insert(c.output.end(), indices.begin(), indices.end());
    c.output.insert(c.output.end(), data.begin() + c.op.attrs.axis + 1, data.end());
    c.shapes = {data};
    c.data = {random_values(data, rng, true)};
    if (rng() % 2) {  // run-time indices: the int64 bytes in the view's float storage
      std::vector<float> bytes(2 * ids.size() + 1);
      std::memcpy(bytes.data(), ids.data(), ids.size() * sizeof(int64_t));
      c.shapes.push_back(indices);
      c.data.push_back(std::move(bytes));
    } else {
      c.op.attrs.indices = ids;
      c.op.attrs.indices_shape = indices;
    }
    check_case("cpu.gather", c, seed, exact);
  }
  // BERT's embedding lookup.
  Case bert;
  bert.op.type = OpType::Gather;
  bert.op.attrs.axis = 0;
  bert.op.attrs.indices = {0, 511, 7, -1, 300};
  bert.op.attrs.indices_shape = {1, 5};
  bert.shapes = {{512, 768}};
  bert.output = {1, 5, 768};
  std::mt19937_64 rng(seed0);
  bert.data = {random_values(bert.shapes[0], rng, false)};
  check_case("cpu.gather", bert, seed0, exact);
}

TEST_CASE("cpu.gather: the last axis is the reference's, an index out of range a message") {
  graph::Operator op;
  op.type = OpType::Gather;
  op.attrs.axis = 1;
  const Shape x{2, 3};
  const ConstTensorView views[] = {{nullptr, &x}};
  REQUIRE(cpu::gather_applies(op, views));
  CHECK(cpu::gather_applies(op, views)->find("uses the reference") != std::string::npos);
  op.attrs.axis = 0;
  CHECK_FALSE(cpu::gather_applies(op, views));
  op.name = "embedding";
  op.attrs.indices = {0, 2};
  op.attrs.indices_shape = {2};
  const std::vector<float> data(6, 1.0f);
  const ConstTensorView inputs[] = {{data.data(), &x}};
  const Shape out_shape{2, 3};
  std::vector<float> out(6);
  const graph::Region whole = graph::Region::whole(out_shape);
  const TileKernelVariant* variant =
      kernels::find_tile_kernel_variant(OpType::Gather, "cpu.gather");
  REQUIRE(variant != nullptr);
  try {
    variant->run({.op = &op,
                  .inputs = inputs,
                  .input_count = 1,
                  .output = {out.data(), &out_shape},
                  .region = &whole});
    FAIL("no error for index 2 of an axis of 2");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("index 2 is out of range for axis 0 of size 2") !=
          std::string::npos);
    CHECK(std::string(e.what()).find("embedding") != std::string::npos);
  }
}

// Whether mask [rows, cols] (exactly the scores' plane) is, in every row, a
// run of at least one zero and then one value <= -1e30 throughout.
bool prefix_mask(const std::vector<float>& mask, const Shape& shape, int64_t rows, int64_t cols) {
  if (shape != Shape{rows, cols}) return false;
  float fill = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    int64_t j = 0;
    while (j < cols && mask[static_cast<size_t>(i * cols + j)] == 0.0f) ++j;
    if (j == 0) return false;
    for (; j < cols; ++j) {
      const float x = mask[static_cast<size_t>(i * cols + j)];
      if (fill == 0.0f) fill = x;
      if (x != fill || !(x <= -1e30f)) return false;
    }
  }
  return fill != 0.0f;
}

TEST_CASE(
    "FusedAttention: the bits of the MatMul, Softmax, MatMul it replaces, reference and CPU") {
  // graph/fuse_attention.hpp. The reference kernel must give the reference
  // chain's bits; cpu.attention, tiled at random, the bits of
  // cpu.matmul_batched, cpu.softmax and cpu.matmul_batched on every ISA, and
  // the reference within the error of its FMA sums and exp. Long rows (S
  // 700 with 100+ queries) take several of cpu.attention's row blocks;
  // causal and padding masks let it skip the columns they zero (-1e30 too,
  // whose rows' z_bound decides). With nan_probabilities_to_zero the chain
  // ends in the NaN guard Where(IsNaN(p), 0, p), and rows of all -inf mask
  // or a NaN query make NaN probabilities for it to zero.
  const uint64_t seed0 = base_seed();
  IsaGuard guard;
  int prefix_cases = 0;
  for (int t = 0; t < 60; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 8191 + 7);
    const size_t rank = 2 + static_cast<size_t>(rng() % 3);
    Shape batch(rank - 2);
    int64_t m = 0, d = 0, s = 0, dv = 0;
    do {
      for (int64_t& b : batch) b = pick<int64_t>(rng, {1, 2, 3});
      m = rng() % 4 == 0 ? pick<int64_t>(rng, {100, 130}) : random_size(rng);
      s = rng() % 4 == 0 ? pick<int64_t>(rng, {64, 129, 700}) : random_size(rng);
      d = random_size(rng);
      dv = random_size(rng);
      if (t % 10 == 0) {  // three row blocks of 93 rows, whatever else is drawn
        std::fill(batch.begin(), batch.end(), 1);
        m = 200;
        s = 700;
      }
      if (t % 10 == 5) {  // causal below: V's last row is skipped by every query
        m = 8;
        s = 40;
      }
    } while (graph::shape_numel(batch) * (m * s + m * d + d * s + s * dv) > 400000);
    auto with = [&](int64_t rows, int64_t cols) {
      Shape x = batch;
      x.push_back(rows);
      x.push_back(cols);
      return x;
    };
    const Shape q_shape = with(m, d), kt_shape = with(d, s), v_shape = with(s, dv);
    const Shape scores_shape = with(m, s), y_shape = with(m, dv);
    const bool with_mask = t % 10 == 5 || rng() % 3 != 0;
    const float alpha = pick(rng, {1.0f, 0.125f, -2.0f});
    Case att;
    att.op.name = "attention";
    att.op.type = OpType::FusedAttention;
    att.op.attrs.alpha = alpha;
    att.op.attrs.nan_probabilities_to_zero = t % 3 == 1;
    att.output = y_shape;
    att.shapes = {q_shape, kt_shape, v_shape};
    att.data = {random_values(q_shape, rng, false, 1.0f), random_values(kt_shape, rng, false, 1.0f),
                random_values(v_shape, rng, false, 4.0f)};
    if (rng() % 8 == 0)  // an infinite V: 0 · inf is NaN, also where the mask zeroes p
      att.data[2][rng() % att.data[2].size()] = kInf;
    if (t % 10 == 5) att.data[2][static_cast<size_t>((s - 1) * dv)] = kInf;
    if (with_mask) {
      Shape mask_shape;  // the scores' trailing dims, each kept or 1
      for (size_t i = rng() % rank; i < rank; ++i)
        mask_shape.push_back(rng() % 3 == 0 ? 1 : scores_shape[i]);
      std::vector<float> mask = random_values(mask_shape, rng, false, 4.0f);
      for (float& x : mask)  // float's lowest where a query may not look
        if (rng() % 4 == 0) x = std::numeric_limits<float>::lowest();
      const uint64_t form = t % 10 == 5 ? 1 : rng() % 3;
      if (form == 1) {  // causal, as GPT-2's: row i sees columns up to i + shift
        mask_shape = {m, s};
        mask.assign(static_cast<size_t>(m * s), 0.0f);
        const int64_t shift = static_cast<int64_t>(rng() % 3);
        // One fill (GPT-2's), which cpu.attention's prepare reads as each
        // row's run of zeros, or a mix of them, which it does not.
        const bool one_fill = rng() % 2 == 0;
        const float fill = pick(rng, {std::numeric_limits<float>::lowest(), -kInf, -1e30f});
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = i + shift + 1; j < s; ++j)
            mask[static_cast<size_t>(i * s + j)] =
                one_fill ? fill : pick(rng, {std::numeric_limits<float>::lowest(), -kInf, -1e30f});
      } else if (form == 2) {  // padding, as BERT's: the last columns of every row
        mask_shape = {1, s};
        mask.assign(static_cast<size_t>(s), 0.0f);
        for (int64_t j = s - static_cast<int64_t>(rng() % static_cast<uint64_t>(s)); j < s; ++j)
          mask[static_cast<size_t>(j)] = std::numeric_limits<float>::lowest();
      }
      if (att.op.attrs.nan_probabilities_to_zero && rng() % 2 == 0) {  // a row all -inf
        const auto cols = static_cast<size_t>(mask_shape.empty() ? 1 : mask_shape.back());
        const size_t row = rng() % (mask.size() / std::max<size_t>(cols, 1));
        std::fill(mask.begin() + static_cast<std::ptrdiff_t>(row * cols),
                  mask.begin() + static_cast<std::ptrdiff_t>((row + 1) * cols), -kInf);
      }
      att.shapes.push_back(mask_shape);
      att.data.push_back(mask);
    }
    if (att.op.attrs.nan_probabilities_to_zero && rng() % 3 == 0)
      att.data[0][rng() % att.data[0].size()] = std::numeric_limits<float>::quiet_NaN();
    // The chain it replaces: MatMul, Softmax (scale and mask fused), MatMul.
    Case qk{.op = {},
            .shapes = {q_shape, kt_shape},
            .data = {att.data[0], att.data[1]},
            .output = scores_shape};
    qk.op.type = OpType::MatMul;
    Case softmax{.op = {}, .shapes = {scores_shape}, .data = {{}}, .output = scores_shape};
    softmax.op.type = OpType::Softmax;
    softmax.op.attrs.axis = static_cast<int64_t>(rank - 1);
    softmax.op.attrs.alpha = alpha;
    if (with_mask) {
      softmax.shapes.push_back(att.shapes[3]);
      softmax.data.push_back(att.data[3]);
    }
    Case pv{
        .op = {}, .shapes = {scores_shape, v_shape}, .data = {{}, att.data[2]}, .output = y_shape};
    pv.op.type = OpType::MatMul;
    auto chain = [&](std::string_view matmul, std::string_view normalise) {
      softmax.data[0] = run_whole(matmul, qk);
      pv.data[0] = run_whole(normalise, softmax);
      if (att.op.attrs.nan_probabilities_to_zero)  // Where(IsNaN(p), 0, p)
        for (float& p : pv.data[0]) p = std::isnan(p) ? 0.0f : p;
      return run_whole(matmul, pv);
    };
    INFO("seed ", seed, ": ", describe(att), " alpha ", alpha);
    CHECK(same_bits_or_nan(run_reference(att), chain("reference", "reference")));
    const TileKernelVariant* variant =
        kernels::find_tile_kernel_variant(OpType::FusedAttention, "cpu.attention");
    REQUIRE(variant != nullptr);
    // Prepared with the mask as the constant it is in a model: a mask of
    // zero runs and one fill is then not read at run time where the scores
    // are finite (a copy of NaN in its place must change nothing).
    const bool finite =
        std::ranges::all_of(att.data[0], [](float x) { return std::isfinite(x); }) &&
        std::ranges::all_of(att.data[2], [](float x) { return std::isfinite(x); });
    const bool prefixes = with_mask && finite && prefix_mask(att.data[3], att.shapes[3], m, s);
    prefix_cases += prefixes;
    for (cpu::GemmIsa isa : supported_isas()) {
      INFO("ISA ", cpu::gemm_isa_name(isa));
      cpu::set_gemm_isa(isa);
      const std::vector<float> unfused = chain("cpu.matmul_batched", "cpu.softmax");
      CHECK(same_bits_or_nan(run_whole("cpu.attention", att), unfused));
      CHECK(same_bits_or_nan(run_tiled(*variant, att, rng), unfused));
      if (!with_mask) continue;
      std::vector<ConstTensorView> prepare_views = views_of(att);
      for (size_t i = 0; i < 3; ++i) prepare_views[i].data = nullptr;  // activations
      const kernels::PreparedOp prepared = variant->prepare(att.op, prepare_views);
      Case run = att;
      if (prefixes)
        std::fill(run.data[3].begin(), run.data[3].end(), std::numeric_limits<float>::quiet_NaN());
      CHECK(same_bits_or_nan(run_tiled(*variant, run, rng, prepared.get()), unfused));
    }
    // Against the reference: each score's FMA sum differs from the
    // reference's by at most d² ulps of 1 (|q|, |k| <= 1), a softmax input
    // by |alpha| times that plus an ulp of it, each exp by a few ulps; the
    // output, a convex combination of V's rows (|v| <= 4), by twice the
    // inputs' error plus s ulps of its sum.
    const double eps = std::ldexp(1.0, -23);
    const double z_error = (std::fabs(alpha) * static_cast<double>(d * d + d) + 4.0) * eps;
    const double tol = 4.0 * (2.0 * z_error + static_cast<double>(s + 16) * eps);
    check_case("cpu.attention", att, seed, [tol](size_t, float) { return tol; });
  }
  // Every sixth case at least is a causal mask (t % 10 == 5 always, half of
  // them with one fill); most have finite operands.
  CHECK(prefix_cases > 0);
}
