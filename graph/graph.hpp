#pragma once
// The operator graph the compiler works on: tensors (activations and
// weights), operators in topological order, graph inputs and outputs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/dtype.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

struct TensorInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  bool is_weight = false;     // constant data known at compile time
  std::vector<float> weight;  // row-major data when is_weight (float32 only for now)
};

struct Graph {
  std::vector<TensorInfo> tensors;
  std::vector<Operator> ops;  // topologically sorted
  std::vector<int32_t> inputs;
  std::vector<int32_t> outputs;
  int64_t opset = 0;

  std::optional<int32_t> find_tensor(const std::string& name) const {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) return static_cast<int32_t>(i);
    return std::nullopt;
  }
};

}  // namespace tessera::graph
