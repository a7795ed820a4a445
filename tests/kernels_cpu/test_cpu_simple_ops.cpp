// The CPU simple-op variants (cpu.binary, cpu.unary, cpu.maxpool,
// cpu.average_pool, cpu.global_average_pool: kernels/cpu/simple_ops.hpp), looked up in the
// registry like the runtime does, against the reference kernel of the same
// op on random shapes (sizes 1, primes, widths not multiples of 16), each
// output assembled from random tiles in random order. Bitwise equality except
// GlobalAveragePool (lane-wise sums: a rounding tolerance, plus bitwise
// equality across tilings). Every output starts as a NaN sentinel and each
// tile must leave everything outside its region bitwise unchanged.
// Seeds: TESSERA_TEST_SEED=<n> replays a run.
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
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/cpu/simple_ops.hpp"
#include "kernels/tile_kernel.hpp"
#include "layouts.hpp"
#include "test_random.hpp"
#include "tile_grid.hpp"

namespace {

using namespace tessera;
using graph::OpType;
using graph::Shape;
using kernels::ConstTensorView;
using kernels::TileKernelVariant;

uint64_t base_seed() {
  return tessera::test::base_seed("test_cpu_simple_ops");
}

using tessera::test::pick;

int64_t random_size(std::mt19937_64& rng) {
  return pick<int64_t>(rng, {1, 1, 2, 3, 5, 7, 13, 17, 31, 37});
}

struct OpCase {
  graph::Operator op;
  std::vector<Shape> inputs;
  Shape output;
  // The variant's physical layouts (empty: all NCHW); the reference it is
  // compared with runs all-NCHW.
  std::vector<graph::Layout> layouts;
  graph::Layout out_layout = graph::Layout::NCHW;
};

graph::Layout input_layout(const OpCase& c, size_t i) {
  return i < c.layouts.size() ? c.layouts[i] : graph::Layout::NCHW;
}

std::string describe(const OpCase& c) {
  std::string s = std::string(graph::op_type_name(c.op.type)) + " inputs";
  for (const Shape& in : c.inputs) s += " " + graph::shape_to_string(in);
  s += " -> " + graph::shape_to_string(c.output);
  s += " layouts";
  for (size_t i = 0; i < c.inputs.size(); ++i)
    s += " " + std::string(graph::layout_name(input_layout(c, i)));
  s += " -> " + std::string(graph::layout_name(c.out_layout));
  const graph::OpAttributes& a = c.op.attrs;
  if (c.op.type == OpType::MaxPool) {
    auto list = [&](const char* name, const std::vector<int64_t>& v) {
      s += std::string(" ") + name;
      for (int64_t x : v) s += " " + std::to_string(x);
    };
    list("k", a.kernel_shape);
    list("strides", a.strides);
    list("pads", a.pads);
    list("dilations", a.dilations);
  }
  if (c.op.type == OpType::Clip)
    s += " [" + std::to_string(a.clip_min) + "," + std::to_string(a.clip_max) + "]";
  return s;
}

using test::inside;
using test::random_tiles;

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// A NaN no kernel produces from these inputs: marks "never written".
float sentinel() {
  const uint32_t b = 0x7fc0dead;
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Inputs with ties, signed zeros and (when `specials`) ±inf and NaN.
std::vector<float> random_data(const Shape& shape, std::mt19937_64& rng, bool specials) {
  std::vector<float> v(static_cast<size_t>(graph::shape_numel(shape)));
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float& x : v) {
    const uint64_t k = rng() % 20;
    if (k == 0)
      x = std::round(dist(rng));  // ties
    else if (k == 1)
      x = -0.0f;
    else if (k == 2 && specials)
      x = pick(rng,
               {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                std::numeric_limits<float>::quiet_NaN()});
    else
      x = dist(rng);
  }
  return v;
}

// Runs the variant tile by tile over random tiles and returns its output;
// checks that no tile writes outside its region and all is written.
std::vector<float> run_tiled(const kernels::TileArgs& base, const TileKernelVariant& variant,
                             const OpCase& c, std::mt19937_64& rng) {
  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> out(static_cast<size_t>(numel), sentinel());
  for (const graph::Region& tile : random_tiles(c.output, rng)) {
    const std::vector<float> before = out;
    kernels::TileArgs args = base;
    args.output = {out.data(), &c.output, c.out_layout};
    args.region = &tile;
    variant.run(args);
    int64_t outside = 0;
    for (int64_t i = 0; i < numel; ++i)
      if (!inside(tile, c.output, test::logical_index(c.output, c.out_layout, i)) &&
          bits(out[i]) != bits(before[i]) && outside++ < 3)
        FAIL_CHECK("tile ", graph::region_to_string(tile), " wrote outside at physical index ", i);
    REQUIRE(outside == 0);
  }
  for (int64_t i = 0; i < numel; ++i)
    REQUIRE_MESSAGE(bits(out[i]) != bits(sentinel()), "y[", i, "] never written");
  return test::from_layout(out, c.output, c.out_layout);
}

// `tolerance` < 0: bitwise equality with the reference; else |diff| <=
// tolerance(i) (and the result must not depend on the tiling).
template <class Tolerance>
void check_case(std::string_view variant_name, const OpCase& c, uint64_t seed, bool specials,
                Tolerance&& tolerance) {
  INFO(variant_name, " seed ", seed, ": ", describe(c));
  const TileKernelVariant* variant = kernels::find_tile_kernel_variant(c.op.type, variant_name);
  const TileKernelVariant* reference = kernels::find_tile_kernel_variant(c.op.type, "reference");
  REQUIRE(variant != nullptr);
  REQUIRE(reference != nullptr);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> data;
  for (const Shape& s : c.inputs) data.push_back(random_data(s, rng, specials));
  std::vector<std::vector<float>> physical;
  std::vector<ConstTensorView> views(c.inputs.size()), shape_views(c.inputs.size()),
      variant_views(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i)
    physical.push_back(test::to_layout(data[i], c.inputs[i], input_layout(c, i)));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    views[i] = {data[i].data(), &c.inputs[i]};
    variant_views[i] = {physical[i].data(), &c.inputs[i], input_layout(c, i)};
    shape_views[i] = {nullptr, &c.inputs[i]};  // activations: no data at compile time
  }
  const std::optional<std::string> why = variant->applies(c.op, shape_views);
  REQUIRE_MESSAGE(!why, "applies() refused: ", why.value_or(""));

  const int64_t numel = graph::shape_numel(c.output);
  std::vector<float> expected(static_cast<size_t>(numel));
  const graph::Region whole = graph::Region::whole(c.output);
  const kernels::TileArgs base{.op = &c.op,
                               .inputs = views.data(),
                               .input_count = views.size(),
                               .output = {expected.data(), &c.output},
                               .region = &whole};
  reference->run(base);
  kernels::TileArgs variant_base = base;
  variant_base.inputs = variant_views.data();
  const std::vector<float> out = run_tiled(variant_base, *variant, c, rng);
  int64_t bad = 0;
  for (int64_t i = 0; i < numel; ++i) {
    const size_t k = static_cast<size_t>(i);
    const double tol = tolerance(k);
    const bool ok = tol < 0 ? bits(out[k]) == bits(expected[k])
                            : (std::isnan(out[k]) && std::isnan(expected[k])) ||
                                  out[k] == expected[k] ||
                                  std::fabs(static_cast<double>(out[k]) - expected[k]) <= tol;
    if (!ok && bad++ < 5)
      FAIL_CHECK("y[", i, "] = ", out[k], ", reference ", expected[k], " (tolerance ", tol, ")");
  }
  REQUIRE(bad == 0);
  if (tolerance(0) >= 0) {
    // A different tiling must give the very same bits.
    const std::vector<float> again = run_tiled(variant_base, *variant, c, rng);
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(bits(again[i]) == bits(out[i]));
  }
}

auto exact = [](size_t) { return -1.0; };

Shape random_shape(std::mt19937_64& rng, size_t rank) {
  Shape s(rank);
  for (int64_t& d : s) d = random_size(rng);
  return s;
}

}  // namespace

TEST_CASE("cpu.binary matches the reference bitwise: same shape, scalar, per-channel") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7919 + 1);
    OpCase c;
    c.op.name = "binary";
    c.op.type = rng() % 2 ? OpType::Add : OpType::Mul;
    const size_t rank = static_cast<size_t>(rng() % 5);
    c.output = random_shape(rng, rank);
    // Each operand: full (maybe without leading dims), scalar, or varying
    // along one non-last dim.
    auto operand = [&]() -> Shape {
      const uint64_t kind = rng() % 3;
      if (kind == 0 || rank < 2) {
        Shape s = c.output;
        while (!s.empty() && s.front() == 1 && rng() % 2) s.erase(s.begin());
        if (kind != 0 && rank < 2) return Shape(rng() % (rank + 1), 1);
        return s;
      }
      if (kind == 1) return Shape(rng() % (rank + 1), 1);
      const size_t dim = static_cast<size_t>(rng() % (rank - 1));
      Shape s(rank - dim, 1);  // right-aligned: leading dims dropped
      s[0] = c.output[dim];
      return s;
    };
    c.inputs = {operand(), operand()};
    check_case("cpu.binary", c, seed, true, exact);
  }
}

TEST_CASE("cpu.binary: the named ResNet/MobileNet shapes") {
  const uint64_t seed = base_seed();
  for (OpType type : {OpType::Add, OpType::Mul}) {
    OpCase c;
    c.op.type = type;
    c.output = {1, 64, 56, 56};
    for (std::vector<Shape> inputs : {std::vector<Shape>{{1, 64, 56, 56}, {1, 64, 56, 56}},
                                      {{1, 64, 56, 56}, {64, 1, 1}},
                                      {{1, 64, 1, 1}, {1, 64, 56, 56}},
                                      {{1, 64, 56, 56}, {}},
                                      {{1}, {1, 64, 56, 56}}}) {
      c.inputs = inputs;
      check_case("cpu.binary", c, seed, false, exact);
    }
  }
}

TEST_CASE("cpu.binary applies(): other broadcasts and ops are refused, with a reason") {
  graph::Operator op;
  op.type = OpType::Add;
  auto reason = [&](Shape a, Shape b) {
    const ConstTensorView views[] = {{nullptr, &a}, {nullptr, &b}};
    return kernels::cpu::binary_applies(op, views);
  };
  CHECK_FALSE(reason({2, 3, 5}, {2, 3, 5}));
  CHECK_FALSE(reason({2, 3, 5}, {3, 1}));
  CHECK_FALSE(reason({}, {2, 3, 5}));
  CHECK_FALSE(reason({1, 1, 1}, {2, 3, 5}));
  for (auto [a, b] : {std::pair<Shape, Shape>{{2, 3, 5}, {5}},  // varies along the last dim
                      {{2, 3, 5}, {3, 5}},                      // two dims
                      {{2, 1, 5}, {1, 3, 1}},                   // both broadcast
                      {{4, 1}, {1, 5}}}) {
    const std::optional<std::string> why = reason(a, b);
    REQUIRE(why);
    CHECK(why->find("broadcast pattern") != std::string::npos);
    CHECK(why->find("cpu.broadcast runs it") != std::string::npos);
  }
  op.type = OpType::Concat;
  CHECK(reason({2}, {2}));
}

// Sigmoid is vector_math.hpp's polynomial exp (the fused epilogues' one):
// within 2^-20 of the reference's std::exp form (absolute: sigmoid <= 1).
auto unary_tolerance(const OpCase& c) {
  return [&c](size_t) { return c.op.type == OpType::Sigmoid ? std::ldexp(1.0, -20) : -1.0; };
}

TEST_CASE("cpu.unary matches the reference: Relu, Clip bitwise, Sigmoid within 2^-20") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 240; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 104729 + 3);
    OpCase c;
    c.op.name = "unary";
    c.op.type = pick(rng, {OpType::Relu, OpType::Clip, OpType::Sigmoid});
    c.op.attrs.clip_min = pick(rng, {-1.0f, 0.0f, -std::numeric_limits<float>::infinity(), 2.0f});
    c.op.attrs.clip_max = pick(rng, {6.0f, 0.5f, std::numeric_limits<float>::infinity(), 1.0f});
    c.output = random_shape(rng, static_cast<size_t>(rng() % 5));
    c.inputs = {c.output};
    check_case("cpu.unary", c, seed, true, unary_tolerance(c));
  }
  OpCase big;
  big.op.type = OpType::Sigmoid;
  big.output = {1, 32, 56, 56};
  big.inputs = {big.output};
  check_case("cpu.unary", big, seed0, false, unary_tolerance(big));
}

namespace {

// Every operand with H·W > 1 in NHWC like the output, the others NCHW (the
// same bytes either way), as kernels::assign_layouts sets them.
void nhwc_everywhere(OpCase& c) {
  c.out_layout = graph::Layout::NHWC;
  c.layouts.clear();
  for (const Shape& in : c.inputs)
    c.layouts.push_back(in.size() == 4 ? graph::Layout::NHWC : graph::Layout::NCHW);
}

// A random 1-D or 2-D pooling case of `type`: any kernel, stride and pad,
// dilations (MaxPool only), ceil_mode, count_include_pad (AveragePool);
// nothing when its output would be empty.
std::optional<OpCase> random_pool_case(OpType type, std::mt19937_64& rng) {
  const bool one_d = rng() % 5 == 0;
  const bool dilated = type == OpType::MaxPool;
  const int64_t kh = one_d ? 1 : pick<int64_t>(rng, {1, 2, 3, 3, 5});
  const int64_t kw = pick<int64_t>(rng, {1, 2, 3, 3, 5});
  const int64_t sh = one_d ? 1 : pick<int64_t>(rng, {1, 2, 2, 3});
  const int64_t sw = pick<int64_t>(rng, {1, 2, 2, 3});
  const int64_t dh = one_d || !dilated ? 1 : pick<int64_t>(rng, {1, 1, 2});
  const int64_t dw = dilated ? pick<int64_t>(rng, {1, 1, 2}) : 1;
  auto pad = [&](int64_t k) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(k)); };
  const int64_t pt = one_d ? 0 : pad(kh), pb = one_d ? 0 : pad(kh), pl = pad(kw), pr = pad(kw);
  const int64_t in_h = one_d ? 1 : 1 + static_cast<int64_t>(rng() % 23);
  const int64_t in_w = 1 + static_cast<int64_t>(rng() % 71);
  const bool ceil_mode = rng() % 2;
  // ONNX's output size; ceil_mode drops a last window starting in the
  // right padding.
  auto out_size = [&](int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
    if (span < 0) return int64_t{0};
    int64_t n = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (n - 1) * s >= in + p0) --n;
    return n;
  };
  const int64_t oh = one_d ? 1 : out_size(in_h, kh, sh, dh, pt, pb);
  const int64_t ow = out_size(in_w, kw, sw, dw, pl, pr);
  if (oh < 1 || ow < 1) return std::nullopt;
  OpCase c;
  c.op.name = type == OpType::MaxPool ? "maxpool" : "averagepool";
  c.op.type = type;
  graph::OpAttributes& a = c.op.attrs;
  a.ceil_mode = ceil_mode;
  a.count_include_pad = type == OpType::AveragePool && rng() % 2;
  const int64_t n = pick<int64_t>(rng, {1, 1, 2}), ch = random_size(rng);
  if (one_d) {
    a.kernel_shape = {kw};
    a.strides = {sw};
    a.dilations = {dw};
    a.pads = {pl, pr};
    c.inputs = {{n, ch, in_w}};
    c.output = {n, ch, ow};
  } else {
    a.kernel_shape = {kh, kw};
    a.strides = {sh, sw};
    a.dilations = {dh, dw};
    a.pads = {pt, pl, pb, pr};
    c.inputs = {{n, ch, in_h, in_w}};
    c.output = {n, ch, oh, ow};
  }
  return c;
}

}  // namespace

TEST_CASE("cpu.maxpool matches the reference bitwise: any kernel, stride, pad, dilation") {
  const uint64_t seed0 = base_seed();
  int ran = 0;
  for (int t = 0; ran < 250 && t < 2000; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 15485863 + 5);
    const std::optional<OpCase> c = random_pool_case(OpType::MaxPool, rng);
    if (!c) continue;
    ++ran;
    check_case("cpu.maxpool", *c, seed, true, exact);
  }
  CHECK(ran == 250);
}

TEST_CASE("cpu.average_pool matches the reference bitwise: any kernel, stride, pad, layout") {
  // NCHW, and NHWC for 2-D cases (channels as the vector: widths around the
  // 64-channel block too). Finite inputs: the sign of the NaN that inf - inf
  // gives depends on the order of an add's operands, which vector code may
  // swap.
  const uint64_t seed0 = base_seed();
  int ran = 0, nhwc = 0;
  for (int t = 0; ran < 300 && t < 3000; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7919 + 17);
    std::optional<OpCase> c = random_pool_case(OpType::AveragePool, rng);
    if (!c) continue;
    ++ran;
    if (c->inputs[0].size() == 4 && rng() % 2) {
      const int64_t ch = pick<int64_t>(rng, {1, 3, 16, 63, 64, 65, 144});
      c->inputs[0][1] = c->output[1] = ch;
      nhwc_everywhere(*c);
      ++nhwc;
    }
    check_case("cpu.average_pool", *c, seed, false, exact);
  }
  CHECK(ran == 300);
  CHECK(nhwc > 50);
  // A squeeze pool's first stage (graph/split_global_pool): rows of a
  // 56x56x144 map, each averaged over its 56 columns.
  OpCase rows;
  rows.op.name = "row_means";
  rows.op.type = OpType::AveragePool;
  rows.op.attrs.kernel_shape = {1, 56};
  rows.op.attrs.strides = {1, 56};
  rows.inputs = {{1, 144, 56, 56}};
  rows.output = {1, 144, 56, 1};
  nhwc_everywhere(rows);
  check_case("cpu.average_pool", rows, seed0, false, exact);
}

TEST_CASE("cpu.maxpool and cpu.average_pool applies(): 1-D and 2-D only") {
  graph::Operator op;
  op.type = OpType::MaxPool;
  op.attrs.kernel_shape = {2, 2, 2};
  const Shape x3d{1, 2, 4, 4, 4};
  const ConstTensorView views[] = {{nullptr, &x3d}};
  CHECK(kernels::cpu::max_pool_applies(op, views));
  op.attrs.kernel_shape = {3, 3};
  const Shape x2d{1, 2, 9, 9};
  const ConstTensorView views2[] = {{nullptr, &x2d}};
  CHECK_FALSE(kernels::cpu::max_pool_applies(op, views2));
  // AveragePool: the same ranks, and no dilations (nor has the reference).
  op.type = OpType::AveragePool;
  op.attrs.dilations = {1, 2};
  CHECK(kernels::cpu::average_pool_applies(op, views2).value_or("").find("dilations") !=
        std::string::npos);
  op.attrs.dilations = {1, 1};
  CHECK_FALSE(kernels::cpu::average_pool_applies(op, views2));
  op.attrs.kernel_shape = {2, 2, 2};
  CHECK(kernels::cpu::average_pool_applies(op, views));
}

TEST_CASE("cpu.global_average_pool: within rounding of the reference, independent of tiling") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 120; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 32452843 + 7);
    OpCase c;
    c.op.name = "gap";
    c.op.type = OpType::GlobalAveragePool;
    const size_t rank = 2 + static_cast<size_t>(rng() % 3);
    Shape x = random_shape(rng, rank);
    if (rng() % 4 == 0 && rank == 4) x[2] = x[3] = 56;  // 3136 elements per plane
    c.inputs = {x};
    c.output = x;
    for (size_t d = 2; d < rank; ++d) c.output[d] = 1;
    // Both sums round at most (terms + log2 16) times; data in [-4, 4].
    int64_t plane = 1;
    for (size_t d = 2; d < rank; ++d) plane *= x[d];
    const double tol =
        2.0 * static_cast<double>(plane + 8) * std::numeric_limits<float>::epsilon() * 4.0;
    check_case("cpu.global_average_pool", c, seed, false, [tol](size_t) { return tol; });
  }
}

// ---- NHWC (LayoutSupport::Uniform for binary, unary, maxpool, average pool;
// Any for GlobalAveragePool) -------------------------------------------------

TEST_CASE("cpu.binary NHWC matches the reference bitwise: full, scalar, per-channel, per-row") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 7907 + 5);
    OpCase c;
    c.op.name = "binary_nhwc";
    c.op.type = rng() % 2 ? OpType::Add : OpType::Mul;
    c.output = random_shape(rng, 4);
    if (rng() % 3 == 0) c.output[1] = pick<int64_t>(rng, {16, 33, 64});  // vector widths
    auto operand = [&]() -> Shape {
      switch (rng() % 6) {
        case 0:
        case 1:
          return c.output;
        case 2:
          return Shape(rng() % 5, 1);  // scalar
        case 3:
          return rng() % 2 ? Shape{c.output[1], 1, 1} : Shape{1, c.output[1], 1, 1};  // channel
        case 4:
          return Shape{c.output[0], 1, 1, 1};  // per image
        default:
          return Shape{1, 1, c.output[2], 1};  // per row: rank 4 with H > 1
      }
    };
    c.inputs = {operand(), operand()};
    nhwc_everywhere(c);
    check_case("cpu.binary", c, seed, true, exact);
  }
}

TEST_CASE("cpu.unary NHWC matches the reference (Sigmoid within 2^-20)") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 100; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 6151 + 9);
    OpCase c;
    c.op.name = "unary_nhwc";
    c.op.type = pick(rng, {OpType::Relu, OpType::Clip, OpType::Sigmoid});
    c.op.attrs.clip_min = -1.0f;
    c.op.attrs.clip_max = 6.0f;
    c.output = random_shape(rng, 4);
    c.inputs = {c.output};
    nhwc_everywhere(c);
    check_case("cpu.unary", c, seed, true, unary_tolerance(c));
  }
}

TEST_CASE("cpu.maxpool NHWC matches the reference bitwise") {
  // Channels past the vector widths; some 9x9 windows (81 taps).
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 200; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 3571 + 11);
    OpCase c;
    c.op.name = "maxpool_nhwc";
    c.op.type = OpType::MaxPool;
    graph::OpAttributes& a = c.op.attrs;
    const bool big = t % 10 == 9;
    a.kernel_shape =
        big ? std::vector<int64_t>{9, 9}
            : std::vector<int64_t>{pick<int64_t>(rng, {1, 2, 3}), pick<int64_t>(rng, {1, 2, 3})};
    a.strides = {pick<int64_t>(rng, {1, 2}), pick<int64_t>(rng, {1, 2, 3})};
    a.dilations = {big ? 1 : pick<int64_t>(rng, {1, 1, 2}), 1};
    a.pads = {static_cast<int64_t>(rng() % static_cast<uint64_t>(a.kernel_shape[0])), 0,
              static_cast<int64_t>(rng() % static_cast<uint64_t>(a.kernel_shape[0])),
              static_cast<int64_t>(rng() % static_cast<uint64_t>(a.kernel_shape[1]))};
    const int64_t least = big ? 10 : 5;
    const Shape x{pick<int64_t>(rng, {1, 2}),
                  pick<int64_t>(rng, {1, 3, 16, 17, 47, 64, 65, 100, 144}),
                  least + static_cast<int64_t>(rng() % 9), least + static_cast<int64_t>(rng() % 9)};
    Shape y = x;
    for (size_t i = 0; i < 2; ++i) {
      const int64_t span =
          x[2 + i] + a.pads[i] + a.pads[i + 2] - a.dilations[i] * (a.kernel_shape[i] - 1) - 1;
      y[2 + i] = span / a.strides[i] + 1;
    }
    c.inputs = {x};
    c.output = y;
    nhwc_everywhere(c);
    check_case("cpu.maxpool", c, seed, true, exact);
  }
}

TEST_CASE("cpu.global_average_pool NHWC input: bitwise the reference's in-order sum") {
  const uint64_t seed0 = base_seed();
  for (int t = 0; t < 60; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 1009 + 13);
    OpCase c;
    c.op.name = "gap_nhwc";
    c.op.type = OpType::GlobalAveragePool;
    Shape x = random_shape(rng, 4);
    if (rng() % 3 == 0) x[2] = x[3] = 7;
    if (rng() % 3 == 0) x[1] = 65;
    c.inputs = {x};
    c.output = {x[0], x[1], 1, 1};
    c.layouts = {graph::Layout::NHWC};  // the output's layout is immaterial
    check_case("cpu.global_average_pool", c, seed, false, exact);
  }
}

TEST_CASE("cpu.concat matches the reference bitwise: any rank, axis, inputs and layouts") {
  // Layouts mixed freely at rank 4 (YOLO's NHWC upsampled map beside an
  // NCHW route; the Focus stem's NCHW slices into an NHWC map), so both the
  // merged memcpy runs and the strided gathers are reached.
  const uint64_t seed0 = base_seed();
  int mixed = 0;
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 4241 + 29);
    OpCase c;
    c.op.name = "concat";
    c.op.type = OpType::Concat;
    const size_t rank = 1 + rng() % 4;
    c.output = random_shape(rng, rank);
    const auto axis = static_cast<size_t>(rng() % rank);
    c.op.attrs.axis = static_cast<int64_t>(axis);
    const size_t count = 1 + rng() % 4;
    c.output[axis] = 0;
    for (size_t i = 0; i < count; ++i) {
      Shape in = c.output;
      in[axis] = pick<int64_t>(rng, {1, 2, 3, 16, 17, 64});
      c.output[axis] += in[axis];
      c.inputs.push_back(in);
    }
    if (rank == 4) {
      auto layout = [&] { return rng() % 2 ? graph::Layout::NHWC : graph::Layout::NCHW; };
      c.out_layout = layout();
      for (size_t i = 0; i < count; ++i) c.layouts.push_back(layout());
      for (graph::Layout l : c.layouts) mixed += l != c.out_layout;
    }
    check_case("cpu.concat", c, seed, true, exact);
  }
  CHECK(mixed > 20);
}

TEST_CASE("cpu.pad matches the reference bitwise: every mode, crops, NCHW and NHWC") {
  const uint64_t seed0 = base_seed();
  int nhwc = 0;
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 6271 + 3);
    OpCase c;
    c.op.name = "pad";
    c.op.type = OpType::Pad;
    graph::OpAttributes& a = c.op.attrs;
    a.pad_mode =
        pick(rng, {graph::PadMode::Constant, graph::PadMode::Reflect, graph::PadMode::Edge});
    a.pad_value = static_cast<float>(static_cast<int64_t>(rng() % 9) - 4) * 0.5f;
    // Every eighth case 4-D NHWC, so the NHWC count below holds for any seed
    // (left to chance, seed 2796455346 drew too few).
    const bool force_nhwc = t % 8 == 0;
    const size_t rank = force_nhwc ? 4 : 1 + rng() % 4;
    const Shape in = random_shape(rng, rank);
    Shape out = in;
    a.pads.assign(2 * rank, 0);
    for (size_t d = 0; d < rank; ++d)
      for (size_t side : {d, d + rank}) {
        // Up to 3 either way (reflection past the far edge included); a crop
        // leaves at least one element.
        const int64_t p = static_cast<int64_t>(rng() % 7) - 3;
        if (out[d] + p < 1) continue;
        a.pads[side] = p;
        out[d] += p;
      }
    c.inputs = {in};
    c.output = out;
    if (rank == 4 && (force_nhwc || rng() % 2)) {
      nhwc_everywhere(c);
      ++nhwc;
    }
    check_case("cpu.pad", c, seed, true, exact);
  }
  CHECK(nhwc > 20);
}

TEST_CASE(
    "cpu.resize (nearest) matches the reference bitwise: every coordinate and rounding mode") {
  const uint64_t seed0 = base_seed();
  int nhwc = 0;
  for (int t = 0; t < 300; ++t) {
    const uint64_t seed = seed0 + static_cast<uint64_t>(t);
    std::mt19937_64 rng(seed * 3331 + 7);
    OpCase c;
    c.op.name = "resize";
    c.op.type = OpType::Resize;
    graph::OpAttributes& a = c.op.attrs;
    a.resize_mode = graph::ResizeMode::Nearest;
    a.coordinate_mode = static_cast<graph::CoordinateMode>(
        rng() % (static_cast<uint64_t>(graph::kLastCoordinateMode) + 1));
    a.nearest_mode = static_cast<graph::NearestMode>(
        rng() % (static_cast<uint64_t>(graph::kLastNearestMode) + 1));
    const size_t rank = 3 + rng() % 2;
    const Shape in = random_shape(rng, rank);
    Shape out = in;
    a.scales.assign(rank, 1.0f);
    for (size_t d = rank - 2; d < rank; ++d) {
      a.scales[d] = pick(rng, {0.5f, 0.75f, 1.0f, 1.5f, 2.0f, 3.0f});
      out[d] = std::max<int64_t>(1, static_cast<int64_t>(static_cast<float>(in[d]) * a.scales[d]));
    }
    a.new_shape = out;
    c.inputs = {in};
    c.output = out;
    if (rank == 4 && rng() % 2) {
      nhwc_everywhere(c);
      ++nhwc;
    }
    check_case("cpu.resize", c, seed, true, exact);
  }
  CHECK(nhwc > 20);
}

TEST_CASE("cpu.resize applies(): nearest only; linear stays on the reference, with a reason") {
  graph::Operator op;
  op.type = OpType::Resize;
  op.attrs.resize_mode = graph::ResizeMode::Linear;
  op.attrs.scales = {1.0f, 1.0f, 2.0f, 2.0f};
  const Shape x{1, 2, 3, 3};
  const ConstTensorView in{nullptr, &x};
  const TileKernelVariant* v = kernels::find_tile_kernel_variant(OpType::Resize, "cpu.resize");
  REQUIRE(v != nullptr);
  const std::optional<std::string> why = v->applies(op, std::span(&in, 1));
  REQUIRE(why.has_value());
  CHECK(why->find("linear") != std::string::npos);
  op.attrs.resize_mode = graph::ResizeMode::Nearest;
  CHECK_FALSE(v->applies(op, std::span(&in, 1)).has_value());
}
