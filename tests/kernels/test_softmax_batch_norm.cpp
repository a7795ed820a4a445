// Softmax and LogSoftmax (both axis semantics) and BatchNormalization reference kernels vs.
// naive double-precision formulas; tiling.
#include <cmath>

#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

TEST_CASE("(Log)Softmax reference: any axis, coerce_2d or not vs naive; tiling") {
  for (int trial = 0; trial < 240; ++trial) {
    const uint64_t seed = base_seed() + 9000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    Shape shape(static_cast<size_t>(rng.uniform(1, 4)));
    for (int64_t& d : shape) d = rng.size(7);
    const bool log = trial % 2 == 1;
    graph::Operator op = make_op(log ? OpType::LogSoftmax : OpType::Softmax);
    const size_t axis = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(shape.size()) - 1));
    op.attrs.axis = static_cast<int64_t>(axis);
    op.attrs.softmax_coerce_2d = rng.coin();
    Tensor x = random_tensor(shape, rng);
    for (float& v : x.data) v *= 30;  // large logits: overflow without the max shift
    // Two elements share a softmax row when they agree on every dim outside
    // the normalised set: {axis}, or [axis, rank) when coerced.
    const auto normalised = [&](size_t d) {
      return d == axis || (op.attrs.softmax_coerce_2d && d > axis);
    };
    const int64_t n = graph::shape_numel(shape);
    std::vector<double> expected(n);
    for (int64_t flat = 0; flat < n; ++flat) {
      const std::vector<int64_t> index = unravel(flat, shape);
      double denominator = 0;
      for (int64_t other = 0; other < n; ++other) {
        const std::vector<int64_t> oi = unravel(other, shape);
        bool same_row = true;
        for (size_t d = 0; d < shape.size(); ++d)
          same_row = same_row && (normalised(d) || oi[d] == index[d]);
        if (same_row) denominator += std::exp(double(x.data[other]) - double(x.data[flat]));
      }
      // LogSoftmax: log(1 / Σ exp(x_j − x_i)), finite where the softmax underflows.
      expected[flat] = log ? -std::log(denominator) : 1.0 / denominator;
    }
    check_kernel(op, {x}, shape, expected, rng);
  }
}

TEST_CASE("Softmax reference: hand-computed [1,2,3]") {
  // exp([-2,-1,0]) / (e^-2 + e^-1 + 1) = [0.0900306, 0.2447285, 0.6652410].
  graph::Operator op = make_op(OpType::Softmax);
  const std::vector<float> y =
      run_whole(find_tile_kernel(OpType::Softmax, "reference"), op, {{{3}, {1, 2, 3}}}, {3});
  CHECK(y[0] == doctest::Approx(0.0900306).epsilon(1e-5));
  CHECK(y[1] == doctest::Approx(0.2447285).epsilon(1e-5));
  CHECK(y[2] == doctest::Approx(0.6652410).epsilon(1e-5));
}

TEST_CASE("BatchNormalization reference: ranks 2-5 vs formula; tiling") {
  for (int trial = 0; trial < 80; ++trial) {
    const uint64_t seed = base_seed() + 10000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    Shape shape(static_cast<size_t>(rng.uniform(2, 5)));
    for (int64_t& d : shape) d = rng.size(7);
    const int64_t C = shape[1];
    graph::Operator op = make_op(OpType::BatchNormalization);
    op.attrs.epsilon = rng.coin() ? 1e-5f : 1e-3f;
    const Tensor x = random_tensor(shape, rng);
    const Tensor scale = random_tensor({C}, rng), bias = random_tensor({C}, rng),
                 mean = random_tensor({C}, rng);
    Tensor var = random_tensor({C}, rng);
    for (float& v : var.data) v = std::abs(v) + 0.01f;
    std::vector<double> expected;
    for (int64_t flat = 0; flat < graph::shape_numel(shape); ++flat) {
      const int64_t c = unravel(flat, shape)[1];
      expected.push_back(double(scale.data[c]) * (double(x.data[flat]) - mean.data[c]) /
                             std::sqrt(double(var.data[c]) + double(op.attrs.epsilon)) +
                         bias.data[c]);
    }
    check_kernel(op, {x, scale, bias, mean, var}, shape, expected, rng);
  }
  // x = 3, scale 2, B 0.5, mean 1, var 3, epsilon 1: 2 * (3 - 1) / 2 + 0.5 = 2.5.
  graph::Operator op = make_op(OpType::BatchNormalization);
  op.attrs.epsilon = 1;
  CHECK(run_whole(find_tile_kernel(OpType::BatchNormalization, "reference"), op,
                  {{{1, 1}, {3}}, {{1}, {2}}, {{1}, {0.5f}}, {{1}, {1}}, {{1}, {3}}},
                  {1, 1}) == std::vector<float>{2.5f});
}

}  // namespace
}  // namespace tessera::kernels::test
