#pragma once
// Tensors at the API boundary: row-major (C order), ONNX dim order. Outputs
// are float32; inputs float32, or int64 where the model takes indices (the
// token ids of an embedding Gather).
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Borrowed input data; must stay valid until the run that reads it finishes.
struct TensorView {
  const void* data = nullptr;  // float or int64_t elements, as `dtype` says
  std::vector<int64_t> shape;
  std::string dtype = "float32";  // "float32" or "int64": must be the input's TensorSpec::dtype
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
