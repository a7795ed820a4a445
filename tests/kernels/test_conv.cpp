// Conv reference kernel vs. a naive convolution over an explicitly padded
// input, ConvTranspose's vs. a naive scatter, plus tiling determinism and
// hand-computed cases.
#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

struct ConvCase {
  graph::Operator op = make_op(OpType::Conv);
  std::vector<Tensor> inputs;
  Shape out_shape;
};

// The most obvious convolution: copy X into a zero-padded buffer, then sum
// over (c, kh, kw) for every output element, in double.
std::vector<double> naive_conv(const ConvCase& c) {
  const Shape& xs = c.inputs[0].shape;
  const Shape& ws = c.inputs[1].shape;
  const auto& a = c.op.attrs;
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t M = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  const int64_t PH = H + a.pads[0] + a.pads[2], PW = W + a.pads[1] + a.pads[3];
  std::vector<double> padded(N * C * PH * PW, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          padded[((n * C + ch) * PH + h + a.pads[0]) * PW + w + a.pads[1]] =
              c.inputs[0].data[((n * C + ch) * H + h) * W + w];
  const int64_t OH = c.out_shape[2], OW = c.out_shape[3];
  const int64_t group_out = M / a.group;
  std::vector<double> y(N * M * OH * OW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double sum = c.inputs.size() == 3 ? c.inputs[2].data[m] : 0.0;
          const int64_t g = m / group_out;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ph = oh * a.strides[0] + kh * a.dilations[0];
                const int64_t pw = ow * a.strides[1] + kw * a.dilations[1];
                sum += padded[((n * C + g * Cg + ci) * PH + ph) * PW + pw] *
                       c.inputs[1].data[((m * Cg + ci) * KH + kh) * KW + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = sum;
        }
  return y;
}

ConvCase random_conv(Rng& rng) {
  ConvCase c;
  auto& a = c.op.attrs;
  const int kind = static_cast<int>(rng.uniform(0, 3));  // 0 dense, 1 grouped, 2 depthwise, 3 any
  a.group = kind == 0 ? 1 : kind == 1 ? rng.uniform(2, 3) : 1;
  int64_t C = rng.size(7) * a.group, M = rng.size(7) * a.group;
  if (kind == 2) {  // depthwise: one input channel per group, channel multiplier 1 or 2
    C = rng.size(7);
    a.group = C;
    M = C * rng.uniform(1, 2);
  }
  const int64_t N = rng.uniform(1, 2);
  const int64_t KH = rng.uniform(1, 4), KW = rng.uniform(1, 4);
  a.kernel_shape = {KH, KW};
  a.strides = {rng.uniform(1, 5), rng.uniform(1, 5)};  // up to stride > kernel
  a.dilations = {rng.uniform(1, 3), rng.uniform(1, 3)};
  a.pads = {rng.uniform(0, 3), rng.uniform(0, 2), rng.uniform(0, 3), rng.uniform(0, 1)};
  int64_t H, W, OH, OW;
  do {
    H = rng.size(13);
    W = rng.size(13);
    OH = (H + a.pads[0] + a.pads[2] - a.dilations[0] * (KH - 1) - 1);
    OW = (W + a.pads[1] + a.pads[3] - a.dilations[1] * (KW - 1) - 1);
  } while (OH < 0 || OW < 0);
  OH = OH / a.strides[0] + 1;
  OW = OW / a.strides[1] + 1;
  c.inputs.push_back(random_tensor({N, C, H, W}, rng));
  c.inputs.push_back(random_tensor({M, C / a.group, KH, KW}, rng));
  if (rng.coin(0.6)) c.inputs.push_back(random_tensor({M}, rng));
  c.out_shape = {N, M, OH, OW};
  return c;
}

TEST_CASE("Conv reference: random shapes and attributes vs naive, tiling is bitwise stable") {
  for (int trial = 0; trial < 150; ++trial) {
    const uint64_t seed = base_seed() + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    const ConvCase c = random_conv(rng);
    check_kernel(c.op, c.inputs, c.out_shape, naive_conv(c), rng);
  }
}

// ConvTranspose the other way round from the kernel: every input pixel
// scatters x · W into the full, unpadded output ((H − 1)·s + d·(k − 1) + 1
// rows), in double; the requested output is then the window [pad_begin,
// pad_begin + OH) of it, zero (bias only) where it runs past (output_padding).
std::vector<double> naive_conv_transpose(const ConvCase& c) {
  const Shape& xs = c.inputs[0].shape;
  const Shape& ws = c.inputs[1].shape;
  const auto& a = c.op.attrs;
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t Mg = ws[1], KH = ws[2], KW = ws[3], M = Mg * a.group, Cg = C / a.group;
  const int64_t FH = (H - 1) * a.strides[0] + a.dilations[0] * (KH - 1) + 1;
  const int64_t FW = (W - 1) * a.strides[1] + a.dilations[1] * (KW - 1) + 1;
  std::vector<double> full(N * M * FH * FW, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < C; ++ci)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t mg = 0; mg < Mg; ++mg)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t m = ci / Cg * Mg + mg;
                const int64_t fh = h * a.strides[0] + kh * a.dilations[0];
                const int64_t fw = w * a.strides[1] + kw * a.dilations[1];
                full[((n * M + m) * FH + fh) * FW + fw] +=
                    double(c.inputs[0].data[((n * C + ci) * H + h) * W + w]) *
                    c.inputs[1].data[((ci * Mg + mg) * KH + kh) * KW + kw];
              }
  const int64_t OH = c.out_shape[2], OW = c.out_shape[3];
  std::vector<double> y(N * M * OH * OW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t fh = oh + a.pads[0], fw = ow + a.pads[1];
          const bool inside = fh < FH && fw < FW;
          y[((n * M + m) * OH + oh) * OW + ow] =
              (inside ? full[((n * M + m) * FH + fh) * FW + fw] : 0.0) +
              (c.inputs.size() == 3 ? c.inputs[2].data[m] : 0.0);
        }
  return y;
}

TEST_CASE("ConvTranspose reference: random shapes and attributes vs scattering naive; tiling") {
  for (int trial = 0; trial < 150; ++trial) {
    const uint64_t seed = base_seed() + 500 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    ConvCase c;
    c.op = make_op(OpType::ConvTranspose);
    auto& a = c.op.attrs;
    a.group = rng.uniform(1, 3);
    const int64_t Cg = rng.size(5), Mg = rng.size(5), N = rng.uniform(1, 2);
    const int64_t KH = rng.uniform(1, 4), KW = rng.uniform(1, 4);
    const int64_t H = rng.size(9), W = rng.size(9);
    a.kernel_shape = {KH, KW};
    a.strides = {rng.uniform(1, 4), rng.uniform(1, 4)};
    a.dilations = {rng.uniform(1, 3), rng.uniform(1, 3)};
    // End pads down to -(stride - 1): output_padding, output rows only the bias reaches.
    a.pads = {rng.uniform(0, 2), rng.uniform(0, 2), rng.uniform(1 - a.strides[0], 2),
              rng.uniform(1 - a.strides[1], 2)};
    const int64_t OH =
        (H - 1) * a.strides[0] - a.pads[0] - a.pads[2] + a.dilations[0] * (KH - 1) + 1;
    const int64_t OW =
        (W - 1) * a.strides[1] - a.pads[1] - a.pads[3] + a.dilations[1] * (KW - 1) + 1;
    if (OH < 1 || OW < 1) continue;
    c.inputs.push_back(random_tensor({N, Cg * a.group, H, W}, rng));
    c.inputs.push_back(random_tensor({Cg * a.group, Mg, KH, KW}, rng));
    if (rng.coin(0.6)) c.inputs.push_back(random_tensor({Mg * a.group}, rng));
    c.out_shape = {N, Mg * a.group, OH, OW};
    check_kernel(c.op, c.inputs, c.out_shape, naive_conv_transpose(c), rng);
  }
}

TEST_CASE("ConvTranspose reference: hand-computed 2x2 input, 2x2 kernel, stride 2") {
  // Stride 2 with a 2x2 kernel tiles the output with x[i][j] · W, no overlap:
  // y = [[1 2 2 4], [3 4 6 8], [3 6 4 8], [9 12 12 16]] for x = [[1 2], [3 4]],
  // W = [[1 2], [3 4]]; bias 0.5 everywhere.
  graph::Operator op = make_op(OpType::ConvTranspose);
  op.attrs.kernel_shape = {2, 2};
  op.attrs.strides = {2, 2};
  op.attrs.dilations = {1, 1};
  op.attrs.pads = {0, 0, 0, 0};
  const std::vector<float> y = run_whole(
      find_tile_kernel(OpType::ConvTranspose, "reference"), op,
      {{{1, 1, 2, 2}, {1, 2, 3, 4}}, {{1, 1, 2, 2}, {1, 2, 3, 4}}, {{1}, {0.5f}}}, {1, 1, 4, 4});
  const std::vector<float> expected = {1, 2, 2, 4, 3, 4, 6, 8, 3, 6, 4, 8, 9, 12, 12, 16};
  for (size_t i = 0; i < expected.size(); ++i) CHECK(y[i] == expected[i] + 0.5f);
}

TEST_CASE("Conv reference: hand-computed 3x3 input, 2x2 kernel") {
  // X = [[1,2,3],[4,5,6],[7,8,9]], W = [[1,0],[0,1]] (sums the diagonal
  // pair), bias 1: [[1+5+1, 2+6+1], [4+8+1, 5+9+1]] = [[7,9],[13,15]].
  graph::Operator op = make_op(OpType::Conv);
  op.attrs.kernel_shape = {2, 2};
  op.attrs.strides = {1, 1};
  op.attrs.dilations = {1, 1};
  op.attrs.pads = {0, 0, 0, 0};
  std::vector<Tensor> in{
      {{1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}, {{1, 1, 2, 2}, {1, 0, 0, 1}}, {{1}, {1}}};
  const TileKernel k = find_tile_kernel(OpType::Conv, "reference");
  CHECK(run_whole(k, op, in, {1, 1, 2, 2}) == std::vector<float>{7, 9, 13, 15});

  // Pads 1 on top/left only, stride 2: windows start at -1 and 1.
  // (0,0): rows{-1,0} cols{-1,0} -> only x(0,0)=1 meets w(1,1)=1 -> 1 + bias 1 = 2
  // (0,1): rows{-1,0} cols{1,2}  -> w(1,0)*x(0,1) + w(1,1)*x(0,2) = 0 + 3 -> 4
  // (1,0): rows{1,2} cols{-1,0}  -> w(0,0)*pad + w(1,1)*x(2,0) = 0 + 7 -> 8
  // (1,1): rows{1,2} cols{1,2}   -> x(1,1) + x(2,2) = 5 + 9 -> 15
  op.attrs.pads = {1, 1, 0, 0};
  op.attrs.strides = {2, 2};
  CHECK(run_whole(k, op, in, {1, 1, 2, 2}) == std::vector<float>{2, 4, 8, 15});

  // Dilation 2, no pads: one output, x(0,0)*1 + x(2,2)*1 + bias = 1 + 9 + 1.
  op.attrs.pads = {0, 0, 0, 0};
  op.attrs.strides = {1, 1};
  op.attrs.dilations = {2, 2};
  CHECK(run_whole(k, op, in, {1, 1, 1, 1}) == std::vector<float>{11});
}

TEST_CASE("Conv reference: 1-D convolution runs as 2-D with H = 1") {
  // X = [1,2,3,4], W = [1,-1], pads 1 at both ends: on the padded [0,1,2,3,4,0]
  // the windows give 0-1, 1-2, 2-3, 3-4, 4-0 = -1,-1,-1,-1,4.
  graph::Operator op = make_op(OpType::Conv);
  op.attrs.kernel_shape = {2};
  op.attrs.strides = {1};
  op.attrs.dilations = {1};
  op.attrs.pads = {1, 1};
  std::vector<Tensor> in{{{1, 1, 4}, {1, 2, 3, 4}}, {{1, 1, 2}, {1, -1}}};
  const TileKernel k = find_tile_kernel(OpType::Conv, "reference");
  CHECK(run_whole(k, op, in, {1, 1, 5}) == std::vector<float>{-1, -1, -1, -1, 4});
}

}  // namespace
}  // namespace tessera::kernels::test
