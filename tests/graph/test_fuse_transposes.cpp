// Transpose of a Transpose (graph/fuse_transposes.hpp): chains of random
// permutations become one Transpose that moves every element where the
// chain moved it (checked by moving the elements, not by the composition
// rule), and the near misses stay two ops.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "graph/fuse_transposes.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

// ONNX Transpose by index arithmetic: output index i reads input index j
// with j[perm[d]] = i[d].
std::vector<float> moved(const std::vector<float>& x, const Shape& in,
                         const std::vector<int64_t>& perm) {
  const size_t rank = in.size();
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) out[d] = in[static_cast<size_t>(perm[d])];
  const std::vector<int64_t> in_strides = shape_strides(in);
  std::vector<float> y(x.size());
  std::vector<int64_t> index(rank, 0);
  for (size_t flat = 0; flat < y.size(); ++flat) {
    int64_t from = 0;
    for (size_t d = 0; d < rank; ++d) from += index[d] * in_strides[static_cast<size_t>(perm[d])];
    y[flat] = x[static_cast<size_t>(from)];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out[d]) break;
      index[d] = 0;
    }
  }
  return y;
}

std::vector<int64_t> random_perm(size_t rank, std::mt19937& rng) {
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// "t<i>" (appended, not "t" + ...: GCC 12's -Wrestrict false positive).
std::string chain_name(int i) {
  std::string name = "t";
  name += std::to_string(i);
  return name;
}

OpAttributes perm_attrs(std::vector<int64_t> perm) {
  OpAttributes a;
  a.perm = std::move(perm);
  return a;
}

}  // namespace

TEST_CASE("fuse_transposes: a chain of random Transposes becomes one that moves the same way") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const size_t rank = 1 + rng() % 5;
    const int length = 2 + static_cast<int>(rng() % 3);
    CAPTURE(trial);
    CAPTURE(rank);
    CAPTURE(length);
    GraphBuilder b;
    Shape in(rank);
    for (int64_t& d : in) d = 1 + static_cast<int64_t>(rng() % 4);
    const int32_t x = b.input("x", in);
    std::vector<float> values(static_cast<size_t>(shape_numel(in)));
    std::iota(values.begin(), values.end(), 0.0f);
    std::vector<float> want = values;
    Shape shape = in;
    int32_t t = x;
    for (int i = 0; i < length; ++i) {
      const std::vector<int64_t> perm = random_perm(rank, rng);
      want = moved(want, shape, perm);
      t = b.op(OpType::Transpose, {t}, perm_attrs(perm), chain_name(i));
      shape = b.shape(t);
    }
    b.g.outputs = {t};
    const std::vector<RewrittenPattern> fused = fuse_transposes(b.g);
    CHECK(fused.size() == static_cast<size_t>(length - 1));
    REQUIRE(b.g.ops.size() == 1);
    const Operator& only = b.g.ops[0];
    CHECK(only.name == chain_name(length - 1));
    REQUIRE(only.inputs == std::vector<int32_t>{x});
    CHECK(only.outputs == std::vector<int32_t>{t});
    CHECK(moved(values, in, only.attrs.perm) == want);
  }
}

TEST_CASE("fuse_transposes: BERT's K^T, (0, 2, 1, 3) then (0, 1, 3, 2), is (0, 2, 3, 1)") {
  GraphBuilder b;
  const int32_t k = b.input("k", {8, 128, 12, 64});
  const int32_t heads = b.op(OpType::Transpose, {k}, perm_attrs({0, 2, 1, 3}), "heads");
  const int32_t kt = b.op(OpType::Transpose, {heads}, perm_attrs({0, 1, 3, 2}), "kt");
  b.g.outputs = {kt};
  const std::vector<RewrittenPattern> fused = fuse_transposes(b.g);
  REQUIRE(fused.size() == 1);
  CHECK(fused[0].op == "kt");
  CHECK(fused[0].removed == "Transpose 'heads'");
  REQUIRE(b.g.ops.size() == 1);
  CHECK(b.g.ops[0].attrs.perm == std::vector<int64_t>{0, 2, 3, 1});
  CHECK(b.shape(kt) == Shape{8, 12, 64, 128});
}

TEST_CASE("fuse_transposes: the first Transpose read elsewhere or a graph output stays") {
  for (bool output : {false, true}) {
    CAPTURE(output);
    GraphBuilder b;
    const int32_t x = b.input("x", {2, 3, 4});
    const int32_t first = b.op(OpType::Transpose, {x}, perm_attrs({1, 0, 2}), "first");
    const int32_t second = b.op(OpType::Transpose, {first}, perm_attrs({0, 2, 1}), "second");
    b.g.outputs = {second};
    if (output)
      b.g.outputs.push_back(first);
    else
      b.g.outputs.push_back(b.op(OpType::Relu, {first}, {}, "relu"));
    CHECK(fuse_transposes(b.g).empty());
    CHECK(op_named(b.g, "second").inputs == std::vector<int32_t>{first});
    CHECK(op_named(b.g, "second").attrs.perm == std::vector<int64_t>{0, 2, 1});
  }
}
