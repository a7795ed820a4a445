#pragma once
// Element types of tensors. Activations are float32 in the walking skeleton;
// the enum already names the types later passes (int8 blocks, masks) need.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::graph {

enum class DType : uint8_t { Float32 = 0, Int64 = 1, Int32 = 2, Int8 = 3, UInt8 = 4, Bool = 5 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Int32:
      return 4;
    case DType::Int8:
      return 1;
    case DType::UInt8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Int64:
      return "int64";
    case DType::Int32:
      return "int32";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
  }
  return "unknown";
}

}  // namespace tessera::graph
