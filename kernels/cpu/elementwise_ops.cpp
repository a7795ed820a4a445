// "cpu.binary" (Add, Mul) and "cpu.unary" (Relu, Clip, Sigmoid): the
// reference walks the tile row by row along the last dim through a generic
// odometer; these merge the trailing dims the tile covers fully into one
// contiguous span, so a [1,64,56,56] tile is one loop of 200704 elements,
// not 3584 of 56. The span loops are compiled for AVX-512, AVX2 and the
// baseline (GCC target_clones, as in conv_depthwise.cpp). Each element is
// the reference's own expression, so the results are bitwise identical.
// NHWC (LayoutSupport::Uniform: every operand with H·W > 1 and the output in
// one layout): shapes and the region are permuted into physical order
// (N, H, W, C) and walked the same way, so a conv-style tile is one span; a
// per-channel operand then varies along the last physical dim and is read
// as a vector.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/simple_ops.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TESSERA_SIMPLE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_SIMPLE_CLONES
#endif

[[noreturn]] void fail(const TileArgs& args, std::string_view variant, const std::string& what) {
  fail_op(variant, args.op, what);
}

void check_args(const TileArgs& args, std::string_view variant, size_t inputs) {
  if (!args.op || !args.region || !args.output.data || !args.output.shape ||
      args.input_count != inputs)
    fail(args, variant, "missing operator, region, output or inputs");
  for (size_t i = 0; i < inputs; ++i)
    if (!args.inputs[i].data || !args.inputs[i].shape)
      fail(args, variant, "input " + std::to_string(i) + " has no data or shape");
  if (!graph::region_inside(*args.region, *args.output.shape))
    fail(args, variant,
         "region " + graph::region_to_string(*args.region) + " is not inside the output " +
             graph::shape_to_string(*args.output.shape));
}

// Calls fn(index, offset, length) once per contiguous span of `region` in a
// dense tensor of `shape`: a span merges dims [s, rank) where the region
// covers dims s+1.. fully, with s >= min_split (so index[0..min_split) is
// fixed within a span). index holds the span's first multi-index (dims < s
// only are meaningful). A rank-0 region is one span of one element.
template <class Fn>
void for_each_span(const graph::Region& region, const graph::Shape& shape, size_t min_split,
                   Fn&& fn) {
  const size_t rank = shape.size();
  if (rank == 0) {
    fn(static_cast<const int64_t*>(nullptr), int64_t{0}, int64_t{1});
    return;
  }
  if (region.empty()) return;
  size_t s = rank - 1;
  while (s > min_split && region.begin[s] == 0 && region.end[s] == shape[s]) --s;
  const std::vector<int64_t> strides = graph::shape_strides(shape);
  const int64_t length = region.extent(s) * strides[s];
  std::vector<int64_t> index = region.begin;
  for (;;) {
    int64_t offset = 0;
    for (size_t d = 0; d <= s; ++d) offset += index[d] * strides[d];
    fn(static_cast<const int64_t*>(index.data()), offset, length);
    size_t d = s;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < region.end[d]) break;
      index[d] = region.begin[d];
    }
  }
}

// ---- binary ----------------------------------------------------------------

// How one operand of a binary op maps onto the output (ranks right-aligned).
struct OperandLayout {
  enum Kind { kFull, kScalar, kChannel, kTrailing, kOther } kind = kOther;
  // kChannel: the one output dim the operand varies along. kTrailing: the
  // first dim of the output's suffix the operand equals (all 1s before it).
  size_t dim = 0;
};

// `trailing`: an operand that is leading 1s followed by exactly the output's
// trailing dims [t, rank) (a bias [768] against [1,128,768], an attention
// mask [1,1,1,128] against [1,12,128,128]) counts as kTrailing: read as a
// vector repeating with period numel(out[t..]). Off, it is kOther (unless it
// is a kChannel). A single varying last dim is kTrailing, never kChannel.
OperandLayout operand_layout(const graph::Shape& in, const graph::Shape& out, bool trailing) {
  if (in.size() > out.size()) return {};
  const size_t shift = out.size() - in.size();
  std::vector<int64_t> aligned(out.size(), 1);
  for (size_t d = 0; d < in.size(); ++d) aligned[d + shift] = in[d];
  if (aligned == out) return {OperandLayout::kFull, 0};
  size_t varying = 0, dim = 0;
  for (size_t d = 0; d < out.size(); ++d) {
    if (aligned[d] == 1) continue;
    if (aligned[d] != out[d]) return {};  // does not broadcast
    ++varying;
    dim = d;
  }
  if (varying == 0) return {OperandLayout::kScalar, 0};
  if (varying == 1 && dim + 1 < out.size()) return {OperandLayout::kChannel, dim};
  if (!trailing) return {};
  // The longest suffix equal to the output's; before it, only 1s.
  size_t t = out.size();
  while (t > 0 && aligned[t - 1] == out[t - 1]) --t;
  for (size_t d = 0; d < t; ++d)
    if (aligned[d] != 1) return {};
  return {OperandLayout::kTrailing, t};
}

// ---- layouts ---------------------------------------------------------------

// NHWC's physical order of the logical NCHW dims.
constexpr size_t kNhwcOrder[4] = {0, 2, 3, 1};

// `shape` right-aligned to rank 4 (leading 1s), then put in physical NHWC order.
graph::Shape nhwc_physical(const graph::Shape& shape) {
  graph::Shape aligned(4, 1);
  for (size_t d = 0; d < shape.size(); ++d) aligned[4 - shape.size() + d] = shape[d];
  return {aligned[0], aligned[2], aligned[3], aligned[1]};
}

graph::Region nhwc_physical(const graph::Region& r) {
  graph::Region p{std::vector<int64_t>(4), std::vector<int64_t>(4)};
  for (size_t d = 0; d < 4; ++d) {
    p.begin[d] = r.begin[kNhwcOrder[d]];
    p.end[d] = r.end[kNhwcOrder[d]];
  }
  return p;
}

// Whether the operand's layout matters against a rank-4 output: H·W > 1
// once right-aligned (graph/layout.hpp). Others have the same bytes in
// either order.
bool material(const graph::Shape& shape) {
  int64_t hw = 1;
  for (size_t d = 0; d < shape.size() && d < 2; ++d) hw *= shape[shape.size() - 1 - d];
  return hw > 1;
}

// Whether the op runs in physical NHWC order: the output is a rank-4 NHWC
// tensor. Throws when an operand whose order matters is in the other layout.
bool runs_nhwc(const TileArgs& args, std::string_view variant) {
  const bool nhwc = args.output.shape->size() == 4 && args.output.layout == graph::Layout::NHWC;
  for (size_t i = 0; i < args.input_count; ++i) {
    const ConstTensorView& in = args.inputs[i];
    if (!material(*in.shape)) continue;
    const bool in_nhwc = in.shape->size() == 4 && in.layout == graph::Layout::NHWC;
    if (in_nhwc != nhwc)
      fail(args, variant,
           "input " + std::to_string(i) + " is " + (in_nhwc ? "NHWC" : "NCHW") +
               " but the output is " + (nhwc ? "NHWC" : "NCHW") +
               "; this kernel needs one layout for all (LayoutSupport::Uniform)");
  }
  return nhwc;
}

// The span loops, one per (op, which operands are scalars). No __restrict:
// the memory plan may run an elementwise op in place; GCC versions the loop
// on an overlap check instead.
#define TESSERA_BINARY_SPANS(NAME, EXPR)                                                      \
  TESSERA_SIMPLE_CLONES void NAME##_vv(const float* a, const float* b, float* y, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const float x0 = a[i], x1 = b[i];                                                       \
      y[i] = EXPR;                                                                            \
    }                                                                                         \
  }                                                                                           \
  TESSERA_SIMPLE_CLONES void NAME##_vs(const float* a, float x1, float* y, int64_t n) {       \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const float x0 = a[i];                                                                  \
      y[i] = EXPR;                                                                            \
    }                                                                                         \
  }                                                                                           \
  TESSERA_SIMPLE_CLONES void NAME##_sv(float x0, const float* b, float* y, int64_t n) {       \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const float x1 = b[i];                                                                  \
      y[i] = EXPR;                                                                            \
    }                                                                                         \
  }

TESSERA_BINARY_SPANS(add, x0 + x1)
TESSERA_BINARY_SPANS(mul, x0* x1)
TESSERA_BINARY_SPANS(sub, x0 - x1)
TESSERA_BINARY_SPANS(div, x0 / x1)
// ONNX Runtime propagates NaN from either operand (the reference's expression).
TESSERA_BINARY_SPANS(max, (x0 != x0 || x0 > x1) ? x0 : x1)
TESSERA_BINARY_SPANS(min, (x0 != x0 || x0 < x1) ? x0 : x1)
#undef TESSERA_BINARY_SPANS

struct BinarySpans {
  void (*vv)(const float*, const float*, float*, int64_t);
  void (*vs)(const float*, float, float*, int64_t);
  void (*sv)(float, const float*, float*, int64_t);

  // y[0, n) from operands that are each a vector along the span (a points at
  // its first element) or one value (a points at it).
  void run(const float* a, bool a_vector, const float* b, bool b_vector, float* y,
           int64_t n) const {
    if (a_vector && b_vector) {
      vv(a, b, y, n);
    } else if (a_vector) {
      vs(a, *b, y, n);
    } else if (b_vector) {
      sv(*a, b, y, n);
    } else {
      sv(*a, b, y, 1);
      std::fill(y + 1, y + n, y[0]);
    }
  }
};

constexpr std::string_view kBinary = "cpu.binary";

std::optional<BinarySpans> binary_spans(graph::OpType type) {
  switch (type) {
    case graph::OpType::Add:
      return BinarySpans{add_vv, add_vs, add_sv};
    case graph::OpType::Mul:
      return BinarySpans{mul_vv, mul_vs, mul_sv};
    case graph::OpType::Sub:
      return BinarySpans{sub_vv, sub_vs, sub_sv};
    case graph::OpType::Div:
      return BinarySpans{div_vv, div_vs, div_sv};
    case graph::OpType::Max:
      return BinarySpans{max_vv, max_vs, max_sv};
    case graph::OpType::Min:
      return BinarySpans{min_vv, min_vs, min_sv};
    default:
      return std::nullopt;
  }
}

// The output shape of the broadcast, or nullopt when the inputs do not
// broadcast (the compiler's shape inference checked it; hand-built ops may not).
std::optional<graph::Shape> broadcast_of(std::span<const ConstTensorView> inputs) {
  size_t rank = 0;
  for (const ConstTensorView& in : inputs) rank = std::max(rank, in.shape->size());
  graph::Shape out(rank, 1);
  for (const ConstTensorView& in : inputs) {
    const graph::Shape& s = *in.shape;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& o = out[d + rank - s.size()];
      if (s[d] == 1) continue;
      if (o != 1 && o != s[d]) return std::nullopt;
      o = s[d];
    }
  }
  return out;
}

// Why the variant cannot run the op (nullopt: it can). `trailing`: the
// cpu.binary_broadcast variant, which exists for the trailing-dims operands.
std::optional<std::string> binary_reason(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs, bool trailing) {
  const std::string_view name = trailing ? "cpu.binary_broadcast" : "cpu.binary";
  if (!binary_spans(op.type))
    return std::string(name) + " runs Add, Mul, Sub, Div, Max and Min only";
  if (inputs.size() != 2 || !inputs[0].shape || !inputs[1].shape)
    return std::string(name) + " needs two inputs with shapes";
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  const std::optional<graph::Shape> broadcast = broadcast_of(inputs);
  if (!broadcast) return std::string("the input shapes do not broadcast");
  const graph::Shape& out = *broadcast;
  bool any_trailing = false;
  for (const graph::Shape* s : {&a, &b}) {
    const OperandLayout l = operand_layout(*s, out, trailing);
    if (l.kind == OperandLayout::kOther)
      return "broadcast pattern " + graph::shape_to_string(*s) + " -> " +
             graph::shape_to_string(out) +
             (trailing ? " is not same-shape, scalar, one non-last dim or leading 1s then the "
                         "output's trailing dims: cpu.broadcast runs it"
                       : " is not same-shape, scalar or one non-last dim: "
                         "cpu.binary_broadcast or cpu.broadcast runs it");
    any_trailing = any_trailing || l.kind == OperandLayout::kTrailing;
  }
  if (trailing && !any_trailing) return std::string("no trailing-dims operand: cpu.binary runs it");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> binary_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  return binary_reason(op, inputs, false);
}

std::optional<std::string> binary_broadcast_applies(const graph::Operator& op,
                                                    std::span<const ConstTensorView> inputs) {
  return binary_reason(op, inputs, true);
}

void binary(const TileArgs& args) {
  check_args(args, kBinary, 2);
  const std::optional<BinarySpans> found = binary_spans(args.op->type);
  if (!found) fail(args, kBinary, "runs Add, Mul, Sub, Div, Max and Min only");
  const BinarySpans spans = *found;
  const bool nhwc = runs_nhwc(args, kBinary);
  // In NHWC, everything in physical order (applies() looked at logical shapes).
  const graph::Shape out = nhwc ? nhwc_physical(*args.output.shape) : *args.output.shape;
  const graph::Shape a_shape = nhwc ? nhwc_physical(*args.inputs[0].shape) : *args.inputs[0].shape;
  const graph::Shape b_shape = nhwc ? nhwc_physical(*args.inputs[1].shape) : *args.inputs[1].shape;
  const graph::Region region = nhwc ? nhwc_physical(*args.region) : *args.region;
  const OperandLayout la = operand_layout(a_shape, out, true);
  const OperandLayout lb = operand_layout(b_shape, out, true);
  for (const auto& [l, s] : {std::pair{la, &a_shape}, std::pair{lb, &b_shape}})
    if (l.kind == OperandLayout::kOther)
      fail(args, kBinary,
           "broadcast pattern " + graph::shape_to_string(*s) + " -> " +
               graph::shape_to_string(out) + (nhwc ? " (NHWC physical order)" : "") +
               " is not supported; the compiler should have chosen the reference");
  // A span must not cross a channel operand's dim, nor a trailing operand's
  // period (then the span lies inside one period).
  size_t min_split = 0;
  for (const OperandLayout& l : {la, lb}) {
    if (l.kind == OperandLayout::kChannel) min_split = std::max(min_split, l.dim + 1);
    if (l.kind == OperandLayout::kTrailing) min_split = std::max(min_split, l.dim);
  }
  const std::vector<int64_t> strides = graph::shape_strides(out);
  auto period_of = [&](const OperandLayout& l) {
    return l.kind == OperandLayout::kTrailing && !out.empty() ? strides[l.dim - 1] : int64_t{1};
  };
  const int64_t a_period = period_of(la), b_period = period_of(lb);
  const float* a = args.inputs[0].data;
  const float* b = args.inputs[1].data;
  float* y = args.output.data;
  // The operand's value for a span: the span's own elements (full), one
  // value (scalar, channel), or the span's part of the repeating vector
  // (trailing).
  auto is_vector = [](const OperandLayout& l) {
    return l.kind == OperandLayout::kFull || l.kind == OperandLayout::kTrailing;
  };
  auto vector_of = [](const OperandLayout& l, const float* data, int64_t offset, int64_t period) {
    return l.kind == OperandLayout::kFull ? data + offset : data + offset % period;
  };
  auto constant_of = [](const OperandLayout& l, const float* data, const int64_t* index) {
    return l.kind == OperandLayout::kChannel ? data + index[l.dim] : data;
  };
  const bool a_vector = is_vector(la), b_vector = is_vector(lb);
  for_each_span(region, out, min_split, [&](const int64_t* index, int64_t offset, int64_t length) {
    spans.run(a_vector ? vector_of(la, a, offset, a_period) : constant_of(la, a, index), a_vector,
              b_vector ? vector_of(lb, b, offset, b_period) : constant_of(lb, b, index), b_vector,
              y + offset, length);
  });
}

// ---- general broadcast -----------------------------------------------------

namespace {

constexpr std::string_view kBroadcast = "cpu.broadcast";

// Where's span loops, one per (condition, X, Y) being a vector (1) or one
// value (0) along the row; the literal strides fold, so each loop vectorises
// to a compare and a blend.
#define TESSERA_WHERE_SPAN(SC, SX, SY)                                                          \
  TESSERA_SIMPLE_CLONES void where_##SC##SX##SY(const float* c, const float* x, const float* y, \
                                                float* out, int64_t n) {                        \
    for (int64_t i = 0; i < n; ++i) out[i] = c[i * SC] != 0.0f ? x[i * SX] : y[i * SY];         \
  }
TESSERA_WHERE_SPAN(0, 0, 0)
TESSERA_WHERE_SPAN(0, 0, 1)
TESSERA_WHERE_SPAN(0, 1, 0)
TESSERA_WHERE_SPAN(0, 1, 1)
TESSERA_WHERE_SPAN(1, 0, 0)
TESSERA_WHERE_SPAN(1, 0, 1)
TESSERA_WHERE_SPAN(1, 1, 0)
TESSERA_WHERE_SPAN(1, 1, 1)
#undef TESSERA_WHERE_SPAN

using WhereSpan = void (*)(const float*, const float*, const float*, float*, int64_t);
// Indexed by condition * 4 + X * 2 + Y (1: a vector along the row).
constexpr WhereSpan kWhereSpans[8] = {where_000, where_001, where_010, where_011,
                                      where_100, where_101, where_110, where_111};

}  // namespace

std::optional<std::string> broadcast_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  const bool where = op.type == graph::OpType::Where;
  if (!where && !binary_spans(op.type))
    return std::string(kBroadcast) + " runs Add, Mul, Sub, Div, Max, Min and Where only";
  if (inputs.size() != (where ? 3u : 2u))
    return std::string(kBroadcast) + " needs " + (where ? "three" : "two") + " inputs";
  for (const ConstTensorView& in : inputs)
    if (!in.shape) return std::string(kBroadcast) + " needs the inputs' shapes";
  if (!broadcast_of(inputs)) return std::string("the input shapes do not broadcast");
  return std::nullopt;
}

void broadcast(const TileArgs& args) {
  const bool where = args.op && args.op->type == graph::OpType::Where;
  const size_t count = where ? 3 : 2;
  check_args(args, kBroadcast, count);
  const std::span<const ConstTensorView> inputs(args.inputs, count);
  const graph::Shape* out = args.output.shape;
  for (const ConstTensorView& in : inputs)
    if (!reference::broadcasts_to(*in.shape, *out))
      fail(args, kBroadcast,
           "input " + graph::shape_to_string(*in.shape) + " does not broadcast to the output " +
               graph::shape_to_string(*out));
  for (size_t i = 0; i <= count; ++i) {
    const graph::Layout layout = i < count ? inputs[i].layout : args.output.layout;
    const graph::Shape& shape = i < count ? *inputs[i].shape : *out;
    if (shape.size() == 4 && layout == graph::Layout::NHWC && material(shape))
      fail(args, kBroadcast, "runs NCHW (logical order) tensors only");
  }
  std::array<std::vector<int64_t>, 4> strides;
  strides[0] = graph::shape_strides(*out);
  for (size_t i = 0; i < count; ++i)
    strides[i + 1] = reference::broadcast_strides(*inputs[i].shape, *out);
  // Along the row each operand steps by 1 (its last dim is the output's) or
  // 0 (broadcast): a vector or one value.
  auto vector_along_row = [&](size_t i) { return !out->empty() && strides[i + 1].back() != 0; };
  float* y = args.output.data;
  if (where) {
    const WhereSpan span =
        kWhereSpans[(vector_along_row(0) ? 4 : 0) + (vector_along_row(1) ? 2 : 0) +
                    (vector_along_row(2) ? 1 : 0)];
    reference::for_each_row<4>(
        *args.region, {strides[0].data(), strides[1].data(), strides[2].data(), strides[3].data()},
        [&](const int64_t*, const std::array<int64_t, 4>& at, int64_t length) {
          span(inputs[0].data + at[1], inputs[1].data + at[2], inputs[2].data + at[3], y + at[0],
               length);
        });
    return;
  }
  const BinarySpans spans = *binary_spans(args.op->type);
  const bool a_vector = vector_along_row(0), b_vector = vector_along_row(1);
  const float* a = inputs[0].data;
  const float* b = inputs[1].data;
  reference::for_each_row<3>(
      *args.region, {strides[0].data(), strides[1].data(), strides[2].data()},
      [&](const int64_t*, const std::array<int64_t, 3>& at, int64_t length) {
        spans.run(a + at[1], a_vector, b + at[2], b_vector, y + at[0], length);
      });
}

// ---- unary -----------------------------------------------------------------

namespace {

constexpr std::string_view kUnary = "cpu.unary";

TESSERA_SIMPLE_CLONES void relu_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// ONNX Runtime's order: min(max(x, lo), hi), so hi wins when lo > hi.
TESSERA_SIMPLE_CLONES void clip_span(const float* x, float* y, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

// The vector op (vector_ops.hpp) of a unary type, if it has one.
std::optional<UnaryMath> unary_math_of(const graph::Operator& op) {
  switch (op.type) {
    case graph::OpType::Sigmoid:
      return UnaryMath::kSigmoid;
    case graph::OpType::Exp:
      return UnaryMath::kExp;
    case graph::OpType::Erf:
      return UnaryMath::kErf;
    case graph::OpType::Tanh:
      return UnaryMath::kTanh;
    case graph::OpType::Gelu:
      return op.attrs.gelu_tanh ? UnaryMath::kGeluTanh : UnaryMath::kGeluErf;
    case graph::OpType::Sqrt:
      return UnaryMath::kSqrt;
    case graph::OpType::Neg:
      return UnaryMath::kNeg;
    case graph::OpType::Abs:
      return UnaryMath::kAbs;
    case graph::OpType::Reciprocal:
      return UnaryMath::kReciprocal;
    case graph::OpType::LeakyRelu:
      return UnaryMath::kLeakyRelu;
    case graph::OpType::HardSigmoid:
      return UnaryMath::kHardSigmoid;
    case graph::OpType::HardSwish:
      return UnaryMath::kHardSwish;
    default:
      return std::nullopt;
  }
}

bool unary_supported(const graph::Operator& op) {
  return op.type == graph::OpType::Relu || op.type == graph::OpType::Clip ||
         op.type == graph::OpType::Sigmoid || unary_math_of(op).has_value();
}

constexpr const char* kUnaryOps =
    "cpu.unary runs Relu, Clip, Sigmoid, Exp, Erf, Tanh, Gelu, Sqrt, Neg, Abs, Reciprocal, "
    "LeakyRelu, HardSigmoid and HardSwish (Log and Softplus have no vector version yet)";

}  // namespace

std::optional<std::string> unary_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs) {
  if (!unary_supported(op)) return kUnaryOps;
  if (inputs.size() != 1) return "cpu.unary needs exactly one input";
  return std::nullopt;
}

void unary(const TileArgs& args) {
  check_args(args, kUnary, 1);
  if (*args.inputs[0].shape != *args.output.shape)
    fail(args, kUnary,
         "input shape " + graph::shape_to_string(*args.inputs[0].shape) +
             " differs from output shape " + graph::shape_to_string(*args.output.shape));
  const bool nhwc = runs_nhwc(args, kUnary);
  const graph::Shape out = nhwc ? nhwc_physical(*args.output.shape) : *args.output.shape;
  const graph::Region region = nhwc ? nhwc_physical(*args.region) : *args.region;
  const float* x = args.inputs[0].data;
  float* y = args.output.data;
  const graph::OpType type = args.op->type;
  const float lo = args.op->attrs.clip_min, hi = args.op->attrs.clip_max;
  if (!unary_supported(*args.op)) fail(args, kUnary, kUnaryOps);
  if (const std::optional<UnaryMath> math = unary_math_of(*args.op)) {
    const VectorOps& ops = vector_ops();
    const UnaryMathParams params{args.op->attrs.alpha, args.op->attrs.beta};
    for_each_span(region, out, 0, [&](const int64_t*, int64_t offset, int64_t length) {
      ops.unary(*math, x + offset, y + offset, length, params);
    });
    return;
  }
  for_each_span(region, out, 0, [&](const int64_t*, int64_t offset, int64_t length) {
    if (type == graph::OpType::Relu)
      relu_span(x + offset, y + offset, length);
    else
      clip_span(x + offset, y + offset, length, lo, hi);
  });
}

// ---- pow ---------------------------------------------------------------------

namespace {

constexpr std::string_view kPow = "cpu.pow";

// x^2 and x^3 as products, like ONNX Runtime's Pow for those exponents
// (GPT-2's GELU decomposition cubes); std::pow rounds once, these twice.
TESSERA_SIMPLE_CLONES void square_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i];
}

TESSERA_SIMPLE_CLONES void cube_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i];
}

}  // namespace

std::optional<std::string> pow_applies(const graph::Operator& op,
                                       std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Pow) return std::string("cpu.pow runs Pow only");
  if (inputs.size() != 2 || !inputs[0].shape || !inputs[1].shape)
    return std::string("cpu.pow needs two inputs with shapes");
  const graph::Shape& e = *inputs[1].shape;
  if (graph::shape_numel(e) != 1 || e.size() > inputs[0].shape->size() || !inputs[1].data)
    return std::string("the exponent is not a constant scalar: uses the reference");
  const float exponent = inputs[1].data[0];
  if (exponent != 2.0f && exponent != 3.0f)
    return "exponent " + std::to_string(exponent) + " is not 2 or 3: uses the reference";
  return std::nullopt;
}

void pow(const TileArgs& args) {
  check_args(args, kPow, 2);
  const std::span<const ConstTensorView> inputs(args.inputs, args.input_count);
  if (const std::optional<std::string> why = pow_applies(*args.op, inputs)) fail(args, kPow, *why);
  if (*args.inputs[0].shape != *args.output.shape)
    fail(args, kPow,
         "base shape " + graph::shape_to_string(*args.inputs[0].shape) +
             " differs from output shape " + graph::shape_to_string(*args.output.shape));
  const bool nhwc = runs_nhwc(args, kPow);
  const graph::Shape out = nhwc ? nhwc_physical(*args.output.shape) : *args.output.shape;
  const graph::Region region = nhwc ? nhwc_physical(*args.region) : *args.region;
  const bool cube = args.inputs[1].data[0] == 3.0f;
  const float* x = args.inputs[0].data;
  float* y = args.output.data;
  for_each_span(region, out, 0, [&](const int64_t*, int64_t offset, int64_t length) {
    if (cube)
      cube_span(x + offset, y + offset, length);
    else
      square_span(x + offset, y + offset, length);
  });
}

}  // namespace tessera::kernels::cpu
