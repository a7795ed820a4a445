#pragma once
// Layout assignment: after the kernel choice, decides which activation
// tensors are stored NHWC (graph/layout.hpp). A tensor becomes NHWC when it
// is rank 4 with H·W > 1, lives in the arena, is neither a model input nor a
// model output (those keep ONNX's order for the caller), and the kernel its
// producer runs and the kernels of all its consumers accept NHWC
// (TileKernelVariant::layouts). Ops whose kernel needs one layout for all
// its operands (LayoutSupport::Uniform) tie their tensors together: they
// become NHWC all or none. Convolution then reads and writes pixel-major
// panels in place instead of transposing around its GEMM.
#include <optional>
#include <string>
#include <vector>

#include "graph/tile_graph.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {

enum class LayoutPolicy {
  Nchw,  // every tensor NCHW (for A/B runs)
  Auto,  // NHWC wherever the kernels allow it
};

struct LayoutAssignment {
  int32_t nhwc_tensors = 0;      // tensors set to NHWC
  int32_t material_tensors = 0;  // rank-4 arena tensors with H·W > 1 (could differ)
  // Why each material tensor that is not a model input or output stays NCHW,
  // e.g. "'x' stays NCHW: consumer 'flatten' (Flatten, reference) is NCHW-only".
  std::vector<std::string> kept_nchw;
};

// Sets CompiledTensor::layout of every tensor; needs Operator::kernel set
// (kernels::choose_kernels). Throws tessera::Error on an op whose kernel
// this build does not have.
LayoutAssignment assign_layouts(graph::TileGraph& graph, LayoutPolicy policy);

// Whether the tensors' layouts around `op` keep `variant`'s contract
// (TileKernelVariant::layouts): nullopt if so, else why not. The loader
// checks every op of a file with it, so a hand-made file cannot make a
// kernel read one order as another.
std::optional<std::string> layout_contract_violation(const graph::TileGraph& graph,
                                                     const graph::Operator& op,
                                                     const TileKernelVariant& variant);

}  // namespace tessera::kernels
