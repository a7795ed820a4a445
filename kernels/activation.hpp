#pragma once
// The fused activation epilogue (graph::Activation) as every kernel variant
// applies it, element by element after the bias, so fused and unfused graphs
// compute the same values.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "graph/operator.hpp"

namespace tessera::kernels {

// ONNX Gelu, approximate = "none": 0.5 x (1 + erf(x / sqrt(2))).
inline float gelu_erf(float x) {
  constexpr float kSqrtHalf = 0.7071067811865476f;
  return 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
}

// ONNX Gelu, approximate = "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

inline float activate(graph::Activation a, float x, float clip_min, float clip_max,
                      float leaky_alpha) {
  switch (a) {
    case graph::Activation::None:
      return x;
    case graph::Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case graph::Activation::Clip:
      return std::min(std::max(x, clip_min), clip_max);
    case graph::Activation::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case graph::Activation::Gelu:
      return gelu_erf(x);
    case graph::Activation::GeluTanh:
      return gelu_tanh(x);
    case graph::Activation::Silu:
      return x * (1.0f / (1.0f + std::exp(-x)));  // as Mul(x, Sigmoid(x)) rounds
    case graph::Activation::LeakyRelu:
      return x >= 0.0f ? x : leaky_alpha * x;  // as the LeakyRelu op
  }
  return x;
}

// Applies the op's fused activation to n contiguous outputs.
inline void apply_activation(const graph::OpAttributes& attrs, float* values, int64_t n) {
  if (attrs.activation == graph::Activation::None) return;
  for (int64_t i = 0; i < n; ++i)
    values[i] = activate(attrs.activation, values[i], attrs.clip_min, attrs.clip_max,
                         attrs.leaky_relu_alpha);
}

}  // namespace tessera::kernels
