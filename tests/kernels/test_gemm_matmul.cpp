// Gemm and MatMul reference kernels vs. textbook triple loops, plus tiling
// determinism and hand-computed cases.
#include <numbers>

#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

TEST_CASE("Gemm reference: transposes, alpha/beta, every broadcast form of C; tiling") {
  for (int trial = 0; trial < 150; ++trial) {
    const uint64_t seed = base_seed() + 3000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    graph::Operator op = make_op(OpType::Gemm);
    auto& a = op.attrs;
    const int64_t M = rng.size(13), K = rng.size(13), N = rng.size(13);
    a.trans_a = rng.coin();
    a.trans_b = rng.coin();
    a.alpha = rng.coin() ? 1.0f : rng.value() * 2;
    a.beta = rng.coin() ? 1.0f : rng.value() * 2;
    std::vector<Tensor> in{random_tensor(a.trans_a ? Shape{K, M} : Shape{M, K}, rng),
                           random_tensor(a.trans_b ? Shape{N, K} : Shape{K, N}, rng)};
    const int c_form = static_cast<int>(rng.uniform(0, 6));
    const Shape c_shapes[] = {{}, {N}, {1, N}, {M, 1}, {M, N}, {1}, {1, 1}};
    const bool has_c = rng.coin(0.8);
    if (has_c) in.push_back(random_tensor(c_shapes[c_form], rng));
    // A fused residual (graph/fuse_residual.hpp): input 3, after C.
    const bool has_residual = has_c && trial % 3 == 0;
    if (has_residual) in.push_back(random_tensor({M, N}, rng));
    a.fused_residual = has_residual;

    // op(A) and op(B) materialised, then the textbook triple loop.
    std::vector<double> A(M * K), B(K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k)
        A[i * K + k] = a.trans_a ? in[0].data[k * M + i] : in[0].data[i * K + k];
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j)
        B[k * N + j] = a.trans_b ? in[1].data[j * K + k] : in[1].data[k * N + j];
    std::vector<double> expected(M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += A[i * K + k] * B[k * N + j];
        double c = 0;
        if (has_c) {
          const Shape& cs = in[2].shape;
          // Right-aligned broadcast: a size-1 (or missing) dim reads index 0.
          const int64_t ci = cs.size() == 2 && cs[0] != 1 ? i : 0;
          const int64_t cj = !cs.empty() && cs.back() != 1 ? j : 0;
          const int64_t cols = cs.empty() ? 1 : cs.back();
          c = in[2].data[ci * cols + cj];
        }
        expected[i * N + j] =
            a.alpha * sum + a.beta * c + (has_residual ? in[3].data[i * N + j] : 0.0);
      }
    check_kernel(op, in, {M, N}, expected, rng);
  }
}

TEST_CASE("Gemm reference: hand-computed 2x2") {
  // A = [[1,2],[3,4]], B = [[5,6],[7,8]]: AB = [[19,22],[43,50]].
  // alpha 2, beta 0.5, C = [1,2] per column: [[38.5,45],[86.5,101]].
  graph::Operator op = make_op(OpType::Gemm);
  op.attrs.alpha = 2;
  op.attrs.beta = 0.5f;
  std::vector<Tensor> in{{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {5, 6, 7, 8}}, {{2}, {1, 2}}};
  const TileKernel k = find_tile_kernel(OpType::Gemm, "reference");
  CHECK(run_whole(k, op, in, {2, 2}) == std::vector<float>{38.5f, 45, 86.5f, 101});
  // trans_b with B^T given: same product; C [2,1] per row: [[38.5,44.5],[87,101]].
  op.attrs.trans_b = true;
  in[1].data = {5, 7, 6, 8};
  in[2].shape = {2, 1};
  CHECK(run_whole(k, op, in, {2, 2}) == std::vector<float>{38.5f, 44.5f, 87, 101});
}

// numpy matmul, the obvious way: promote 1-D operands, broadcast batch dims
// index by index.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, Shape& out_shape) {
  Shape as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  Shape batch(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t x = d + ab.size() >= rank ? ab[d + ab.size() - rank] : 1;
    const int64_t y = d + bb.size() >= rank ? bb[d + bb.size() - rank] : 1;
    batch[d] = std::max(x, y);
  }
  std::vector<double> y;
  for (int64_t flat = 0; flat < graph::shape_numel(batch); ++flat) {
    const std::vector<int64_t> index = unravel(flat, batch);
    std::vector<int64_t> ia(ab.size()), ib(bb.size());
    for (size_t d = 0; d < ab.size(); ++d) ia[d] = ab[d] == 1 ? 0 : index[d + rank - ab.size()];
    for (size_t d = 0; d < bb.size(); ++d) ib[d] = bb[d] == 1 ? 0 : index[d + rank - bb.size()];
    const int64_t a_base = ravel(ia, ab) * M * K, b_base = ravel(ib, bb) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += a.data[a_base + i * K + k] * b.data[b_base + k * N + j];
        y.push_back(sum);
      }
  }
  out_shape = batch;
  if (a.shape.size() > 1) out_shape.push_back(M);
  if (b.shape.size() > 1) out_shape.push_back(N);
  return y;
}

TEST_CASE("MatMul reference: batch broadcasting and 1-D operands vs naive; tiling") {
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t seed = base_seed() + 4000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const int64_t M = rng.size(11), K = rng.size(11), N = rng.size(11);
    const int64_t a_rank = rng.uniform(1, 4), b_rank = rng.uniform(1, 4);
    // A shared batch shape; each operand takes a suffix and may set dims to 1.
    const Shape batch{rng.size(3), rng.size(3)};
    const auto operand_batch = [&](int64_t rank) {
      Shape s;
      for (int64_t d = std::max<int64_t>(0, 2 - (rank - 2)); d < 2 && rank > 2; ++d)
        s.push_back(rng.coin(0.3) ? 1 : batch[d]);
      return s;
    };
    Shape as = operand_batch(a_rank), bs = operand_batch(b_rank);
    if (a_rank == 1)
      as = {K};
    else
      as.insert(as.end(), {M, K});
    if (b_rank == 1)
      bs = {K};
    else
      bs.insert(bs.end(), {K, N});
    const Tensor a = random_tensor(as, rng), b = random_tensor(bs, rng);
    Shape out_shape;
    const std::vector<double> expected = naive_matmul(a, b, out_shape);
    check_kernel(make_op(OpType::MatMul), {a, b}, out_shape, expected, rng);
  }
}

TEST_CASE("MatMul reference: fused bias [N], residual and every activation vs naive; tiling") {
  const graph::Activation activations[] = {graph::Activation::None, graph::Activation::Relu,
                                           graph::Activation::Clip, graph::Activation::Sigmoid,
                                           graph::Activation::Gelu, graph::Activation::GeluTanh,
                                           graph::Activation::Silu, graph::Activation::LeakyRelu};
  for (int trial = 0; trial < 80; ++trial) {
    const uint64_t seed = base_seed() + 4500 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const int64_t M = rng.size(11), K = rng.size(11), N = rng.size(11);
    Shape as = random_shape(rng, 0, 2, 3);
    as.push_back(M);
    as.push_back(K);
    const Tensor a = random_tensor(as, rng), b = random_tensor({K, N}, rng);
    const bool with_bias = trial % 7 != 3;
    const Tensor bias = random_tensor({N}, rng);
    // A fused residual (input 3, the output's shape) needs the bias before it.
    const bool with_residual = with_bias && trial % 2 == 0;
    graph::Operator op = make_op(OpType::MatMul);
    op.attrs.fused_residual = with_residual;
    op.attrs.activation = activations[trial % 8];
    op.attrs.clip_min = -0.2f;
    op.attrs.clip_max = 0.3f;
    op.attrs.leaky_relu_alpha = 0.25f;
    Shape out_shape;
    std::vector<double> expected = naive_matmul(a, b, out_shape);
    const Tensor residual = random_tensor(out_shape, rng);
    for (size_t e = 0; e < expected.size(); ++e) {
      double x = expected[e] + (with_bias ? bias.data[e % static_cast<size_t>(N)] : 0.0);
      if (with_residual) x += residual.data[e];
      switch (op.attrs.activation) {
        case graph::Activation::None:
          break;
        case graph::Activation::Relu:
          x = std::max(x, 0.0);
          break;
        case graph::Activation::Clip:
          x = std::clamp(x, -0.2, 0.3);
          break;
        case graph::Activation::Sigmoid:
          x = 1.0 / (1.0 + std::exp(-x));
          break;
        case graph::Activation::Gelu:
          x = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
          break;
        case graph::Activation::GeluTanh:
          x = 0.5 * x *
              (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
          break;
        case graph::Activation::Silu:
          x = x / (1.0 + std::exp(-x));
          break;
        case graph::Activation::LeakyRelu:
          x = x >= 0.0 ? x : 0.25 * x;
          break;
      }
      expected[e] = x;
    }
    std::vector<Tensor> inputs{a, b};
    if (with_bias) inputs.push_back(bias);
    if (with_residual) inputs.push_back(residual);
    check_kernel(op, inputs, out_shape, expected, rng);
  }
}

TEST_CASE("MatMul reference: a fused bias of the wrong shape is an error, not a crash") {
  const TileKernel k = find_tile_kernel(OpType::MatMul, "reference");
  const graph::Operator op = make_op(OpType::MatMul);
  // [[1,2],[3,4]] x I + [10, 20] = [[11, 22], [13, 24]].
  CHECK(run_whole(k, op, {{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 0, 1}}, {{2}, {10, 20}}},
                  {2, 2}) == std::vector<float>{11, 22, 13, 24});
  CHECK_THROWS_WITH_AS(
      run_whole(k, op, {{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 0, 1}}, {{3}, {1, 2, 3}}}, {2, 2}),
      doctest::Contains("fused bias"), tessera::Error);
  graph::Operator fused = make_op(OpType::MatMul);
  fused.attrs.fused_residual = true;
  // A residual of the wrong shape, and a residual op without the residual.
  CHECK_THROWS_WITH_AS(
      run_whole(k, fused,
                {{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 0, 1}}, {{2}, {10, 20}}, {{1, 2}, {1, 2}}},
                {2, 2}),
      doctest::Contains("fused residual"), tessera::Error);
  CHECK_THROWS_AS(
      run_whole(k, fused, {{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 0, 1}}, {{2}, {10, 20}}},
                {2, 2}),
      tessera::Error);
  // [[11, 22], [13, 24]] + [[1, 2], [3, 4]].
  CHECK(
      run_whole(
          k, fused,
          {{{2, 2}, {1, 2, 3, 4}}, {{2, 2}, {1, 0, 0, 1}}, {{2}, {10, 20}}, {{2, 2}, {1, 2, 3, 4}}},
          {2, 2}) == std::vector<float>{12, 24, 16, 28});
}

TEST_CASE("MatMul reference: hand-computed cases") {
  const TileKernel k = find_tile_kernel(OpType::MatMul, "reference");
  const graph::Operator op = make_op(OpType::MatMul);
  // [1,2,3] . [4,5,6] = 4 + 10 + 18 = 32, a rank-0 output.
  CHECK(run_whole(k, op, {{{3}, {1, 2, 3}}, {{3}, {4, 5, 6}}}, {}) == std::vector<float>{32});
  // [[1,2],[3,4]] x [1,1] = [3, 7]; [1,1] x [[1,2],[3,4]] = [4, 6].
  CHECK(run_whole(k, op, {{{2, 2}, {1, 2, 3, 4}}, {{2}, {1, 1}}}, {2}) == std::vector<float>{3, 7});
  CHECK(run_whole(k, op, {{{2}, {1, 1}}, {{2, 2}, {1, 2, 3, 4}}}, {2}) == std::vector<float>{4, 6});
  // Batch [2,1,2] x [2,1]: [[1,2]] x [1,2]^T = 5 and [[3,4]] x same = 11.
  CHECK(run_whole(k, op, {{{2, 1, 2}, {1, 2, 3, 4}}, {{2, 1}, {1, 2}}}, {2, 1, 1}) ==
        std::vector<float>{5, 11});
}

}  // namespace
}  // namespace tessera::kernels::test
