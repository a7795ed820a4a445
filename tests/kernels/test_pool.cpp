// MaxPool, AveragePool and GlobalAveragePool reference kernels vs. naive
// window loops, plus tiling determinism and hand-computed cases.
#include <limits>

#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

struct PoolCase {
  graph::Operator op;
  Tensor x;
  Shape out_shape;
};

// Output size per ONNX (and ORT): floor or ceil of the window count; with
// ceil_mode the last window must still start inside input + begin pad.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                    bool ceil) {
  const int64_t span = in + pb + pe - d * (k - 1) - 1;
  int64_t out = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (out - 1) * s >= in + pb) --out;
  return out;
}

PoolCase random_pool(OpType type, Rng& rng) {
  PoolCase c{make_op(type), {}, {}};
  auto& a = c.op.attrs;
  const int64_t KH = rng.uniform(1, 4), KW = rng.uniform(1, 4);
  a.kernel_shape = {KH, KW};
  a.strides = {rng.uniform(1, 5), rng.uniform(1, 5)};
  a.dilations = type == OpType::MaxPool ? std::vector<int64_t>{rng.uniform(1, 3), rng.uniform(1, 3)}
                                        : std::vector<int64_t>{1, 1};
  // ONNX requires pads smaller than the kernel.
  a.pads = {rng.uniform(0, KH - 1), rng.uniform(0, KW - 1), rng.uniform(0, KH - 1),
            rng.uniform(0, KW - 1)};
  a.ceil_mode = rng.coin();
  a.count_include_pad = rng.coin();
  int64_t H, W;
  do {
    H = rng.size(13);
    W = rng.size(13);
  } while (H + a.pads[0] + a.pads[2] < a.dilations[0] * (KH - 1) + 1 ||
           W + a.pads[1] + a.pads[3] < a.dilations[1] * (KW - 1) + 1);
  const int64_t N = rng.uniform(1, 2), C = rng.size(5);
  c.x = random_tensor({N, C, H, W}, rng);
  c.out_shape = {
      N, C, pooled_size(H, KH, a.strides[0], a.dilations[0], a.pads[0], a.pads[2], a.ceil_mode),
      pooled_size(W, KW, a.strides[1], a.dilations[1], a.pads[1], a.pads[3], a.ceil_mode)};
  return c;
}

// Max over the window in padded coordinates; padding (and anything past the
// padded input, reachable with ceil_mode) holds -inf. A window of padding
// only gives lowest(), as ONNX Runtime's MaxPool does.
std::vector<double> naive_max_pool(const PoolCase& c) {
  const auto& a = c.op.attrs;
  const int64_t N = c.x.shape[0], C = c.x.shape[1], H = c.x.shape[2], W = c.x.shape[3];
  const int64_t OH = c.out_shape[2], OW = c.out_shape[3];
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -std::numeric_limits<double>::infinity();
          for (int64_t kh = 0; kh < a.kernel_shape[0]; ++kh)
            for (int64_t kw = 0; kw < a.kernel_shape[1]; ++kw) {
              const int64_t h = oh * a.strides[0] + kh * a.dilations[0] - a.pads[0];
              const int64_t w = ow * a.strides[1] + kw * a.dilations[1] - a.pads[1];
              const bool real = h >= 0 && h < H && w >= 0 && w < W;
              const double v = real ? c.x.data[((n * C + ch) * H + h) * W + w]
                                    : -std::numeric_limits<double>::infinity();
              best = std::max(best, v);
            }
          if (std::isinf(best)) best = std::numeric_limits<float>::lowest();
          y.push_back(best);
        }
  return y;
}

// ONNX Runtime's AveragePool: the window [start, start + k) is cut at the end
// of the padded input; count_include_pad divides by that cut window's size,
// otherwise by the number of real input elements in it.
std::vector<double> naive_average_pool(const PoolCase& c) {
  const auto& a = c.op.attrs;
  const int64_t N = c.x.shape[0], C = c.x.shape[1], H = c.x.shape[2], W = c.x.shape[3];
  const int64_t OH = c.out_shape[2], OW = c.out_shape[3];
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double sum = 0;
          int64_t window = 0, real = 0;
          for (int64_t kh = 0; kh < a.kernel_shape[0]; ++kh)
            for (int64_t kw = 0; kw < a.kernel_shape[1]; ++kw) {
              const int64_t h = oh * a.strides[0] + kh - a.pads[0];
              const int64_t w = ow * a.strides[1] + kw - a.pads[1];
              if (h >= H + a.pads[2] || w >= W + a.pads[3]) continue;  // past the padded input
              ++window;
              if (h >= 0 && h < H && w >= 0 && w < W) {
                ++real;
                sum += c.x.data[((n * C + ch) * H + h) * W + w];
              }
            }
          y.push_back(sum / static_cast<double>(a.count_include_pad ? window : real));
        }
  return y;
}

// Drops H from a 2-D case with H = 1 and a kernel of height 1: a 1-D pool
// with the same flat data, so the 2-D expectation still applies.
void make_1d(PoolCase& c) {
  auto& a = c.op.attrs;
  const auto drop = [](Shape& s) { s.erase(s.begin() + 2); };
  drop(c.x.shape);
  drop(c.out_shape);
  a.kernel_shape = {a.kernel_shape[1]};
  a.strides = {a.strides[1]};
  a.dilations = {a.dilations[1]};
  a.pads = {a.pads[1], a.pads[3]};
}

void run_pool_trials(OpType type) {
  for (int trial = 0; trial < 150; ++trial) {
    const uint64_t seed = base_seed() + 1000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    PoolCase c = random_pool(type, rng);
    const bool one_d = rng.coin(0.2);
    if (one_d) {  // H = 1 and a window of height 1
      auto& a = c.op.attrs;
      a.kernel_shape[0] = 1;
      a.strides[0] = 1;
      a.dilations[0] = 1;
      a.pads[0] = a.pads[2] = 0;
      c.x = random_tensor({c.x.shape[0], c.x.shape[1], 1, c.x.shape[3]}, rng);
      c.out_shape[2] = 1;
    }
    const std::vector<double> expected =
        type == OpType::MaxPool ? naive_max_pool(c) : naive_average_pool(c);
    if (one_d) make_1d(c);
    check_kernel(c.op, {c.x}, c.out_shape, expected, rng);
  }
}

TEST_CASE("MaxPool reference: random shapes, dilations, pads, ceil_mode vs naive; tiling") {
  run_pool_trials(OpType::MaxPool);
}

TEST_CASE("AveragePool reference: random shapes, pads, count_include_pad, ceil_mode; tiling") {
  run_pool_trials(OpType::AveragePool);
}

TEST_CASE("Pooling reference: hand-computed 3x3 input") {
  // X = [[1,2,3],[4,5,6],[7,8,9]].
  const std::vector<Tensor> x{{{1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}};
  graph::Operator op = make_op(OpType::MaxPool);
  op.attrs.kernel_shape = {2, 2};
  op.attrs.strides = {1, 1};
  op.attrs.pads = {0, 0, 0, 0};
  const TileKernel max_pool = find_tile_kernel(OpType::MaxPool, "reference");
  // 2x2 windows, stride 1: maxima are the bottom-right corners 5,6,8,9.
  CHECK(run_whole(max_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{5, 6, 8, 9});
  // Pads 1 all round, stride 2: windows rows{-1,0}|{1,2} x cols{-1,0}|{1,2}
  // -> max of {1}, {2,3}, {4,7}, {5,6,8,9} = 1, 3, 7, 9.
  op.attrs.pads = {1, 1, 1, 1};
  op.attrs.strides = {2, 2};
  CHECK(run_whole(max_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{1, 3, 7, 9});
  // Negative inputs: the zero padding must not win. X = -X above -> -1, -2, -4, -5.
  const std::vector<Tensor> neg{{{1, 1, 3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9}}};
  CHECK(run_whole(max_pool, op, neg, {1, 1, 2, 2}) == std::vector<float>{-1, -2, -4, -5});

  op.type = OpType::AveragePool;
  const TileKernel avg_pool = find_tile_kernel(OpType::AveragePool, "reference");
  // Same windows; count_include_pad: every window is 2x2 (ends at 3 + 1 = 4)
  // -> 1/4, (2+3)/4, (4+7)/4, (5+6+8+9)/4.
  op.attrs.count_include_pad = true;
  CHECK(run_whole(avg_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{0.25f, 1.25f, 2.75f, 7});
  // Excluding padding: 1/1, 5/2, 11/2, 28/4.
  op.attrs.count_include_pad = false;
  CHECK(run_whole(avg_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{1, 2.5f, 5.5f, 7});
  // ceil_mode, kernel 3, stride 2, pads end 1 only: out = ceil((3+1-3)/2)+1 = 2.
  // Windows rows [0,3) and [2,5) cut to [2,4) (padded end 4): real row 2 only.
  // (0,0): 45/9 = 5. (0,1): cols [2,4) -> 3+6+9 = 18 over 3x2 = 6 incl. pad, 3 real.
  // (1,0): row 2 cols [0,3): 24 over 2x3 / 3. (1,1): 9 over 2x2 / 1.
  op.attrs.kernel_shape = {3, 3};
  op.attrs.pads = {0, 0, 1, 1};
  op.attrs.ceil_mode = true;
  op.attrs.count_include_pad = true;
  CHECK(run_whole(avg_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{5, 3, 4, 2.25f});
  op.attrs.count_include_pad = false;
  CHECK(run_whole(avg_pool, op, x, {1, 1, 2, 2}) == std::vector<float>{5, 6, 8, 9});
}

TEST_CASE("GlobalAveragePool reference: ranks 3-5 vs naive mean; tiling") {
  for (int trial = 0; trial < 60; ++trial) {
    const uint64_t seed = base_seed() + 2000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const int64_t spatial = rng.uniform(1, 3);
    Shape xs{rng.size(3), rng.size(11)};
    for (int64_t d = 0; d < spatial; ++d) xs.push_back(rng.size(7));
    const Tensor x = random_tensor(xs, rng);
    Shape ys(xs.size(), 1);
    ys[0] = xs[0];
    ys[1] = xs[1];
    const int64_t plane = graph::shape_numel(xs) / (xs[0] * xs[1]);
    std::vector<double> expected;
    for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc) {
      double sum = 0;
      for (int64_t i = 0; i < plane; ++i) sum += x.data[nc * plane + i];
      expected.push_back(sum / plane);
    }
    check_kernel(make_op(OpType::GlobalAveragePool), {x}, ys, expected, rng);
  }
  // [[1,2],[3,4]] and [[5,6],[7,8]] as two channels: means 2.5 and 6.5.
  const TileKernel k = find_tile_kernel(OpType::GlobalAveragePool, "reference");
  CHECK(run_whole(k, make_op(OpType::GlobalAveragePool), {{{1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}}},
                  {1, 2, 1, 1}) == std::vector<float>{2.5f, 6.5f});
}

}  // namespace
}  // namespace tessera::kernels::test
