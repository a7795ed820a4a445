#pragma once
// The contract between the scheduler's nodes and the kernels: a tile kernel
// computes exactly `region` of its operator's output, reading whatever parts
// of its inputs the operator's dependency function names, and nothing else.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/layout.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"

namespace tessera::kernels {

// `shape` is the logical (ONNX, NCHW) shape; `layout` says where its
// elements lie (graph::layout_strides). Regions are always logical.
struct ConstTensorView {
  const float* data = nullptr;  // dense, in `layout` order
  const graph::Shape* shape = nullptr;
  graph::Layout layout = graph::Layout::NCHW;
};

struct TensorView {
  float* data = nullptr;  // the whole output tensor (dense, in `layout` order)
  const graph::Shape* shape = nullptr;
  graph::Layout layout = graph::Layout::NCHW;
};

struct TileArgs {
  const graph::Operator* op = nullptr;
  const ConstTensorView* inputs = nullptr;  // in the operator's input order
  size_t input_count = 0;
  TensorView output;
  const graph::Region* region = nullptr;  // the part of the output to compute
  const void* prepared = nullptr;         // the variant's PreparedOp, if it has one
};

using TileKernel = void (*)(const TileArgs&);

// State a kernel variant builds once per op when a model is loaded (e.g. the
// weights packed into the panel layout its microkernel reads); immutable and
// shared by every request and thread.
using PreparedOp = std::shared_ptr<const void>;

// `inputs` gives every operand's shape; data is set for weights (constants)
// and null for activations. Throws tessera::Error if the op cannot be prepared.
using PrepareKernel = PreparedOp (*)(const graph::Operator& op,
                                     std::span<const ConstTensorView> inputs);

// Whether a variant can run this op: std::nullopt if it can, else the reason it
// cannot (the compile report prints it: no silent fallbacks).
using KernelApplies = std::optional<std::string> (*)(const graph::Operator& op,
                                                     std::span<const ConstTensorView> inputs);

// A variant's layout contract for rank-4 arena tensors whose layout is
// material (H·W > 1; graph/layout.hpp):
//  - NchwOnly: every such operand and the output are NCHW.
//  - Any: each operand and the output may be NCHW or NHWC independently.
//  - Uniform: NCHW or NHWC, but the same for all of them (e.g. an
//    elementwise op walking one physical order).
enum class LayoutSupport : uint8_t { NchwOnly, Any, Uniform };

struct TileKernelVariant {
  graph::OpType type;
  std::string_view name;  // stored in .tess files: never rename
  TileKernel run;
  PrepareKernel prepare = nullptr;  // optional
  KernelApplies applies = nullptr;  // optional: nullptr means always
  int preference = 0;               // higher is chosen first when it applies
  // Which layouts run() accepts on the op's rank-4 activation operands and
  // output (kernels/layout_assignment.hpp decides each tensor's layout).
  LayoutSupport layouts = LayoutSupport::NchwOnly;
  // Whether the compile report says why this variant did not apply even when
  // another fast variant was chosen instead: for paths the user can unlock
  // (e.g. sparse kernels, by pruning further). Otherwise only a fall-back to
  // the reference is explained, so alternatives for other op forms (a
  // depthwise kernel on a dense conv) are not listed on every op.
  bool report_when_skipped = false;
  // An 8-bit weight kernel (SparTA §3.3 bit rounding): why it did not apply
  // is reported on every op whose weight the user annotated 8 bits or fewer.
  bool serves_8bit_weights = false;
};

// The variant (op type, name), or nullptr when there is none.
const TileKernelVariant* find_tile_kernel_variant(graph::OpType type, std::string_view name);

// The kernel for (op type, variant name), or nullptr when there is none.
TileKernel find_tile_kernel(graph::OpType type, std::string_view variant);

// Every variant registered for an op type, the reference first.
std::vector<std::string> tile_kernel_variants(graph::OpType type);

}  // namespace tessera::kernels
