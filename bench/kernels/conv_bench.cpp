// Single-thread convolution tiles: the CPU variants (cpu.conv_gemm,
// cpu.conv_depthwise) beside the reference kernel on the same tile, in one
// run, with the speed-up; depthwise in NCHW and NHWC. Weights are prepared (packed) outside the
// timed loop, as at model load. Each figure is the best of the repetitions, in this thread's CPU
// time (the machine is shared). The Winograd section times cpu.conv_winograd
// against cpu.conv_gemm on ResNet-50's 3×3 layers (NHWC, as compiled), in
// GFLOP/s of the direct conv's FLOPs, with its max error against the
// reference relative to the largest output.
//
//   bench_conv [repetitions] [winograd|nhwc [label filter]]
//     winograd: that section only; nhwc: only the NHWC conv_gemm section,
//     its cases whose label contains the filter.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/tile_kernel.hpp"
#include "thread_seconds.hpp"

namespace {

using namespace tessera;

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

struct ConvBench {
  const char* label;
  int64_t channels, out_channels, size, kernel, group;
  int64_t row_begin, row_end;  // output rows of the tile (full width)
  int64_t stride = 1;
  graph::Layout layout = graph::Layout::NCHW;  // of X and Y
  bool nchw_input = false;                     // X NCHW whatever `layout` (a model's input)
  bool residual = false;                       // a fused residual Add (in `layout`)
  graph::Activation activation = graph::Activation::Relu;
  int64_t channel_end = 0;  // > 0: output channels [channel_begin, channel_end) only
  int64_t channel_begin = 0;
};

// Best time of `repetitions` runs of the tile, each run repeated until it
// takes at least ~20 ms.
double best_seconds(const kernels::TileKernelVariant& v, const kernels::TileArgs& args,
                    int repetitions) {
  int64_t inner = 1;
  for (;;) {
    const double t0 = tessera::bench::thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    if (tessera::bench::thread_seconds() - t0 > 0.02) break;
    inner *= 2;
  }
  double best = 1e30;
  for (int r = 0; r < repetitions; ++r) {
    const double t0 = tessera::bench::thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    best = std::min(best, (tessera::bench::thread_seconds() - t0) / static_cast<double>(inner));
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
  op.attrs.activation = b.activation;
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
  const std::vector<float> residual = random(y_shape);
  std::vector<float> y(static_cast<size_t>(graph::shape_numel(y_shape)));
  op.attrs.fused_residual = b.residual;
  const kernels::ConstTensorView inputs[] = {
      {x.data(), &x_shape, b.nchw_input ? graph::Layout::NCHW : b.layout},
      {w.data(), &w_shape},
      {bias.data(), &bias_shape},
      {residual.data(), &y_shape, b.layout}};
  const kernels::ConstTensorView constant_views[] = {
      {nullptr, &x_shape}, {w.data(), &w_shape}, {bias.data(), &bias_shape}, {nullptr, &y_shape}};
  const std::span<const kernels::ConstTensorView> constants(constant_views, b.residual ? 4u : 3u);
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
                         .input_count = b.residual ? 4u : 3u,
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

// A Winograd form (cpu.conv_winograd or cpu.conv_winograd_2x2) vs
// cpu.conv_gemm on one tile of a 3×3 pad-1 conv, NHWC.
void compare_winograd(const ConvBench& b, int repetitions, const char* form) {
  graph::Operator op;
  op.name = b.label;
  op.type = graph::OpType::Conv;
  op.attrs.kernel_shape = {3, 3};
  op.attrs.strides = {1, 1};
  op.attrs.dilations = {1, 1};
  op.attrs.pads = {1, 1, 1, 1};
  op.attrs.activation = graph::Activation::Relu;
  const graph::Shape x_shape{1, b.channels, b.size, b.size};
  const graph::Shape w_shape{b.out_channels, b.channels, 3, 3};
  const graph::Shape bias_shape{b.out_channels};
  const graph::Shape y_shape{1, b.out_channels, b.size, b.size};
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](const graph::Shape& s, float scale) {
    std::vector<float> v(static_cast<size_t>(graph::shape_numel(s)));
    for (float& x : v) x = scale * dist(rng);
    return v;
  };
  // Inputs ≥ 0 (post-ReLU activations) and He-scaled weights, as in ResNet.
  std::vector<float> x = random(x_shape, 1.0f);
  for (float& v : x) v = std::abs(v);
  const std::vector<float> w =
      random(w_shape, std::sqrt(6.0f / static_cast<float>(9 * b.channels)));
  const std::vector<float> bias = random(bias_shape, 0.1f);
  const graph::Layout nhwc = graph::Layout::NHWC;
  std::vector<float> x_nhwc(x.size());
  for (int64_t c = 0; c < b.channels; ++c)
    for (int64_t p = 0; p < b.size * b.size; ++p)
      x_nhwc[static_cast<size_t>(p * b.channels + c)] =
          x[static_cast<size_t>(c * b.size * b.size + p)];
  const size_t y_numel = static_cast<size_t>(graph::shape_numel(y_shape));
  std::vector<float> y_ref(y_numel), y_gemm(y_numel), y_wino(y_numel);
  const kernels::ConstTensorView ref_inputs[] = {
      {x.data(), &x_shape}, {w.data(), &w_shape}, {bias.data(), &bias_shape}};
  const kernels::ConstTensorView inputs[] = {
      {x_nhwc.data(), &x_shape, nhwc}, {w.data(), &w_shape}, {bias.data(), &bias_shape}};
  const kernels::ConstTensorView constant_views[] = {
      {nullptr, &x_shape}, {w.data(), &w_shape}, {bias.data(), &bias_shape}};
  const std::span<const kernels::ConstTensorView> constants(constant_views);
  const int64_t c0 = b.channel_begin, c1 = b.channel_end > 0 ? b.channel_end : b.out_channels;
  const graph::Region tile{{0, c0, b.row_begin, 0}, {1, c1, b.row_end, b.size}};
  const double flops =
      2.0 * static_cast<double>(tile.numel()) * static_cast<double>(b.channels * 9);
  const auto* gemm = kernels::find_tile_kernel_variant(graph::OpType::Conv, "cpu.conv_gemm");
  const auto* wino = kernels::find_tile_kernel_variant(graph::OpType::Conv, form);
  const auto* reference = kernels::find_tile_kernel_variant(graph::OpType::Conv, "reference");
  if (auto why = kernels::cpu::conv_winograd_supports(op, constants)) {
    std::fprintf(stderr, "%s cannot run %s: %s\n", form, b.label, why->c_str());
    std::exit(1);
  }
  const kernels::PreparedOp gemm_prepared = gemm->prepare(op, constants);
  const kernels::PreparedOp wino_prepared = wino->prepare(op, constants);
  kernels::TileArgs args{.op = &op,
                         .inputs = ref_inputs,
                         .input_count = 3,
                         .output = {y_ref.data(), &y_shape},
                         .region = &tile};
  reference->run(args);
  args.inputs = inputs;
  args.output = {y_gemm.data(), &y_shape, nhwc};
  args.prepared = gemm_prepared.get();
  const double t_gemm = best_seconds(*gemm, args, repetitions);
  args.output = {y_wino.data(), &y_shape, nhwc};
  args.prepared = wino_prepared.get();
  const double t_wino = best_seconds(*wino, args, repetitions);
  // Error of each against the reference, relative to the largest output.
  double max_ref = 0, err_gemm = 0, err_wino = 0;
  const int64_t plane = b.size * b.size;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t p = b.row_begin * b.size; p < b.row_end * b.size; ++p) {
      const double ref = y_ref[static_cast<size_t>(c * plane + p)];
      const size_t at = static_cast<size_t>(p * b.out_channels + c);
      max_ref = std::max(max_ref, std::abs(ref));
      err_gemm = std::max(err_gemm, std::abs(y_gemm[at] - ref));
      err_wino = std::max(err_wino, std::abs(y_wino[at] - ref));
    }
  std::printf(
      "%-40s gemm %8.3f ms %6.1f GFLOP/s | %s %8.3f ms %6.1f GFLOP/s | x%.2f | "
      "max err/max|y| gemm %.1e winograd %.1e\n",
      b.label, t_gemm * 1e3, flops / t_gemm * 1e-9,
      std::strcmp(form, "cpu.conv_winograd") == 0 ? "F(4x4)" : "F(2x2)", t_wino * 1e3,
      flops / t_wino * 1e-9, t_gemm / t_wino, err_gemm / max_ref, err_wino / max_ref);
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const bool winograd_only = argc > 2 && std::string(argv[2]) == "winograd";
  std::printf("bench_conv: %s, 1 thread, SGEMM ISA %s, best of %d, fused ReLU unless named, fp32\n",
              cpu_model().c_str(),
              std::string(kernels::cpu::gemm_isa_name(kernels::cpu::gemm_isa())).c_str(),
              repetitions);
  // ResNet-50's 3×3 stride-1 layers, whole, as runs of rows (half, a
  // quarter) and, for 14×14, as channel tiles.
  const ConvBench resnet[] = {
      {"56x56 64->64, whole", 64, 64, 56, 3, 1, 0, 56},
      {"56x56 64->64, rows 0:28", 64, 64, 56, 3, 1, 0, 28},
      {"28x28 128->128, whole", 128, 128, 28, 3, 1, 0, 28},
      {"28x28 128->128, rows 14:28", 128, 128, 28, 3, 1, 14, 28},
      {"28x28 128->128, rows 7:14", 128, 128, 28, 3, 1, 7, 14},
      {"14x14 256->256, whole", 256, 256, 14, 3, 1, 0, 14},
      {"14x14 256->256, rows 7:14", 256, 256, 14, 3, 1, 7, 14},
      {"14x14 256->256, rows 4:7", 256, 256, 14, 3, 1, 4, 7},
      // The tiler's cut of 14-27-row maps: channels over whole maps.
      {"14x14 256->256, channels 0:128", 256, 256, 14, 3, 1, 0, 14, 1, graph::Layout::NCHW, false,
       false, graph::Activation::Relu, 128},
      {"14x14 256->256, channels 192:256", 256, 256, 14, 3, 1, 0, 14, 1, graph::Layout::NCHW, false,
       false, graph::Activation::Relu, 256, 192},
      // The YOLO-style head's 26x26 conv after its upsample and Concat.
      {"26x26 384->256 (YOLO head), whole", 384, 256, 26, 3, 1, 0, 26},
      // Few input channels: where the transforms cost what the GEMMs save.
      {"208x208 12->32 (YOLO stem), rows 0:52", 12, 32, 208, 3, 1, 0, 52},
      {"104x104 32->64, rows 0:52", 32, 64, 104, 3, 1, 0, 52},
  };
  // F(2×2, 3×3) on small maps: ResNet-50's 7×7 stage and a YOLO-style
  // head's 13×13 convs (whole, and as the tiler cuts them for 2 threads:
  // runs of rows, or halves of the output channels where the weights
  // outweigh the map), and on 14×14 beside F(4×4) above.
  const ConvBench small_maps[] = {
      {"7x7 512->512, whole", 512, 512, 7, 3, 1, 0, 7},
      {"7x7 512->512, rows 0:4", 512, 512, 7, 3, 1, 0, 4},
      {"7x7 512->512, rows 4:7", 512, 512, 7, 3, 1, 4, 7},
      {"13x13 256->512, whole", 256, 512, 13, 3, 1, 0, 13},
      {"13x13 256->512, rows 0:7", 256, 512, 13, 3, 1, 0, 7},
      {"13x13 512->1024, whole", 512, 1024, 13, 3, 1, 0, 13},
      {"13x13 512->1024, channels 0:512", 512, 1024, 13, 3, 1, 0, 13, 1, graph::Layout::NCHW, false,
       false, graph::Activation::Relu, 512},
      {"10x10 128->128, whole", 128, 128, 10, 3, 1, 0, 10},
      {"14x14 256->256, whole", 256, 256, 14, 3, 1, 0, 14},
      {"14x14 256->256, channels 0:128", 256, 256, 14, 3, 1, 0, 14, 1, graph::Layout::NCHW, false,
       false, graph::Activation::Relu, 128},
  };
  if (!(argc > 2 && std::string(argv[2]) == "nhwc")) {
    for (const ConvBench& b : resnet) compare_winograd(b, repetitions, "cpu.conv_winograd");
    for (const ConvBench& b : small_maps) compare_winograd(b, repetitions, "cpu.conv_winograd_2x2");
  }
  if (winograd_only) return 0;
  // MobileNetV2's small-K layers as compiled (NHWC, half-image tiles as at
  // two threads; the stems whole as at one): the stem (K = 27) and 1×1
  // expansions (K = 16, 24, 32).
  constexpr graph::Layout kNhwcLayout = graph::Layout::NHWC;
  const ConvBench small_k[] = {
      {"224x224 3->32 3x3 s2 (stem), rows 0:56 NHWC", 3, 32, 224, 3, 1, 0, 56, 2, kNhwcLayout},
      {"224x224 3->32 3x3 s2 (stem), rows 0:56 NCHW->NHWC", 3, 32, 224, 3, 1, 0, 56, 2, kNhwcLayout,
       true},
      {"224x224 3->32 3x3 s2 (stem), whole NCHW->NHWC", 3, 32, 224, 3, 1, 0, 112, 2, kNhwcLayout,
       true},
      {"224x224 3->64 7x7 s2 (stem), whole NCHW->NHWC", 3, 64, 224, 7, 1, 0, 112, 2, kNhwcLayout,
       true},
      {"112x112 16->96 1x1, rows 0:56 NHWC", 16, 96, 112, 1, 1, 0, 56, 1, kNhwcLayout},
      {"112x112 16->96 1x1 + SiLU, rows 0:56 NHWC", 16, 96, 112, 1, 1, 0, 56, 1, kNhwcLayout, false,
       false, graph::Activation::Silu},
      {"56x56 24->144 1x1, rows 0:28 NHWC", 24, 144, 56, 1, 1, 0, 28, 1, kNhwcLayout},
      {"28x28 32->192 1x1, rows 0:14 NHWC", 32, 192, 28, 1, 1, 0, 14, 1, kNhwcLayout},
      {"56x56 64->256 1x1, rows 0:28 NHWC", 64, 256, 56, 1, 1, 0, 28, 1, kNhwcLayout},
      {"56x56 64->256 1x1 + residual, rows 0:28 NHWC", 64, 256, 56, 1, 1, 0, 28, 1, kNhwcLayout,
       false, true},
      {"56x56 64->64 3x3, rows 0:28 NHWC", 64, 64, 56, 3, 1, 0, 28, 1, kNhwcLayout},
      {"28x28 128->128 3x3, rows 0:14 NHWC", 128, 128, 28, 3, 1, 0, 14, 1, kNhwcLayout},
      {"14x14 256->256 3x3, rows 0:7 NHWC", 256, 256, 14, 3, 1, 0, 7, 1, kNhwcLayout},
      // ResNet-50's stem (NCHW model input, NHWC out) and strided 1×1
      // downsamples, as the 1-thread tiler's half-image tiles.
      {"224x224 3->64 7x7 s2 (stem), rows 0:56 NCHW->NHWC", 3, 64, 224, 7, 1, 0, 56, 2, kNhwcLayout,
       true},
      {"56x56 256->512 1x1 s2, rows 0:14 NHWC", 256, 512, 56, 1, 1, 0, 14, 2, kNhwcLayout},
      {"28x28 512->1024 1x1 s2, rows 0:7 NHWC", 512, 1024, 28, 1, 1, 0, 7, 2, kNhwcLayout},
      {"14x14 1024->2048 1x1 s2, rows 0:4 NHWC", 1024, 2048, 14, 1, 1, 0, 4, 2, kNhwcLayout},
      // The YOLO-style detector's (bench/e2e/tiny_yolo.py) 13x13 3x3 convs,
      // which run cpu.conv_winograd_2x2 (the winograd section), and its
      // stem after the space-to-depth Concat (12 channels, NHWC), a quarter
      // of the map as at 2 threads.
      {"13x13 512->1024 3x3, whole NHWC", 512, 1024, 13, 3, 1, 0, 13, 1, kNhwcLayout},
      {"13x13 256->512 3x3, whole NHWC", 256, 512, 13, 3, 1, 0, 13, 1, kNhwcLayout},
      {"208x208 12->32 3x3 (YOLO stem), rows 0:52 NHWC", 12, 32, 208, 3, 1, 0, 52, 1, kNhwcLayout},
  };
  // An optional third argument keeps only the cases whose label contains it.
  const std::string only = argc > 3 ? argv[3] : "";
  for (const ConvBench& b : small_k)
    if (std::string(b.label).find(only) != std::string::npos) run(b, "cpu.conv_gemm", repetitions);
  if (std::string(argc > 2 ? argv[2] : "") == "nhwc") return 0;
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
      {"112x112 32 dw 3x3 + SiLU, whole conv, NHWC", 32, 32, 112, 3, 32, 0, 112, 1, kNhwc, false,
       false, graph::Activation::Silu},
      {"112x112 96 dw 3x3 s2, whole conv, NCHW", 96, 96, 112, 3, 96, 0, 56, 2},
      {"112x112 96 dw 3x3 s2, whole conv, NHWC", 96, 96, 112, 3, 96, 0, 56, 2, kNhwc},
      {"28x28 192 dw 3x3, whole conv, NCHW", 192, 192, 28, 3, 192, 0, 28},
      {"28x28 192 dw 3x3, whole conv, NHWC", 192, 192, 28, 3, 192, 0, 28, 1, kNhwc},
      {"14x14 576 dw 3x3, whole conv, NCHW", 576, 576, 14, 3, 576, 0, 14},
      {"14x14 576 dw 3x3, whole conv, NHWC", 576, 576, 14, 3, 576, 0, 14, 1, kNhwc},
      {"7x7 960 dw 3x3, whole conv, NHWC", 960, 960, 7, 3, 960, 0, 7, 1, kNhwc},
      // EfficientNet-B0's 5×5 layers (pad 2).
      {"28x28 240 dw 5x5, whole conv, NHWC", 240, 240, 28, 5, 240, 0, 28, 1, kNhwc},
      {"14x14 672 dw 5x5, whole conv, NHWC", 672, 672, 14, 5, 672, 0, 14, 1, kNhwc},
      {"14x14 672 dw 5x5 s2, whole conv, NHWC", 672, 672, 14, 5, 672, 0, 7, 2, kNhwc},
  };
  for (const ConvBench& b : depthwise) run(b, "cpu.conv_depthwise", repetitions);
  return 0;
}
