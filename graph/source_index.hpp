#pragma once
// Per-dim source index maps of Pad and Resize: which input indices one
// output index reads along one dim. Both ops are separable (an output
// element reads the product of its per-dim sources), so the reference
// kernels, the dependency functions and the tests share these maps and
// stay consistent by construction. Arithmetic follows ONNX Runtime's
// (float coordinates, as its Resize computes them).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "graph/operator.hpp"

namespace tessera::graph {

// The input index output index `o` reads along a dim of `size` elements
// padded by `pad_begin` in front, or -1 when it reads nothing (constant
// padding). Reflect repeats the mirror image when the pad exceeds the dim
// (numpy's rule, which ONNX's reference follows).
inline int64_t pad_source_index(int64_t o, int64_t pad_begin, int64_t size, PadMode mode) {
  const int64_t i = o - pad_begin;
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Edge:
      return i < 0 ? 0 : size - 1;
    case PadMode::Reflect: {
      if (size == 1) return 0;
      const int64_t period = 2 * (size - 1);
      int64_t m = i % period;
      if (m < 0) m += period;
      return m < size ? m : period - m;
    }
  }
  return -1;
}

// ONNX's coordinate_transformation_mode: the input coordinate of output
// index `x` along a dim resized from `in_len` to `out_len` by `scale`.
inline float resize_source_coordinate(int64_t x, float scale, int64_t in_len, int64_t out_len,
                                      CoordinateMode mode) {
  const auto xf = static_cast<float>(x);
  switch (mode) {
    case CoordinateMode::HalfPixel:
      return (xf + 0.5f) / scale - 0.5f;
    case CoordinateMode::HalfPixelSymmetric: {
      const float adjustment = static_cast<float>(out_len) / (scale * static_cast<float>(in_len));
      const float center = static_cast<float>(in_len) / 2.0f;
      const float offset = center * (1.0f - adjustment);
      return offset + (xf + 0.5f) / scale - 0.5f;
    }
    case CoordinateMode::PytorchHalfPixel:
      return out_len > 1 ? (xf + 0.5f) / scale - 0.5f : 0.0f;
    case CoordinateMode::AlignCorners:
      return out_len == 1 ? 0.0f
                          : xf * static_cast<float>(in_len - 1) / static_cast<float>(out_len - 1);
    case CoordinateMode::Asymmetric:
      return xf / scale;
  }
  return 0.0f;
}

// The taps one output index reads along one dim: `lo` with weight
// 1 - hi_weight and `hi` with hi_weight; hi == lo when only one is read.
struct ResizeTaps {
  int64_t lo = 0;
  int64_t hi = 0;
  float hi_weight = 0.0f;
};

inline ResizeTaps resize_taps(const OpAttributes& a, size_t dim, int64_t x, int64_t in_len,
                              int64_t out_len) {
  const float scale = dim < a.scales.size() ? a.scales[dim] : 1.0f;
  const float c = resize_source_coordinate(x, scale, in_len, out_len, a.coordinate_mode);
  ResizeTaps t;
  if (a.resize_mode == ResizeMode::Nearest) {
    float r = 0.0f;
    switch (a.nearest_mode) {
      case NearestMode::RoundPreferFloor:
        r = c == static_cast<float>(static_cast<int64_t>(c)) + 0.5f ? std::floor(c) : std::round(c);
        break;
      case NearestMode::RoundPreferCeil:
        r = std::round(c);
        break;
      case NearestMode::Floor:
        r = std::floor(c);
        break;
      case NearestMode::Ceil:
        r = std::ceil(c);
        break;
    }
    t.lo = t.hi = std::clamp<int64_t>(static_cast<int64_t>(r), 0, in_len - 1);
    return t;
  }
  // Linear: the coordinate clamped into the input, then its two neighbours.
  const float clamped = std::clamp(c, 0.0f, static_cast<float>(in_len - 1));
  t.lo = std::min<int64_t>(static_cast<int64_t>(clamped), in_len - 1);
  t.hi = std::min<int64_t>(t.lo + 1, in_len - 1);
  t.hi_weight = clamped - static_cast<float>(t.lo);
  if (t.hi == t.lo || t.hi_weight == 0.0f) {
    t.hi = t.lo;
    t.hi_weight = 0.0f;
  }
  return t;
}

}  // namespace tessera::graph
