// Single-thread convolution tiles: the CPU variants (cpu.conv_gemm,
// cpu.conv_depthwise) beside the reference kernel on the same tile, in one
// run, with the speed-up; depthwise in NCHW and NHWC. Weights are prepared (packed) outside the
// timed loop, as at model load. Each figure is the best of the repetitions, in this thread's CPU
// time (the machine is shared).
//
//   bench_conv [repetitions]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/tile_kernel.hpp"

namespace {

using namespace tessera;

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

struct ConvBench {
  const char* label;
  int64_t channels, out_channels, size, kernel, group;
  int64_t row_begin, row_end;  // output rows of the tile (all channels, full width)
  int64_t stride = 1;
  graph::Layout layout = graph::Layout::NCHW;  // of X and Y
};

// Best time of `repetitions` runs of the tile, each run repeated until it
// takes at least ~20 ms.
double best_seconds(const kernels::TileKernelVariant& v, const kernels::TileArgs& args,
                    int repetitions) {
  int64_t inner = 1;
  for (;;) {
    const double t0 = thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    if (thread_seconds() - t0 > 0.02) break;
    inner *= 2;
  }
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const double t0 = thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    best = std::min(best, (thread_seconds() - t0) / static_cast<double>(inner));
  }
  return best;
}

void run(const ConvBench& b, const char* variant_name, int repetitions) {
  graph::Operator op;
  op.name = b.label;
  op.type = graph::OpType::Conv;
  op.attrs.kernel_shape = {b.kernel, b.kernel};
  op.attrs.strides = {b.stride, b.stride};
  op.attrs.dilations = {1, 1};
  const int64_t pad = b.kernel / 2;
  op.attrs.pads = {pad, pad, pad, pad};
  op.attrs.group = b.group;
  op.attrs.activation = graph::Activation::Relu;
  const graph::Shape x_shape{1, b.channels, b.size, b.size};
  const graph::Shape w_shape{b.out_channels, b.channels / b.group, b.kernel, b.kernel};
  const graph::Shape bias_shape{b.out_channels};
  const int64_t out_size = (b.size - 1) / b.stride + 1;
  const graph::Shape y_shape{1, b.out_channels, out_size, out_size};
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](const graph::Shape& s) {
    std::vector<float> v(static_cast<size_t>(graph::shape_numel(s)));
    for (float& x : v) x = dist(rng);
    return v;
  };
  const std::vector<float> x = random(x_shape), w = random(w_shape), bias = random(bias_shape);
  std::vector<float> y(static_cast<size_t>(graph::shape_numel(y_shape)));
  const kernels::ConstTensorView inputs[] = {
      {x.data(), &x_shape, b.layout}, {w.data(), &w_shape}, {bias.data(), &bias_shape}};
  const kernels::ConstTensorView constant_views[] = {
      {nullptr, &x_shape}, {w.data(), &w_shape}, {bias.data(), &bias_shape}};
  const std::span<const kernels::ConstTensorView> constants(constant_views);
  const graph::Region tile{{0, 0, b.row_begin, 0}, {1, b.out_channels, b.row_end, out_size}};
  const double flops = 2.0 * static_cast<double>(tile.numel()) *
                       static_cast<double>(b.channels / b.group * b.kernel * b.kernel);

  const auto* fast = kernels::find_tile_kernel_variant(graph::OpType::Conv, variant_name);
  const auto* reference = kernels::find_tile_kernel_variant(graph::OpType::Conv, "reference");
  if (!fast || !reference) {
    std::fprintf(stderr, "missing kernel variant %s\n", variant_name);
    std::exit(1);
  }
  if (auto why = fast->applies(op, constants)) {
    std::fprintf(stderr, "%s does not apply: %s\n", variant_name, why->c_str());
    std::exit(1);
  }
  const kernels::PreparedOp prepared = fast->prepare ? fast->prepare(op, constants) : nullptr;
  kernels::TileArgs args{.op = &op,
                         .inputs = inputs,
                         .input_count = 3,
                         .output = {y.data(), &y_shape, b.layout},
                         .region = &tile,
                         .prepared = prepared.get()};
  const double t_fast = best_seconds(*fast, args, repetitions);
  args.prepared = nullptr;
  const double t_ref = best_seconds(*reference, args, repetitions);
  std::printf("%-44s %-20s %9.3f ms %7.2f GFLOP/s | reference %9.3f ms %6.2f GFLOP/s | x%.1f\n",
              b.label, variant_name, t_fast * 1e3, flops / t_fast * 1e-9, t_ref * 1e3,
              flops / t_ref * 1e-9, t_ref / t_fast);
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::printf(
      "bench_conv: %s, 1 thread, SGEMM ISA %s, best of %d, fused ReLU, fp32\n", cpu_model().c_str(),
      std::string(kernels::cpu::gemm_isa_name(kernels::cpu::gemm_isa())).c_str(), repetitions);
  const ConvBench convs[] = {
      {"64x64 128->128 3x3, tile of 8 rows", 128, 128, 64, 3, 1, 24, 32},
      {"56x56 64->64 3x3, whole conv", 64, 64, 56, 3, 1, 0, 56},
      {"56x56 64->256 1x1, whole conv", 64, 256, 56, 1, 1, 0, 56},
      {"14x14 256->256 3x3, whole conv", 256, 256, 14, 3, 1, 0, 14},
  };
  for (const ConvBench& b : convs) run(b, "cpu.conv_gemm", repetitions);
  // MobileNetV2's depthwise layers (3×3, pad 1), NCHW and NHWC.
  constexpr graph::Layout kNhwc = graph::Layout::NHWC;
  const ConvBench depthwise[] = {
      {"112x112 32 dw 3x3, whole conv, NCHW", 32, 32, 112, 3, 32, 0, 112},
      {"112x112 32 dw 3x3, whole conv, NHWC", 32, 32, 112, 3, 32, 0, 112, 1, kNhwc},
      {"112x112 96 dw 3x3 s2, whole conv, NCHW", 96, 96, 112, 3, 96, 0, 56, 2},
      {"112x112 96 dw 3x3 s2, whole conv, NHWC", 96, 96, 112, 3, 96, 0, 56, 2, kNhwc},
      {"28x28 192 dw 3x3, whole conv, NCHW", 192, 192, 28, 3, 192, 0, 28},
      {"28x28 192 dw 3x3, whole conv, NHWC", 192, 192, 28, 3, 192, 0, 28, 1, kNhwc},
      {"14x14 576 dw 3x3, whole conv, NCHW", 576, 576, 14, 3, 576, 0, 14},
      {"14x14 576 dw 3x3, whole conv, NHWC", 576, 576, 14, 3, 576, 0, 14, 1, kNhwc},
      {"7x7 960 dw 3x3, whole conv, NHWC", 960, 960, 7, 3, 960, 0, 7, 1, kNhwc},
  };
  for (const ConvBench& b : depthwise) run(b, "cpu.conv_depthwise", repetitions);
  return 0;
}
