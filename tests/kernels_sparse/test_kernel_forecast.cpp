// kernels::ChoiceForecast: the kernel choice asked before tiling. It must
// name the variant choose_kernels() later stores for each op, or the tiler
// cuts a conv for a kernel that does not run it (graph/kernel_forecast.hpp).
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "graph/compiler.hpp"
#include "graph/layout.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/kernel_forecast.hpp"
#include "kernels/layout_assignment.hpp"
#include "tests/graph/graph_builder.hpp"

namespace {

using namespace tessera;
using graph::Layout;
using graph::OpType;
using graph::test::GraphBuilder;
using graph::test::spatial_attrs;
using kernels::ChoiceForecast;
using kernels::KernelPolicy;

// Zeroes all but `density` of tensor t's weights, at random.
void prune(graph::Graph& g, int32_t t, double density, std::mt19937& rng) {
  std::bernoulli_distribution keep(density);
  for (float& v : g.tensors[static_cast<size_t>(t)].weight)
    if (!keep(rng)) v = 0.0f;
}

graph::OpAttributes conv3x3() {
  return spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
}

TEST_CASE(
    "ChoiceForecast: Winograd for a dense 3x3 conv, not for a sparse, disabled or reference") {
  std::mt19937 rng(7);
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 64, 16, 16});
  const int32_t w1 = b.weight("w1", {64, 64, 3, 3});
  const int32_t w2 = b.weight("w2", {64, 64, 3, 3});
  const int32_t y = b.op(OpType::Conv, {x, w1}, conv3x3(), "dense");
  b.g.outputs = {b.op(OpType::Conv, {y, w2}, conv3x3(), "sparse")};
  prune(b.g, w2, 0.05, rng);

  const ChoiceForecast nhwc(KernelPolicy::Fastest, {}, Layout::NHWC);
  CHECK(nhwc.kernel_for(b.g, 0) == "cpu.conv_winograd");
  CHECK(nhwc.runs_winograd(b.g, 0));
  CHECK(nhwc.kernel_for(b.g, 1) == "cpu.conv_sparse");
  CHECK_FALSE(nhwc.runs_winograd(b.g, 1));

  const std::vector<std::string_view> no_winograd{"cpu.conv_winograd"};
  const ChoiceForecast disabled(KernelPolicy::Fastest, no_winograd, Layout::NHWC);
  CHECK_FALSE(disabled.runs_winograd(b.g, 0));
  CHECK(disabled.kernel_for(b.g, 0) == "cpu.conv_gemm");

  const ChoiceForecast reference(KernelPolicy::ReferenceOnly, {}, Layout::NHWC);
  CHECK(reference.kernel_for(b.g, 0) == "reference");
  CHECK_FALSE(reference.runs_winograd(b.g, 0));
}

TEST_CASE("ChoiceForecast names the kernel the compiler then chooses, op by op") {
  // A chain of convs of random shapes and densities, some of Winograd's
  // shape, the first reading the model input (NCHW) and the last writing
  // the output: the forecast made on the operator graph must equal
  // choose_kernels() on the compiled graph after assign_layouts(), under
  // both layout policies.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    CAPTURE(trial);
    GraphBuilder b;
    std::uniform_int_distribution<int> channels_of(0, 2), kernel_of(0, 2), size_of(0, 2);
    std::uniform_real_distribution<double> density_of(0.02, 1.0);
    const int64_t sizes[] = {8, 14, 28};
    int64_t c = 32 * (1 + channels_of(rng));
    int32_t x = b.input("x", {1, c, sizes[size_of(rng)], sizes[size_of(rng)]});
    const int convs = 2 + trial % 3;
    for (int i = 0; i < convs; ++i) {
      const int64_t out_c = 32 * (1 + channels_of(rng));
      const int64_t k = kernel_of(rng) == 0 ? 1 : 3;
      // (GCC 12 warns -Wrestrict on "literal" + std::string at -O3.)
      const std::string id = std::to_string(i);
      const int32_t w = b.weight(std::string("w").append(id), {out_c, c, k, k});
      const double density = density_of(rng);
      if (density < 0.5) prune(b.g, w, density, rng);
      x = b.op(OpType::Conv, {x, w},
               spatial_attrs({k, k}, {1, 1}, {k / 2, k / 2, k / 2, k / 2}, {1, 1}),
               std::string("conv").append(id));
      c = out_c;
    }
    b.g.outputs = {x};
    for (const auto& [policy, maps] : {std::pair{kernels::LayoutPolicy::Auto, Layout::NHWC},
                                       std::pair{kernels::LayoutPolicy::Nchw, Layout::NCHW}}) {
      CAPTURE(graph::layout_name(maps));
      const ChoiceForecast forecast(KernelPolicy::Fastest, {}, maps);
      std::vector<std::string> forecasts;
      for (int32_t i = 0; i < static_cast<int32_t>(b.g.ops.size()); ++i)
        forecasts.push_back(forecast.kernel_for(b.g, i));
      graph::TileGraph tg =
          graph::compile_graph(b.g, graph::CompileOptions{.threads = 2, .target = "test"}, nullptr);
      REQUIRE(tg.ops.size() == b.g.ops.size());
      kernels::choose_kernels(tg, KernelPolicy::Fastest);
      kernels::assign_layouts(tg, policy);
      const auto choices = kernels::choose_kernels(tg, KernelPolicy::Fastest);
      for (size_t i = 0; i < choices.size(); ++i) {
        CAPTURE(tg.ops[i].name);
        CHECK(forecasts[i] == choices[i].kernel);
      }
    }
  }
}

}  // namespace
