#pragma once
// The contract between the scheduler's nodes and the kernels: a tile kernel
// computes exactly `region` of its operator's output, reading whatever parts
// of its inputs the operator's dependency function names, and nothing else.
#include <cstddef>
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
};

using TileKernel = void (*)(const TileArgs&);

// The kernel for (op type, variant name), or nullptr when there is none.
TileKernel find_tile_kernel(graph::OpType type, std::string_view variant);

// Every variant registered for an op type, the reference first.
std::vector<std::string> tile_kernel_variants(graph::OpType type);

}  // namespace tessera::kernels
