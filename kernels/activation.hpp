#pragma once
// The fused activation epilogue (graph::Activation) as every kernel variant
// applies it, element by element after the bias, so fused and unfused graphs
// compute the same values.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "graph/operator.hpp"

namespace tessera::kernels {

inline float activate(graph::Activation a, float x, float clip_min, float clip_max) {
  switch (a) {
    case graph::Activation::None:
      return x;
    case graph::Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case graph::Activation::Clip:
      return std::min(std::max(x, clip_min), clip_max);
    case graph::Activation::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
  }
  return x;
}

// Applies the op's fused activation to n contiguous outputs.
inline void apply_activation(const graph::OpAttributes& attrs, float* values, int64_t n) {
  if (attrs.activation == graph::Activation::None) return;
  for (int64_t i = 0; i < n; ++i)
    values[i] = activate(attrs.activation, values[i], attrs.clip_min, attrs.clip_max);
}

}  // namespace tessera::kernels
