#pragma once
// Shared by the runtime tests: a scratch folder, random data, and tensors
// for graphs built by hand in C++ (no ONNX).
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::test {

// A folder of this process's own under the system temp dir, removed when the
// process exits (each test binary asks for one prefix, from one thread).
inline std::filesystem::path temp_dir(const std::string& prefix) {
  struct RemovedAtExit {
    std::filesystem::path path;
    ~RemovedAtExit() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  };
  static std::map<std::string, RemovedAtExit> dirs;
  RemovedAtExit& dir = dirs[prefix];
  if (dir.path.empty())
    dir.path = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::create_directories(dir.path);
  return dir.path;
}

inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Appends a tensor (a weight when `weight` is non-empty); returns its index.
inline int32_t add_tensor(graph::Graph& graph, std::string name, graph::Shape shape,
                          std::vector<float> weight = {}) {
  graph::TensorInfo t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.is_weight = !weight.empty();
  t.weight = std::move(weight);
  graph.tensors.push_back(std::move(t));
  return static_cast<int32_t>(graph.tensors.size() - 1);
}

}  // namespace tessera::test
