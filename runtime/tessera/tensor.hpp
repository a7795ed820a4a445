#pragma once
// Tensors at the API boundary: float32, row-major (C order), ONNX dim order.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Borrowed input data; must stay valid until the run that reads it finishes.
struct TensorView {
  const float* data = nullptr;
  std::vector<int64_t> shape;
};

// Owned output data.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// A model input's or output's declared name and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "float32";
};

}  // namespace tessera
