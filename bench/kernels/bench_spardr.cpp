// SparDR's conv benchmark (papers/spardr.md Table II, CV1–CV13): for each
// layer at batch 1 with random unstructured weights at the table's sparsity
// (exactly round(density·size) nonzeros, uniformly placed) and a random
// input, the dense conv variant Tessera's kernel choice would pick
// (cpu.conv_winograd where it applies, else cpu.conv_gemm) against
// cpu.conv_sparse, each over the whole output as one tile on one thread,
// weights prepared outside the timed loop (as at model load). Times are the
// median of the repetitions, each repeated until it takes >= 20 ms, in this
// thread's CPU time (the machine is shared). Also checks the sparse output
// against the dense one.
//
//   bench_spardr [--reps N] [--layout nhwc|nchw] [--sweep] [--filter CVn]
//     --layout: of X and Y (default nhwc: what the compiler stores between
//       convs); --sweep: for each layer, the speed-up at densities 2%–60%
//       instead of the table's (what sets conv_sparse_max_density()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "kernels/sparse/conv_spardr.hpp"
#include "kernels/tile_kernel.hpp"
#include "thread_seconds.hpp"

namespace {

using namespace tessera;

struct Layer {
  const char* name;
  int64_t channels, in_h, in_w, out_channels, kernel, pad, stride;
  double sparsity;
};

// Table II.
constexpr Layer kLayers[] = {
    {"CV1", 179, 14, 14, 179, 3, 1, 1, 0.827797},  {"CV2", 179, 14, 14, 716, 1, 0, 1, 0.831005},
    {"CV3", 179, 28, 28, 179, 3, 1, 2, 0.827987},  {"CV4", 2048, 7, 7, 358, 1, 0, 1, 0.881186},
    {"CV5", 358, 28, 28, 716, 1, 0, 2, 0.829097},  {"CV6", 358, 7, 7, 2048, 1, 0, 1, 0.881133},
    {"CV7", 44, 56, 56, 44, 1, 0, 1, 0.871384},    {"CV8", 716, 14, 14, 2048, 1, 0, 2, 0.879547},
    {"CV9", 89, 28, 28, 89, 3, 1, 1, 0.832793},    {"CV10", 512, 14, 14, 512, 3, 1, 1, 0.900000},
    {"CV11", 192, 40, 40, 192, 3, 1, 1, 0.890501}, {"CV12", 288, 20, 20, 288, 3, 1, 1, 0.878399},
    {"CV13", 96, 80, 80, 96, 3, 1, 1, 0.928204},
};

// Median time of `reps` runs, each run repeated until it takes >= 20 ms.
double median_seconds(const kernels::TileKernelVariant& v, const kernels::TileArgs& args,
                      int reps) {
  int64_t inner = 1;
  for (;;) {
    const double t0 = tessera::bench::thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    if (tessera::bench::thread_seconds() - t0 > 0.02) break;
    inner *= 2;
  }
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = tessera::bench::thread_seconds();
    for (int64_t i = 0; i < inner; ++i) v.run(args);
    times.push_back((tessera::bench::thread_seconds() - t0) / static_cast<double>(inner));
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<size_t>(reps / 2)];
}

struct Result {
  const char* dense_name = "";
  double dense_s = 0, sparse_s = 0, max_error = 0;
  double max_density = 0;  // below which kernel choice picks cpu.conv_sparse
};

Result measure(const Layer& layer, double density, graph::Layout layout, int reps,
               std::mt19937_64& rng) {
  graph::Operator op;
  op.name = layer.name;
  op.type = graph::OpType::Conv;
  op.attrs.kernel_shape = {layer.kernel, layer.kernel};
  op.attrs.strides = {layer.stride, layer.stride};
  op.attrs.pads = {layer.pad, layer.pad, layer.pad, layer.pad};
  op.attrs.dilations = {1, 1};
  const int64_t out_h = (layer.in_h + 2 * layer.pad - layer.kernel) / layer.stride + 1;
  const int64_t out_w = (layer.in_w + 2 * layer.pad - layer.kernel) / layer.stride + 1;
  const graph::Shape x_shape{1, layer.channels, layer.in_h, layer.in_w};
  const graph::Shape w_shape{layer.out_channels, layer.channels, layer.kernel, layer.kernel};
  const graph::Shape b_shape{layer.out_channels};
  const graph::Shape y_shape{1, layer.out_channels, out_h, out_w};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(graph::shape_numel(x_shape)));
  for (float& v : x) v = dist(rng);
  std::vector<float> bias(static_cast<size_t>(layer.out_channels));
  for (float& v : bias) v = dist(rng);
  // Exactly round(density · size) nonzeros at uniformly random places.
  const size_t w_count = static_cast<size_t>(graph::shape_numel(w_shape));
  std::vector<size_t> places(w_count);
  std::iota(places.begin(), places.end(), size_t{0});
  std::shuffle(places.begin(), places.end(), rng);
  std::vector<float> w(w_count, 0.0f);
  const size_t nonzeros = static_cast<size_t>(std::llround(density * static_cast<double>(w_count)));
  for (size_t i = 0; i < nonzeros; ++i) w[places[i]] = dist(rng);

  const kernels::ConstTensorView prep_views[] = {
      {nullptr, &x_shape, layout}, {w.data(), &w_shape}, {bias.data(), &b_shape}};
  const kernels::ConstTensorView views[] = {
      {x.data(), &x_shape, layout}, {w.data(), &w_shape}, {bias.data(), &b_shape}};
  auto variant = [](std::string_view name) {
    return kernels::find_tile_kernel_variant(graph::OpType::Conv, name);
  };
  // Kernel choice among the dense variants: Winograd ranks above conv_gemm.
  const kernels::TileKernelVariant* dense = variant("cpu.conv_winograd");
  if (dense->applies(op, std::span(prep_views))) dense = variant("cpu.conv_gemm");
  const kernels::TileKernelVariant* sparse = variant("cpu.conv_sparse");
  const double max_density = kernels::sparse::conv_sparse_max_density(op, std::span(prep_views));
  const graph::Region whole = graph::Region::whole(y_shape);
  Result result;
  result.dense_name = dense->name.data();
  result.max_density = max_density;
  std::vector<float> y_dense(static_cast<size_t>(graph::shape_numel(y_shape)));
  std::vector<float> y_sparse(y_dense.size());
  for (int which = 0; which < 2; ++which) {
    const kernels::TileKernelVariant* v = which == 0 ? dense : sparse;
    const kernels::PreparedOp prepared = v->prepare(op, std::span(prep_views));
    const kernels::TileArgs args{
        .op = &op,
        .inputs = views,
        .input_count = 3,
        .output = {(which == 0 ? y_dense : y_sparse).data(), &y_shape, layout},
        .region = &whole,
        .prepared = prepared.get()};
    (which == 0 ? result.dense_s : result.sparse_s) = median_seconds(*v, args, reps);
  }
  for (size_t i = 0; i < y_dense.size(); ++i)
    result.max_error =
        std::max(result.max_error, static_cast<double>(std::fabs(y_dense[i] - y_sparse[i])));
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 11;
  bool sweep = false;
  graph::Layout layout = graph::Layout::NHWC;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--layout" && i + 1 < argc) {
      const std::string v = argv[++i];
      layout = v == "nchw" ? graph::Layout::NCHW : graph::Layout::NHWC;
    } else if (arg == "--sweep") {
      sweep = true;
    } else if (arg == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(
          stderr, "usage: bench_spardr [--reps N] [--layout nhwc|nchw] [--sweep] [--filter CVn]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(42);
  std::printf("SparDR Table II, batch 1, 1 thread, whole output as one tile, %s, median of %d\n",
              layout == graph::Layout::NHWC ? "NHWC" : "NCHW", reps);
  if (!sweep) {
    std::printf("%-5s %-26s %8s %-17s %9s %9s %8s %6s %4s %9s  %s\n", "layer", "C,H,W -> OC,k,p,s",
                "sparsity", "dense variant", "dense ms", "sparse ms", "speedup", "target", "met",
                "max err", "chosen (density < bound)");
    int met = 0, total = 0;
    for (const Layer& layer : kLayers) {
      if (!filter.empty() && filter != layer.name) continue;
      const Result r = measure(layer, 1.0 - layer.sparsity, layout, reps, rng);
      const double speedup = r.dense_s / r.sparse_s;
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lld,%lld,%lld -> %lld,%lld,%lld,%lld",
                    static_cast<long long>(layer.channels), static_cast<long long>(layer.in_h),
                    static_cast<long long>(layer.in_w), static_cast<long long>(layer.out_channels),
                    static_cast<long long>(layer.kernel), static_cast<long long>(layer.pad),
                    static_cast<long long>(layer.stride));
      ++total;
      met += speedup >= 1.5;
      const double density = 1.0 - layer.sparsity;
      std::printf(
          "%-5s %-26s %8.4f %-17s %9.3f %9.3f %7.2fx %5.1fx %4s %9.2e  %s (%.1f%% < %.0f%%)\n",
          layer.name, shape, layer.sparsity, r.dense_name, 1e3 * r.dense_s, 1e3 * r.sparse_s,
          speedup, 1.5, speedup >= 1.5 ? "yes" : "NO", r.max_error,
          density < r.max_density ? "sparse" : "dense", 100.0 * density, 100.0 * r.max_density);
    }
    std::printf("target 1.5x met on %d of %d layers\n", met, total);
    return 0;
  }
  const double densities[] = {0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6};
  std::printf("speed-up of cpu.conv_sparse over the dense variant by weight density\n%-5s",
              "layer");
  for (double d : densities) std::printf(" %6.0f%%", 100.0 * d);
  std::printf("\n");
  for (const Layer& layer : kLayers) {
    if (!filter.empty() && filter != layer.name) continue;
    std::printf("%-5s", layer.name);
    for (double d : densities) {
      const Result r = measure(layer, d, layout, reps, rng);
      std::printf(" %6.2fx", r.dense_s / r.sparse_s);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return 0;
}
