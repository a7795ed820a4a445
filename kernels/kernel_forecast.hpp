#pragma once
// graph::KernelForecast answered with the kernel choice's own rules: the
// variant choose_kernel() will take for an op, asked before tiling, with
// each rank-4 activation in the layout assign_layouts() is expected to give
// it. `tessera compile` hands one to the compiler so that the tiler cuts a
// conv for the kernel that will run it.
#include <string_view>
#include <vector>

#include "graph/kernel_forecast.hpp"
#include "graph/layout.hpp"
#include "kernels/kernel_choice.hpp"

namespace tessera::kernels {

class ChoiceForecast final : public graph::KernelForecast {
 public:
  // `disabled` must outlive the forecast (string literals, as the compile
  // options' names are). `maps`: the layout of rank-4 activations, NHWC
  // under LayoutPolicy::Auto (every conv kernel takes it), NCHW under Nchw.
  ChoiceForecast(KernelPolicy policy, std::vector<std::string_view> disabled, graph::Layout maps);

  bool runs_winograd(const graph::Graph& graph, int32_t op_index) const override;
  // cpu.conv_sparse: every route finishes an output element right after
  // reading its residual element (kernels/sparse/conv_spardr.cpp; the
  // sparse GEMM's multi-part layouts accumulate onto the residual instead,
  // sparse_gemm_tile()). The dense convs' K-blocked GEMMs store partial
  // sums into the output before the residual is read.
  bool writes_over_residual(const graph::Graph& graph, int32_t op_index) const override;

  // The variant choose_kernel() takes for op `op_index` (empty if none).
  std::string kernel_for(const graph::Graph& graph, int32_t op_index) const;

 private:
  KernelPolicy policy_;
  std::vector<std::string_view> disabled_;
  graph::Layout maps_;
};

}  // namespace tessera::kernels
