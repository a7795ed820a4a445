// Comparisons, And/Or/Xor/Not, Mod and Cast/CastLike: folded on constants; at run
// time bools are held as float 0/1 (float_bools_).
#include "serialization/onnx/importer.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "graph/dtype.hpp"
#include "graph/operator.hpp"

namespace tessera::serialization::onnx_import {

// Equal, Less, LessOrEqual, Greater, GreaterOrEqual. Of constants (shape
// computations, masks built at export time: GPT-2's causal mask at sequence
// 1024, as torch.onnx exports it, is LessOrEqual of two ranges) they fold
// into bool (int64 0/1) constants; with a run-time operand they run
// (OpType Equal .. GreaterOrEqual), giving a run-time bool.
void Importer::import_comparison(const onnx::NodeProto& node, const std::string& name) {
  const Value& a = input(node, name, 0);
  const Value& b = input(node, name, 1);
  if (!a.constant || !b.constant) {
    graph::Operator o;
    o.name = name;
    o.type = *graph::op_type_from_name(node.op_type());
    return emit(node, name, std::move(o), {0, 1}, /*bool_output=*/true);
  }
  if (a.constant->dtype != b.constant->dtype)
    fail_node(node, name, "compares tensors of different types");
  // The op named once, not per element (GPT-2's mask at sequence 1024 is 1M of them).
  enum class Relation { kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual };
  const std::string& op = node.op_type();
  const Relation relation = op == "Equal"         ? Relation::kEqual
                            : op == "Less"        ? Relation::kLess
                            : op == "LessOrEqual" ? Relation::kLessOrEqual
                            : op == "Greater"     ? Relation::kGreater
                                                  : Relation::kGreaterOrEqual;
  auto compare = [relation](auto x, auto y) {
    switch (relation) {
      case Relation::kEqual:
        return x == y;
      case Relation::kLess:
        return x < y;
      case Relation::kLessOrEqual:
        return x <= y;
      case Relation::kGreater:
        return x > y;
      case Relation::kGreaterOrEqual:
        break;
    }
    return x >= y;
  };
  auto c = std::make_shared<Constant>();
  c->dtype = DType::Int64;  // bool, as 0/1
  c->shape = broadcast_or_fail(node, name, a.constant->shape, b.constant->shape);
  for (auto [i, j] : broadcast_pairs(a.constant->shape, b.constant->shape, c->shape))
    c->ints.push_back(a.constant->dtype == DType::Int64
                          ? compare(a.constant->ints[i], b.constant->ints[j])
                          : compare(a.constant->floats[i], b.constant->floats[j]));
  define_constant(node, name, std::move(c));
}

// Mod of constants (shape arithmetic: the expanded Attention function
// checks that heads divide evenly). fmod = 0: the sign of B, as Python's %;
// fmod = 1: the sign of A, as C's fmod.
void Importer::import_mod(const onnx::NodeProto& node, const std::string& name) {
  const Value& a = input(node, name, 0);
  const Value& b = input(node, name, 1);
  if (!a.constant || !b.constant)
    fail_node(node, name, "is supported only on constants (shape computations)");
  if (a.constant->dtype != b.constant->dtype)
    fail_node(node, name, "takes operands of different types");
  const bool fmod = attr_int(node, name, "fmod", 0) != 0;
  auto c = std::make_shared<Constant>();
  c->dtype = a.constant->dtype;
  c->shape = broadcast_or_fail(node, name, a.constant->shape, b.constant->shape);
  for (auto [i, j] : broadcast_pairs(a.constant->shape, b.constant->shape, c->shape)) {
    if (c->dtype == DType::Int64) {
      const int64_t x = a.constant->ints[i], y = b.constant->ints[j];
      if (y == 0 || (x == INT64_MIN && y == -1))
        fail_node(node, name, "int64 division by zero or overflow while folding");
      int64_t r = x % y;
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
      c->ints.push_back(r);
    } else {
      const float x = a.constant->floats[i], y = b.constant->floats[j];
      float r = std::fmod(x, y);
      if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
      c->floats.push_back(r);
    }
  }
  define_constant(node, name, std::move(c));
}

// And/Or/Xor/Not. Of bool constants (masks built at export time: GPT-2's
// causal mask combines two with And) they fold like Equal; with a run-time
// bool operand (float 0/1, float_bools_: an attention mask) they become
// arithmetic on 0/1: And = Mul, Or = Max, Not = 1 - x, Xor = |a - b|.
void Importer::import_logic(const onnx::NodeProto& node, const std::string& name) {
  const bool unary = node.op_type() == "Not";
  const Value& a = input(node, name, 0);
  const Value& b = unary ? a : input(node, name, 1);
  if (!a.constant || !b.constant) return import_runtime_logic(node, name, unary);
  if (a.constant->dtype != DType::Int64 || b.constant->dtype != DType::Int64)
    fail_node(node, name, "needs bool operands");
  auto c = std::make_shared<Constant>();
  c->dtype = DType::Int64;  // bool, as 0/1
  c->shape = broadcast_or_fail(node, name, a.constant->shape, b.constant->shape);
  const std::string& op = node.op_type();
  for (auto [i, j] : broadcast_pairs(a.constant->shape, b.constant->shape, c->shape)) {
    const bool x = a.constant->ints[i] != 0, y = b.constant->ints[j] != 0;
    c->ints.push_back(op == "And" ? x && y : op == "Or" ? x || y : op == "Xor" ? x != y : !x);
  }
  define_constant(node, name, std::move(c));
}

void Importer::import_runtime_logic(const onnx::NodeProto& node, const std::string& name,
                                    bool unary) {
  const std::string& op = node.op_type();
  std::vector<std::string> operands;
  for (int i = 0; i < (unary ? 1 : 2); ++i) operands.push_back(bool_operand(node, name, i));
  const std::string& out = node.output(0);
  auto part = [&](OpType type, const std::vector<std::string>& inputs, const std::string& result) {
    emit_plain(node, name, type, inputs, result, result == out ? name : result, result == out);
  };
  if (op == "And") return part(OpType::Mul, operands, out);
  if (op == "Or") return part(OpType::Max, operands, out);
  if (op == "Not")
    return part(OpType::Sub, {float_constant(out + "/one", {}, {1.0f}), operands[0]}, out);
  const std::string difference = unused_name(out + "/difference");  // Xor
  part(OpType::Sub, operands, difference);
  part(OpType::Abs, {difference}, out);
}

// The name of input `i` of a logic op as a float 0/1 value: a run-time
// bool as it is, a bool constant as a float copy.
std::string Importer::bool_operand(const onnx::NodeProto& node, const std::string& name, int i) {
  const Value& v = input(node, name, i);
  if (!v.constant) {
    if (!float_bools_.count(v.tensor))
      fail_node(node, name,
                in_quotes(node.input(i)) + " is a " +
                    std::string(graph::dtype_name(graph_.tensors[v.tensor].dtype)) +
                    " tensor computed at run time, not a bool; Tessera's run-time bools come "
                    "from casts, comparisons, IsNaN, And, Or, Not and Xor");
    return node.input(i);
  }
  if (v.constant->dtype != DType::Int64)
    fail_node(node, name, in_quotes(node.input(i)) + " must be a bool");
  std::vector<float> values;
  for (int64_t x : v.constant->ints) values.push_back(x != 0 ? 1.0f : 0.0f);
  return float_constant(node.input(i) + ".as_float", v.constant->shape, std::move(values));
}

// A float32 constant value under an unused name based on `base`.
std::string Importer::float_constant(const std::string& base, Shape shape,
                                     std::vector<float> values) {
  auto c = std::make_shared<Constant>();
  c->name = unused_name(base);
  c->shape = std::move(shape);
  c->floats = std::move(values);
  values_[c->name] = Value{-1, c};
  return c->name;
}

// Cast to the attribute's type; CastLike to its second input's (float32,
// or int64 for Tessera's integer constants).
void Importer::import_cast(const onnx::NodeProto& node, const std::string& name) {
  int64_t to = onnx::TensorProto::FLOAT;
  if (node.op_type() == "CastLike") {
    const Value& like = input(node, name, 1);
    const DType dtype = like.constant ? like.constant->dtype : graph_.tensors[like.tensor].dtype;
    if (dtype != DType::Float32) to = onnx::TensorProto::INT64;
  } else {
    to = attr_int(node, name, "to", 0);
  }
  const bool to_float = to == onnx::TensorProto::FLOAT;
  const bool to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32 ||
                      to == onnx::TensorProto::BOOL;
  const std::string target = type_name(static_cast<int32_t>(to));
  const Value& v = input(node, name, 0);
  if (!v.constant) return import_runtime_cast(node, name, v, to);
  if (!to_float && !to_int)
    fail_node(node, name,
              "casting to " + target +
                  " is not supported (float32, int64, int32 or "
                  "bool constants only)");
  const Constant& from = *v.constant;
  auto c = std::make_shared<Constant>();
  c->shape = from.shape;
  if (to_float) {
    c->floats = from.floats;
    if (from.dtype == DType::Int64)
      for (int64_t x : from.ints) c->floats.push_back(static_cast<float>(x));
  } else {
    // As ONNX Runtime on x86: a float truncates toward zero, and NaN, the
    // infinities and values out of the type's range give its lowest value
    // (T5's relative position buckets cast log(0) = -inf, then mask it
    // out); int64 to int32 wraps; any non-zero (NaN too) is true.
    c->dtype = DType::Int64;
    const bool to_bool = to == onnx::TensorProto::BOOL;
    const bool to_int32 = to == onnx::TensorProto::INT32;
    const double limit = to_int32 ? 2147483648.0 : 9223372036854775808.0;
    const int64_t lowest =
        to_int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
    for (int64_t x : from.ints)
      c->ints.push_back(to_bool    ? x != 0
                        : to_int32 ? static_cast<int32_t>(static_cast<uint32_t>(x))
                                   : x);
    for (float x : from.floats) {
      const double d = x;
      c->ints.push_back(to_bool                            ? x != 0.0f || std::isnan(x)
                        : !(d > -limit - 1.0 && d < limit) ? lowest
                                                           : static_cast<int64_t>(d));
    }
  }
  define_constant(node, name, std::move(c));
}

// Cast of a run-time tensor. Run-time bools are float 0/1 (float_bools_),
// so a cast between them and float32 keeps the tensor; an int64 model
// input (an attention mask) becomes float32 through OpType::Cast, its value
// or (to BOOL) 1 where non-zero; int64 to an integer type keeps the ids.
void Importer::import_runtime_cast(const onnx::NodeProto& node, const std::string& name,
                                   const Value& v, int64_t to) {
  const bool to_float = to == onnx::TensorProto::FLOAT;
  const bool to_bool = to == onnx::TensorProto::BOOL;
  const bool to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
  const DType from = graph_.tensors[v.tensor].dtype;
  const bool from_bool = float_bools_.count(v.tensor) > 0;
  if (from == DType::Float32 && (to_float || (to_bool && from_bool))) return alias(node, name);
  // Bools and integers held as float to an integer type: the same values
  // (integers_as_float), exact to 2^24.
  if (from == DType::Float32 && to_int && (from_bool || float_ints_.count(v.tensor))) {
    float_ints_.insert(v.tensor);
    return alias(node, name);
  }
  // Float32 to bool: 1 - (x == 0), so NaN is true as ONNX casts it
  // (DeBERTa-v2's attention mask).
  if (from == DType::Float32 && to_bool) {
    const std::string& out = node.output(0);
    const std::string zero = unused_name(out + "/is_zero");
    emit_plain(node, name, OpType::Equal,
               {node.input(0), float_constant(out + "/zero", {}, {0.0f})}, zero, zero,
               /*bool_output=*/true);
    return emit_plain(node, name, OpType::Sub, {float_constant(out + "/one", {}, {1.0f}), zero},
                      out, name, /*bool_output=*/true);
  }
  if (from == DType::Int64 && to_int) return alias(node, name);
  if (from == DType::Int64 && (to_float || to_bool)) {
    if (v.int64_view) return emit_int64_cast(node, name, v, to_bool, node.output(0), name);
    graph::Operator o;
    o.name = name;
    o.type = OpType::Cast;
    o.attrs.cast_to_bool = to_bool;
    return emit(node, name, std::move(o), {0}, to_bool);
  }
  fail_node(node, name,
            "casts the computed tensor " + in_quotes(node.input(0)) + " (" +
                std::string(from_bool ? "bool" : graph::dtype_name(from)) + ") to " +
                type_name(static_cast<int32_t>(to)) +
                "; at run time Tessera casts float32 and bool to float32 or bool, int64 to "
                "float32 or bool, and bools and integers held as float to integer types");
}

}  // namespace tessera::serialization::onnx_import
