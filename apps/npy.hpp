#pragma once
// Reading and writing NumPy .npy files (format 1.0/2.0/3.0 read, 1.0
// written): float32, C order — the exchange format of `tessera run`.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::apps {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Throws tessera::Error naming the file and what is wrong with it
// (missing, not .npy, not float32, Fortran order, truncated).
NpyArray read_npy(const std::string& path);
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace tessera::apps
