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

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"

namespace tessera::kernels {

struct ConstTensorView {
  const float* data = nullptr;  // row-major, dense
  const graph::Shape* shape = nullptr;
};

struct TensorView {
  float* data = nullptr;  // the whole output tensor (row-major, dense)
  const graph::Shape* shape = nullptr;
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

struct TileKernelVariant {
  graph::OpType type;
  std::string_view name;  // stored in .tess files: never rename
  TileKernel run;
  PrepareKernel prepare = nullptr;  // optional
  KernelApplies applies = nullptr;  // optional: nullptr means always
  int preference = 0;               // higher is chosen first when it applies
};

// The variant (op type, name), or nullptr when there is none.
const TileKernelVariant* find_tile_kernel_variant(graph::OpType type, std::string_view name);

// The kernel for (op type, variant name), or nullptr when there is none.
TileKernel find_tile_kernel(graph::OpType type, std::string_view variant);

// Every variant registered for an op type, the reference first.
std::vector<std::string> tile_kernel_variants(graph::OpType type);

}  // namespace tessera::kernels
