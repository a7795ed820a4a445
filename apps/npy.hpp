#pragma once
// Reading and writing NumPy .npy files (format 1.0/2.0/3.0 read, 1.0
// written): float32 (and int64, read, for index inputs), C order — the
// exchange format of `tessera run`.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::apps {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;          // when dtype == "float32"
  std::vector<int64_t> int64_data;  // when dtype == "int64"
  std::string dtype = "float32";
  const void* bytes() const {
    return dtype == "int64" ? static_cast<const void*>(int64_data.data()) : data.data();
  }
};

// Throws tessera::Error naming the file and what is wrong with it
// (missing, not .npy, neither float32 nor int64, Fortran order, truncated).
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace tessera::apps
