#pragma once
// One operator of the graph: its type, attributes and tensor operands.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/op_type.hpp"

namespace tessera::graph {

// Attributes of every supported operator, normalised by the importer so that
// kernels never see ONNX defaults or optional forms:
//  - Conv/MaxPool/AveragePool: kernel_shape, strides, dilations have one entry
//    per spatial dim; pads has 2 × spatial entries (all begins, then all ends),
//    auto_pad already resolved into explicit pads.
//  - ConvTranspose (2-D): X [N, C, H, W], W [C, M / group, kh, kw], optional
//    B [M]; the same attributes as Conv, input pixel i feeding output pixels
//    i·stride − pad_begin + k·dilation. output_padding and output_shape are
//    resolved into the pads: an end pad lowered by output_padding (it may go
//    negative: output rows no input reaches, holding the bias).
//  - Clip: clip_min/clip_max always set (±inf when absent).
//  - Gemm: alpha, beta, trans_a, trans_b. C (if any) is input 2 and
//    broadcastable to [M, N].
//  - Concat, Softmax, Flatten: axis non-negative. Softmax before opset 13
//    normalises over all dims [axis, rank) jointly: softmax_coerce_2d is set.
//  - Softmax with a fused scale and mask (graph/fuse_softmax_input.hpp):
//    softmax(alpha * X + M) along the last axis; M (input 1, optional)
//    broadcasts to X. alpha is 1 and M absent as imported.
//  - FusedAttention (graph/fuse_attention.hpp): inputs Q [..., M, D], KT
//    [..., D, S], V [..., S, DV] (the same leading dims) and an optional
//    mask broadcasting to [..., M, S]; output softmax(alpha * (Q · KT) +
//    mask) · V [..., M, DV], the softmax along the last axis, rounded as
//    the MatMul, the fused Softmax and the MatMul it replaced. With
//    nan_probabilities_to_zero, a NaN probability (a row of NaN or all -inf
//    inputs) counts as 0, as the Where(IsNaN(p), 0, p) it replaced did.
//  - Reshape and Flatten: new_shape is the resolved output shape (no 0 or -1);
//    the shape operand is dropped, the data is the only input.
//  - BatchNormalization (inference form): inputs X, scale, B, mean, var; epsilon.
//  - Conv, Gemm, MatMul: `activation` is an epilogue fused in by the compiler
//    (applied after the bias; Clip uses clip_min/clip_max, LeakyRelu
//    leaky_relu_alpha).
//  - MatMul with a fused bias (graph/fuse_matmul_bias.hpp): input 2 is a
//    constant [N] (N = B's columns) added to every output row before the
//    activation. Only 2-D B; ONNX's MatMul itself has two inputs.
//  - Transpose: perm has one entry per dim (ONNX's default, the reversed
//    dims, filled in); output dim i is input dim perm[i].
//  - Gather: axis non-negative. Indices are input 1 (an int64 arena tensor,
//    e.g. token ids) or, when the importer found them constant, `indices`
//    with shape `indices_shape` (input 1 absent). Negative indices count
//    from the end; out-of-range ones fail the run.
//  - Sub, Div, Pow: broadcasting like Add. Where: inputs (condition, X, Y),
//    all broadcasting; the condition is float32, non-zero meaning true (the
//    importer turns bool constants into 0/1 weights).
//  - Expand and Slice: new_shape is the resolved output shape. Slice: starts
//    and steps have one entry per input dim (untouched dims: start 0, step
//    1), starts already clamped: output index i of dim d reads input index
//    starts[d] + i * steps[d].
//  - ReduceMean and the other reductions (is_reduction()): axes
//    non-negative, sorted, unique (ONNX's "all axes" default filled in;
//    empty only for noop_with_empty_axes: each element reduced alone, so
//    ReduceL1 gives |x|); keepdims.
//  - LayerNormalization: inputs X, Scale, optional B, both of shape
//    X.shape[axis:]; axis non-negative; epsilon. Only output Y.
//  - Gelu: gelu_tanh selects approximate = "tanh".
//  - Conv with fused_residual: inputs X, W, B (always present), R; R has the
//    output's shape and is added after the bias, before the activation
//    (graph/fuse_residual.hpp). The same for MatMul (A, B, bias [N], R) and
//    Gemm (A, B, C, R).
//  - Conv with fused_input_scale (1x1, stride 1, no padding, group 1):
//    inputs X, W, B (always present), [R,] S; S is [N, C, 1, 1] or [1, C, 1,
//    1], and the conv reads X[n, c, h, w] * S[n, c, 0, 0] (a squeeze-and-
//    excitation Mul, graph/fuse_input_scale.hpp).
//  - Conv with fused_expand (depthwise: group == C == OC): inputs X, W, B
//    (always present), [R,] EW, EB; EW is [C, Cin, 1, 1] and EB [C], X has
//    Cin channels, and the depthwise conv reads
//    expand_activation(Conv1x1(X; EW, EB)) instead of X: the 1x1 expansion
//    of an inverted residual block (graph/fuse_expand_depthwise.hpp).
//  - LeakyRelu: alpha. HardSigmoid: max(0, min(1, alpha x + beta)).
//    HardSwish: x * max(0, min(1, x / 6 + 1 / 2)). Max, Min: two operands,
//    broadcasting like Add (the importer chains longer lists).
//  - Pad: pads has 2 x rank entries (all begins, then all ends; negative
//    crops); pad_mode; pad_value for PadMode::Constant. Output index i of
//    dim d reads input index i - pads[d] (reflected or clamped into the
//    input by Reflect or Edge; none, giving pad_value, for Constant).
//  - Resize: new_shape is the output shape; scales has one entry per dim
//    (the given scale, or output / input when sizes were given), used by
//    the coordinate transformation; resize_mode, coordinate_mode and
//    nearest_mode as ONNX's attributes (graph/resize_coords.hpp).
//  - Sin, Cos, Floor, Ceil, Round (half to even), Sign: one float32 input.
//  - CumSum: output element i along `axis` is the sum of input elements
//    0..i (inclusive, forward; float, in order).
//  - ToIndex: a float32 input of integer values to an int64 output (run-time
//    Gather indices; the importer's int64 arithmetic runs in float32, exact
//    to 2^24); a value that is not an integer within ±2^24 fails the run.
//  - Equal, Less, LessOrEqual, Greater, GreaterOrEqual: two float32
//    operands broadcasting like Add; 1 where the relation holds, else 0
//    (Tessera's run-time bools, as Where reads them).
//  - Cast: input 0 is an int64 arena tensor, the output float32: the value,
//    or with cast_to_bool 1 where it is non-zero and 0 elsewhere (ONNX's
//    cast to BOOL; Tessera's run-time bools are float 0/1, as Where reads).
// An elementwise activation fused into the op that produces its input.
// Values are stored in `.tess` files: append, never renumber.
// Gelu and GeluTanh are ONNX Gelu with approximate = "none" / "tanh".
enum class Activation : uint8_t {
  None = 0,
  Relu = 1,
  Clip = 2,
  Sigmoid = 3,
  Gelu = 4,
  GeluTanh = 5,
  Silu = 6,       // x * sigmoid(x)
  LeakyRelu = 7,  // x >= 0 ? x : leaky_relu_alpha * x
};
inline constexpr Activation kLastActivation = Activation::LeakyRelu;

// Pad's mode (ONNX "constant", "reflect", "edge"). Stored in `.tess` files.
enum class PadMode : uint8_t { Constant = 0, Reflect = 1, Edge = 2 };
inline constexpr PadMode kLastPadMode = PadMode::Edge;

// Resize's mode, coordinate_transformation_mode and nearest_mode. Stored in
// `.tess` files: append, never renumber.
enum class ResizeMode : uint8_t { Nearest = 0, Linear = 1 };
inline constexpr ResizeMode kLastResizeMode = ResizeMode::Linear;
enum class CoordinateMode : uint8_t {
  HalfPixel = 0,
  HalfPixelSymmetric = 1,
  PytorchHalfPixel = 2,
  AlignCorners = 3,
  Asymmetric = 4,
};
inline constexpr CoordinateMode kLastCoordinateMode = CoordinateMode::Asymmetric;
enum class NearestMode : uint8_t { RoundPreferFloor = 0, RoundPreferCeil = 1, Floor = 2, Ceil = 3 };
inline constexpr NearestMode kLastNearestMode = NearestMode::Ceil;

struct OpAttributes {
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads;
  std::vector<int64_t> dilations;
  int64_t group = 1;
  int64_t axis = 0;
  float alpha = 1.0f;
  float beta = 1.0f;
  bool trans_a = false;
  bool trans_b = false;
  float clip_min = -std::numeric_limits<float>::infinity();
  float clip_max = std::numeric_limits<float>::infinity();
  bool count_include_pad = false;
  bool ceil_mode = false;
  bool softmax_coerce_2d = false;
  float epsilon = 1e-5f;
  std::vector<int64_t> new_shape;
  Activation activation = Activation::None;
  std::vector<int64_t> perm;
  std::vector<int64_t> indices;
  std::vector<int64_t> indices_shape;
  std::vector<int64_t> starts;
  std::vector<int64_t> steps;
  std::vector<int64_t> axes;
  bool keepdims = true;
  bool gelu_tanh = false;
  bool fused_residual = false;
  bool fused_input_scale = false;
  // fused_expand: the 1x1 expansion's own activation and Clip bounds.
  bool fused_expand = false;
  Activation expand_activation = Activation::None;
  float expand_clip_min = -std::numeric_limits<float>::infinity();
  float expand_clip_max = std::numeric_limits<float>::infinity();
  PadMode pad_mode = PadMode::Constant;
  float pad_value = 0.0f;
  ResizeMode resize_mode = ResizeMode::Nearest;
  CoordinateMode coordinate_mode = CoordinateMode::HalfPixel;
  NearestMode nearest_mode = NearestMode::RoundPreferFloor;
  std::vector<float> scales;
  // The slope of a fused Activation::LeakyRelu (the LeakyRelu op's own is
  // `alpha`, which Gemm uses for its product scale).
  float leaky_relu_alpha = 0.01f;
  // The TeSA bit width of the op's constant weight (input 1), from the
  // user's annotation (SparTA §3.3 bit rounding): <= 8 lets int8 kernels
  // apply. Set by the compiler; 32 = float32.
  int32_t weight_bits = 32;
  bool cast_to_bool = false;
  // FusedAttention: a NaN probability counts as 0 (graph/fuse_attention.hpp).
  bool nan_probabilities_to_zero = false;

  bool operator==(const OpAttributes&) const = default;
};

struct Operator {
  std::string name;  // the ONNX node name (or a generated one), for errors and reports
  OpType type = OpType::Relu;
  OpAttributes attrs;
  std::vector<int32_t> inputs;       // tensor indices; weights are tensors too
  std::vector<int32_t> outputs;      // tensor indices; every supported op has one output
  std::string kernel = "reference";  // kernel variant chosen by the compiler
};

// How many inputs a Conv has: X, W and an optional B; with a fused residual
// (input 3), a fused input scale (last) or a fused expansion (the last two),
// B and each of them, no fewer.
struct InputCount {
  size_t min = 0, max = 0;
};
inline InputCount conv_input_count(const OpAttributes& a) {
  const size_t fused =
      (a.fused_residual ? 1 : 0) + (a.fused_input_scale ? 1 : 0) + (a.fused_expand ? 2 : 0);
  return fused > 0 ? InputCount{3 + fused, 3 + fused} : InputCount{2, 3};
}
// A fused expansion's weight EW [C, Cin, 1, 1] and bias EB [C]: the last
// two inputs.
inline size_t expand_weight_input(const OpAttributes& a) {
  return conv_input_count(a).max - 2;
}

}  // namespace tessera::graph
