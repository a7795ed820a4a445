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
#include <cmath>
#include <cstdint>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/simple_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TESSERA_SIMPLE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSERA_SIMPLE_CLONES
#endif

[[noreturn]] void fail(const TileArgs& args, std::string_view variant, const std::string& what) {
  const std::string name = args.op ? args.op->name : std::string("?");
  throw Error(std::string(variant) + " kernel for operator '" + name + "': " + what);
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
  enum Kind { kFull, kScalar, kChannel, kOther } kind = kOther;
  size_t channel_dim = 0;  // kChannel: the one output dim the operand varies along
};

// `last_dim_vector`: an operand varying along the last dim only counts as
// kChannel (read as a vector per span); off, it is kOther.
OperandLayout operand_layout(const graph::Shape& in, const graph::Shape& out,
                             bool last_dim_vector = false) {
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
  if (varying == 1 && (dim + 1 < out.size() || last_dim_vector))
    return {OperandLayout::kChannel, dim};
  return {};
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
#undef TESSERA_BINARY_SPANS

struct BinarySpans {
  void (*vv)(const float*, const float*, float*, int64_t);
  void (*vs)(const float*, float, float*, int64_t);
  void (*sv)(float, const float*, float*, int64_t);
};

constexpr std::string_view kBinary = "cpu.binary";

std::optional<std::string> binary_reason(const graph::Operator& op, const graph::Shape& a,
                                         const graph::Shape& b, const graph::Shape& out) {
  if (op.type != graph::OpType::Add && op.type != graph::OpType::Mul)
    return "cpu.binary runs Add and Mul only";
  for (const graph::Shape* s : {&a, &b})
    if (operand_layout(*s, out).kind == OperandLayout::kOther)
      return "broadcast pattern " + graph::shape_to_string(*s) + " -> " +
             graph::shape_to_string(out) +
             " is not same-shape, scalar or one non-last dim: uses the reference";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> binary_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs) {
  if (inputs.size() != 2 || !inputs[0].shape || !inputs[1].shape)
    return "cpu.binary needs two inputs with shapes";
  // The output shape is the numpy broadcast of the two (the compiler's
  // shape inference checked they broadcast).
  const graph::Shape& a = *inputs[0].shape;
  const graph::Shape& b = *inputs[1].shape;
  graph::Shape out(std::max(a.size(), b.size()), 1);
  for (const graph::Shape* s : {&a, &b}) {
    const size_t shift = out.size() - s->size();
    for (size_t d = 0; d < s->size(); ++d)
      if ((*s)[d] != 1) out[d + shift] = (*s)[d];
  }
  return binary_reason(op, a, b, out);
}

void binary(const TileArgs& args) {
  check_args(args, kBinary, 2);
  if (const std::optional<std::string> why =
          binary_reason(*args.op, *args.inputs[0].shape, *args.inputs[1].shape, *args.output.shape))
    fail(args, kBinary, *why);
  const bool nhwc = runs_nhwc(args, kBinary);
  // In NHWC, everything in physical order (the checks above were logical).
  const graph::Shape out = nhwc ? nhwc_physical(*args.output.shape) : *args.output.shape;
  const graph::Shape a_shape = nhwc ? nhwc_physical(*args.inputs[0].shape) : *args.inputs[0].shape;
  const graph::Shape b_shape = nhwc ? nhwc_physical(*args.inputs[1].shape) : *args.inputs[1].shape;
  const graph::Region region = nhwc ? nhwc_physical(*args.region) : *args.region;
  const OperandLayout la = operand_layout(a_shape, out, nhwc);
  const OperandLayout lb = operand_layout(b_shape, out, nhwc);
  if (la.kind == OperandLayout::kOther || lb.kind == OperandLayout::kOther)
    fail(args, kBinary, "unsupported broadcast pattern");
  const BinarySpans spans = args.op->type == graph::OpType::Add
                                ? BinarySpans{add_vv, add_vs, add_sv}
                                : BinarySpans{mul_vv, mul_vs, mul_sv};
  // A span must not cross a channel operand's dim.
  size_t min_split = 0;
  for (const OperandLayout& l : {la, lb})
    if (l.kind == OperandLayout::kChannel) min_split = std::max(min_split, l.channel_dim + 1);
  const float* a = args.inputs[0].data;
  const float* b = args.inputs[1].data;
  float* y = args.output.data;
  // The operand's value for a span: the span's own elements (full), one
  // value (scalar, channel), or, for a channel along the last dim (NHWC),
  // the vector of the span's channels.
  const size_t last = out.size() - 1;
  auto is_vector = [&](const OperandLayout& l) {
    return l.kind == OperandLayout::kFull ||
           (l.kind == OperandLayout::kChannel && l.channel_dim == last);
  };
  auto vector_of = [&](const OperandLayout& l, const float* data, int64_t offset) {
    return l.kind == OperandLayout::kFull ? data + offset : data + region.begin[last];
  };
  auto constant_of = [](const OperandLayout& l, const float* data, const int64_t* index) {
    return l.kind == OperandLayout::kChannel ? data[index[l.channel_dim]] : data[0];
  };
  const bool a_vector = is_vector(la), b_vector = is_vector(lb);
  for_each_span(region, out, min_split, [&](const int64_t* index, int64_t offset, int64_t length) {
    if (a_vector && b_vector) {
      spans.vv(vector_of(la, a, offset), vector_of(lb, b, offset), y + offset, length);
    } else if (a_vector) {
      spans.vs(vector_of(la, a, offset), constant_of(lb, b, index), y + offset, length);
    } else if (b_vector) {
      spans.sv(constant_of(la, a, index), vector_of(lb, b, offset), y + offset, length);
    } else {
      const float vb = constant_of(lb, b, index);
      spans.sv(constant_of(la, a, index), &vb, y + offset, 1);
      std::fill(y + offset + 1, y + offset + length, y[offset]);
    }
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

// kernels/activation.hpp's expression; std::exp keeps it scalar (a vector
// exp would round differently from the reference and the fused epilogue).
void sigmoid_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

}  // namespace

std::optional<std::string> unary_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::Relu && op.type != graph::OpType::Clip &&
      op.type != graph::OpType::Sigmoid)
    return "cpu.unary runs Relu, Clip and Sigmoid only";
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
  if (type != graph::OpType::Relu && type != graph::OpType::Clip && type != graph::OpType::Sigmoid)
    fail(args, kUnary, "cpu.unary runs Relu, Clip and Sigmoid only");
  for_each_span(region, out, 0, [&](const int64_t*, int64_t offset, int64_t length) {
    if (type == graph::OpType::Relu)
      relu_span(x + offset, y + offset, length);
    else if (type == graph::OpType::Clip)
      clip_span(x + offset, y + offset, length, lo, hi);
    else
      sigmoid_span(x + offset, y + offset, length);
  });
}

}  // namespace tessera::kernels::cpu
