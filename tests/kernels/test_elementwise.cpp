// Relu, Sigmoid, Clip, Add and Mul reference kernels vs. per-element naive
// formulas (numpy broadcasting via explicit index arithmetic); tiling.
#include <limits>

#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

Shape random_shape(Rng& rng, int64_t max_rank = 4) {
  Shape s(static_cast<size_t>(rng.uniform(0, max_rank)));
  for (int64_t& d : s) d = rng.size(7);
  return s;
}

TEST_CASE("Relu, Sigmoid, Clip reference: random shapes vs formula; tiling") {
  for (int trial = 0; trial < 90; ++trial) {
    const uint64_t seed = base_seed() + 5000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const OpType type = trial % 3 == 0   ? OpType::Relu
                        : trial % 3 == 1 ? OpType::Sigmoid
                                         : OpType::Clip;
    graph::Operator op = make_op(type);
    const Shape shape = random_shape(rng, 5);
    Tensor x = random_tensor(shape, rng);
    for (float& v : x.data) v *= 8;  // reach sigmoid's tails
    if (type == OpType::Clip) {
      const float inf = std::numeric_limits<float>::infinity();
      const float lo = rng.value() * 4;
      op.attrs.clip_min = rng.coin(0.8) ? lo : -inf;
      op.attrs.clip_max = rng.coin(0.8) ? lo + std::abs(rng.value()) * 4 : inf;
    }
    std::vector<double> expected;
    for (float v : x.data) {
      if (type == OpType::Relu) expected.push_back(v < 0 ? 0.0 : v);
      if (type == OpType::Sigmoid) expected.push_back(1.0 / (1.0 + std::exp(-double(v))));
      if (type == OpType::Clip) {
        double c = v;
        if (c < op.attrs.clip_min) c = op.attrs.clip_min;
        if (c > op.attrs.clip_max) c = op.attrs.clip_max;
        expected.push_back(c);
      }
    }
    check_kernel(op, {x}, shape, expected, rng);
  }
}

TEST_CASE("Add, Mul reference: multidirectional broadcasting of every kind; tiling") {
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t seed = base_seed() + 6000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const OpType type = trial % 2 ? OpType::Add : OpType::Mul;
    // The output shape; each operand is a suffix of it (lower rank,
    // right-aligned) with some dims set to 1, both sides independently.
    const Shape out = random_shape(rng);
    const auto operand = [&]() {
      const size_t rank = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(out.size())));
      Shape s(out.end() - rank, out.end());
      for (int64_t& d : s)
        if (rng.coin(0.35)) d = 1;
      return s;
    };
    Shape as = operand(), bs = operand();
    // Make sure the operands do produce `out`: where neither has the size,
    // the first one gets it (full rank when needed).
    as.insert(as.begin(), out.size() - as.size(), 1);
    for (size_t d = 0; d < out.size(); ++d) {
      const size_t bd = d + bs.size();
      const bool b_has = bd >= out.size() && bs[bd - out.size()] == out[d];
      if (as[d] != out[d] && !b_has) as[d] = out[d];
    }
    // Drop leading ones again sometimes so ranks still differ.
    while (!as.empty() && as.front() == 1 && rng.coin(0.5)) as.erase(as.begin());
    const Tensor a = random_tensor(as, rng), b = random_tensor(bs, rng);
    std::vector<double> expected;
    for (int64_t flat = 0; flat < graph::shape_numel(out); ++flat) {
      const std::vector<int64_t> index = unravel(flat, out);
      const auto read = [&](const Tensor& t) {
        std::vector<int64_t> ti(t.shape.size());
        for (size_t d = 0; d < ti.size(); ++d)
          ti[d] = t.shape[d] == 1 ? 0 : index[d + out.size() - ti.size()];
        return double(t.data[ravel(ti, t.shape)]);
      };
      expected.push_back(type == OpType::Add ? read(a) + read(b) : read(a) * read(b));
    }
    check_kernel(make_op(type), {a, b}, out, expected, rng);
  }
}

TEST_CASE("Elementwise reference: hand-computed cases") {
  // [[1],[2]] + [10,20,30] -> [[11,21,31],[12,22,32]] (both operands broadcast).
  const TileKernel add = find_tile_kernel(OpType::Add, "reference");
  CHECK(run_whole(add, make_op(OpType::Add), {{{2, 1}, {1, 2}}, {{3}, {10, 20, 30}}}, {2, 3}) ==
        std::vector<float>{11, 21, 31, 12, 22, 32});
  // Scalar times matrix.
  const TileKernel mul = find_tile_kernel(OpType::Mul, "reference");
  CHECK(run_whole(mul, make_op(OpType::Mul), {{{}, {3}}, {{2, 2}, {1, 2, 3, 4}}}, {2, 2}) ==
        std::vector<float>{3, 6, 9, 12});
  const TileKernel relu = find_tile_kernel(OpType::Relu, "reference");
  CHECK(run_whole(relu, make_op(OpType::Relu), {{{4}, {-2, -0.5f, 0, 3}}}, {4}) ==
        std::vector<float>{0, 0, 0, 3});
  graph::Operator clip = make_op(OpType::Clip);
  clip.attrs.clip_min = 0;
  clip.attrs.clip_max = 6;  // Relu6
  CHECK(run_whole(find_tile_kernel(OpType::Clip, "reference"), clip, {{{4}, {-1, 2, 6, 7}}}, {4}) ==
        std::vector<float>{0, 2, 6, 6});
  // sigmoid(0) = 1/2.
  CHECK(run_whole(find_tile_kernel(OpType::Sigmoid, "reference"), make_op(OpType::Sigmoid),
                  {{{1}, {0}}}, {1}) == std::vector<float>{0.5f});
}

}  // namespace
}  // namespace tessera::kernels::test
