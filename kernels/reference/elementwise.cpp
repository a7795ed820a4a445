// Elementwise reference kernels: Relu, Sigmoid, Clip, Sqrt, Erf, Tanh, Gelu
// (same shape in and out); Add, Mul, Sub, Div, Pow and Where with
// multidirectional (numpy) broadcasting. Relu, Sigmoid, Clip, Add and Mul
// index every operand through its own layout's strides, so any mix of NCHW
// and NHWC operands works (graph/layout.hpp).
#include <algorithm>
#include <cmath>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

// `In` is the input's element type: float, or int64_t for Cast (whose
// ConstTensorView points at an int64 arena tensor's bytes).
template <class In = float, class Fn>
void unary_tile(const TileArgs& args, Fn&& fn) {
  check_tile_args(args, 1, 1);
  const graph::Shape& out_shape = *args.output.shape;
  if (*args.inputs[0].shape != out_shape)
    fail(args, "input shape " + graph::shape_to_string(*args.inputs[0].shape) +
                   " differs from output shape " + graph::shape_to_string(out_shape));
  const std::vector<int64_t> out_strides = layout_strides_of(args.output);
  const std::vector<int64_t> in_strides = layout_strides_of(args.inputs[0]);
  const int64_t out_step = out_shape.empty() ? 0 : out_strides.back();
  const int64_t in_step = out_shape.empty() ? 0 : in_strides.back();
  const auto* in = reinterpret_cast<const In*>(args.inputs[0].data);
  float* out = args.output.data;
  for_each_row<2>(*args.region, {out_strides.data(), in_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 2>& offsets, int64_t length) {
                    const In* src = in + offsets[1];
                    float* dst = out + offsets[0];
                    if (out_step == 1 && in_step == 1) {
                      for (int64_t i = 0; i < length; ++i) dst[i] = fn(src[i]);
                    } else {
                      for (int64_t i = 0; i < length; ++i) dst[i * out_step] = fn(src[i * in_step]);
                    }
                  });
}

template <class Fn>
void binary_tile(const TileArgs& args, Fn&& fn) {
  check_tile_args(args, 2, 2);
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Shape& a_shape = *args.inputs[0].shape;
  const graph::Shape& b_shape = *args.inputs[1].shape;
  if (a_shape.size() > out_shape.size() || b_shape.size() > out_shape.size())
    fail(args, "input rank exceeds output rank");
  for (const graph::Shape* s : {&a_shape, &b_shape}) {
    const size_t shift = out_shape.size() - s->size();
    for (size_t d = 0; d < s->size(); ++d)
      if ((*s)[d] != 1 && (*s)[d] != out_shape[d + shift])
        fail(args, "input " + graph::shape_to_string(*s) + " does not broadcast to output " +
                       graph::shape_to_string(out_shape));
  }
  const std::vector<int64_t> out_strides = layout_strides_of(args.output);
  const std::vector<int64_t> a_strides =
      broadcast_strides(a_shape, args.inputs[0].layout, out_shape);
  const std::vector<int64_t> b_strides =
      broadcast_strides(b_shape, args.inputs[1].layout, out_shape);
  const int64_t out_step = out_shape.empty() ? 0 : out_strides.back();
  const int64_t a_step = out_shape.empty() ? 0 : a_strides.back();
  const int64_t b_step = out_shape.empty() ? 0 : b_strides.back();
  const float* a = args.inputs[0].data;
  const float* b = args.inputs[1].data;
  float* out = args.output.data;
  for_each_row<3>(*args.region, {out_strides.data(), a_strides.data(), b_strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 3>& offsets, int64_t length) {
                    float* dst = out + offsets[0];
                    const float* pa = a + offsets[1];
                    const float* pb = b + offsets[2];
                    // The common cases get stride-free loops the compiler can vectorise.
                    if (out_step != 1) {
                      for (int64_t i = 0; i < length; ++i)
                        dst[i * out_step] = fn(pa[i * a_step], pb[i * b_step]);
                    } else if (a_step == 1 && b_step == 1) {
                      for (int64_t i = 0; i < length; ++i) dst[i] = fn(pa[i], pb[i]);
                    } else if (a_step == 1 && b_step == 0) {
                      const float vb = *pb;
                      for (int64_t i = 0; i < length; ++i) dst[i] = fn(pa[i], vb);
                    } else if (a_step == 0 && b_step == 1) {
                      const float va = *pa;
                      for (int64_t i = 0; i < length; ++i) dst[i] = fn(va, pb[i]);
                    } else {
                      for (int64_t i = 0; i < length; ++i)
                        dst[i] = fn(pa[i * a_step], pb[i * b_step]);
                    }
                  });
}

// Checks that every input broadcasts to the output (ranks right-aligned).
void check_broadcast(const TileArgs& args) {
  const graph::Shape& out_shape = *args.output.shape;
  for (size_t i = 0; i < args.input_count; ++i) {
    const graph::Shape& s = *args.inputs[i].shape;
    if (!broadcasts_to(s, out_shape))
      fail(args, "input " + graph::shape_to_string(s) + " does not broadcast to output " +
                     graph::shape_to_string(out_shape));
  }
}

}  // namespace

void relu(const TileArgs& args) {
  unary_tile(args, [](float x) { return x > 0.0f ? x : 0.0f; });
}

void sigmoid(const TileArgs& args) {
  unary_tile(args, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}

void clip(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const float lo = args.op->attrs.clip_min;
  const float hi = args.op->attrs.clip_max;
  // ONNX Runtime: min(max(x, lo), hi), so hi wins when lo > hi.
  unary_tile(args, [lo, hi](float x) { return std::min(std::max(x, lo), hi); });
}

void add(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return x + y; });
}

void mul(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return x * y; });
}

}  // namespace tessera::kernels::reference

namespace tessera::kernels::reference {

void sub(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return x - y; });
}

void div(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return x / y; });
}

void pow(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return std::pow(x, y); });
}

void sqrt(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::sqrt(x); });
}

void erf(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::erf(x); });
}

void tanh(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::tanh(x); });
}

void gelu(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  if (args.op->attrs.gelu_tanh) {
    // approximate = "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    unary_tile(args, [](float x) {
      return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    });
  } else {
    constexpr float kSqrtHalf = 0.7071067811865476f;
    unary_tile(args, [](float x) { return 0.5f * x * (1.0f + std::erf(x * kSqrtHalf)); });
  }
}

void where(const TileArgs& args) {
  check_tile_args(args, 3, 3);
  check_broadcast(args);
  const graph::Shape& out_shape = *args.output.shape;
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const std::vector<int64_t> c_strides = broadcast_strides(*args.inputs[0].shape, out_shape);
  const std::vector<int64_t> x_strides = broadcast_strides(*args.inputs[1].shape, out_shape);
  const std::vector<int64_t> y_strides = broadcast_strides(*args.inputs[2].shape, out_shape);
  // Step along the last dim (none for a rank-0 output).
  auto last = [](const std::vector<int64_t>& v) { return v.empty() ? int64_t{0} : v.back(); };
  const int64_t c_step = last(c_strides), x_step = last(x_strides), y_step = last(y_strides);
  const float* c = args.inputs[0].data;
  const float* x = args.inputs[1].data;
  const float* y = args.inputs[2].data;
  float* out = args.output.data;
  for_each_row<4>(
      *args.region, {out_strides.data(), c_strides.data(), x_strides.data(), y_strides.data()},
      [&](const int64_t*, const std::array<int64_t, 4>& offsets, int64_t length) {
        for (int64_t i = 0; i < length; ++i)
          out[offsets[0] + i] = c[offsets[1] + i * c_step] != 0.0f ? x[offsets[2] + i * x_step]
                                                                   : y[offsets[3] + i * y_step];
      });
}

}  // namespace tessera::kernels::reference

namespace tessera::kernels::reference {

void leaky_relu(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const float alpha = args.op->attrs.alpha;
  unary_tile(args, [alpha](float x) { return x >= 0.0f ? x : alpha * x; });
}

void hard_sigmoid(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const float alpha = args.op->attrs.alpha, beta = args.op->attrs.beta;
  unary_tile(args,
             [alpha, beta](float x) { return std::max(0.0f, std::min(1.0f, alpha * x + beta)); });
}

void hard_swish(const TileArgs& args) {
  unary_tile(args, [](float x) { return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f)); });
}

void neg(const TileArgs& args) {
  unary_tile(args, [](float x) { return -x; });
}

void is_nan(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::isnan(x) ? 1.0f : 0.0f; });
}

void sin(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::sin(x); });
}

void cos(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::cos(x); });
}

void floor(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::floor(x); });
}

void ceil(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::ceil(x); });
}

void round(const TileArgs& args) {
  // Half to even (ONNX Round), whatever the caller's rounding mode.
  unary_tile(args, [](float x) {
    const float r = std::round(x);  // half away from zero
    return std::fabs(x - std::trunc(x)) == 0.5f ? 2.0f * std::round(x / 2.0f) : r;
  });
}

void sign(const TileArgs& args) {
  unary_tile(args,
             [](float x) { return std::isnan(x) ? x : static_cast<float>((x > 0) - (x < 0)); });
}

void to_index(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  const graph::Shape& shape = *args.output.shape;
  if (*args.inputs[0].shape != shape) fail(args, "input and output shapes differ");
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  // The output is an int64 tensor (the TensorView points at its bytes).
  auto* out = reinterpret_cast<int64_t*>(args.output.data);
  const float* in = args.inputs[0].data;
  constexpr float kExact = 16777216.0f;  // 2^24: every integer up to it is exact
  for_each_row<1>(*args.region, {strides.data()},
                  [&](const int64_t*, const std::array<int64_t, 1>& at, int64_t length) {
                    for (int64_t i = at[0]; i < at[0] + length; ++i) {
                      const float v = in[i];
                      if (!(std::fabs(v) <= kExact) || v != std::trunc(v))
                        fail(args, "index value " + std::to_string(v) +
                                       " is not an integer within +-2^24 (Tessera computes "
                                       "integer arithmetic on int64 inputs in float32)");
                      out[i] = static_cast<int64_t>(v);
                    }
                  });
}

void cast(const TileArgs& args) {
  if (args.op->attrs.cast_to_bool)
    unary_tile<int64_t>(args, [](int64_t x) { return x != 0 ? 1.0f : 0.0f; });
  else
    unary_tile<int64_t>(args, [](int64_t x) { return static_cast<float>(x); });
}

void exp(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::exp(x); });
}

void log(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::log(x); });
}

void reciprocal(const TileArgs& args) {
  unary_tile(args, [](float x) { return 1.0f / x; });
}

void abs(const TileArgs& args) {
  unary_tile(args, [](float x) { return std::fabs(x); });
}

void softplus(const TileArgs& args) {
  // log(1 + e^x) without overflow for large x: x + log1p(e^-x).
  unary_tile(args, [](float x) {
    return x > 0.0f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  });
}

void max(const TileArgs& args) {
  // ONNX Runtime propagates NaN from either operand; std::max would not.
  binary_tile(args, [](float x, float y) { return std::isnan(x) || x > y ? x : y; });
}

void min(const TileArgs& args) {
  binary_tile(args, [](float x, float y) { return std::isnan(x) || x < y ? x : y; });
}

void compare(const TileArgs& args) {
  const auto bit = [](bool b) { return b ? 1.0f : 0.0f; };
  switch (args.op->type) {
    case graph::OpType::Equal:
      return binary_tile(args, [&](float x, float y) { return bit(x == y); });
    case graph::OpType::Less:
      return binary_tile(args, [&](float x, float y) { return bit(x < y); });
    case graph::OpType::LessOrEqual:
      return binary_tile(args, [&](float x, float y) { return bit(x <= y); });
    case graph::OpType::Greater:
      return binary_tile(args, [&](float x, float y) { return bit(x > y); });
    case graph::OpType::GreaterOrEqual:
      return binary_tile(args, [&](float x, float y) { return bit(x >= y); });
    default:
      fail(args, "not a comparison");
  }
}

}  // namespace tessera::kernels::reference
