// Integers in emit: run-time int64 arithmetic held as float32 (integers_as_float
// and its helpers), and constant folding through the reference kernels (fold_integers, fold).
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::serialization::onnx_import {

std::string Importer::int64_coverage(OpType type) {
  return "Tessera's run-time int64 arithmetic (float32, exact to 2^24) covers Add, Sub, Mul, "
         "Neg, Abs, Max, Min, the comparisons, Where, CumSum, casts, Gather indices and data "
         "movement, not " +
         std::string(graph::op_type_name(type));
}

namespace {

bool integer_capable(OpType type) {
  switch (type) {
    case OpType::Add:
    case OpType::Sub:
    case OpType::Mul:
    case OpType::Neg:
    case OpType::Abs:
    case OpType::Max:
    case OpType::Min:
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Where:
    case OpType::CumSum:
    case OpType::Expand:
    case OpType::Slice:
    case OpType::Concat:
    case OpType::Transpose:
    case OpType::Gather:
    case OpType::Reshape:  // of run-time int64 inputs: views (view_int64)
    case OpType::Flatten:
      return true;
    default:
      return false;
  }
}

}  // namespace

// Integer arithmetic at run time (RoBERTa's position ids: CumSum over
// token ids != pad, times the mask, plus pad, as Gather indices) runs in
// float32, exact for integers up to 2^24 (float_ints_: tensors holding
// them). An int64 input read by such an op is cast to float32 first (once;
// a view of it is cast, then viewed), int64 constants beside a run-time
// integer become float constants (refused past 2^24), and run-time Gather
// indices held as float go through ToIndex, which fails the run on a value
// that is not an integer within ±2^24. Returns the node with those inputs
// renamed, or nothing when none needs it.
std::optional<onnx::NodeProto> Importer::integers_as_float(const onnx::NodeProto& node,
                                                           const std::string& name,
                                                           const graph::Operator& o,
                                                           const std::vector<int>& positions) {
  const auto runtime_int64 = [&](const Value& v) {
    return !v.constant && graph_.tensors[v.tensor].dtype == DType::Int64;
  };
  const auto float_int = [&](const Value& v) { return !v.constant && float_ints_.count(v.tensor); };
  const bool index_op = o.type == OpType::Gather;
  // What needs changing: a run-time int64 operand, an int64 constant beside
  // run-time integers, or Gather indices held as float.
  bool integers = false, int64_operand = false, int64_constant = false, float_index = false;
  for (int i : positions) {
    const Value& v = input(node, name, i);
    if (index_op && i == 1) {
      float_index = float_int(v) || v.int64_view;
      continue;
    }
    integers = integers || runtime_int64(v) || float_int(v);
    int64_operand = int64_operand || runtime_int64(v);
    int64_constant = int64_constant || (v.constant && v.constant->dtype == DType::Int64 &&
                                        !(o.type == OpType::Where && i == 0));
  }
  if (!float_index && !(integer_capable(o.type) && integers && (int64_operand || int64_constant)))
    return std::nullopt;
  onnx::NodeProto r = node;
  for (int i : positions) {
    const Value& v = input(node, name, i);
    if (index_op && i == 1) {
      if (float_int(v)) r.set_input(i, as_index(node, name, node.input(i)));
      // Token ids viewed with another shape: as float integers, then indices.
      if (v.int64_view)
        r.set_input(i, as_index(node, name, int64_as_float(node, name, node.input(i), v)));
    } else if (o.type == OpType::Where && i == 0) {
      continue;  // the condition, already float 0/1
    } else if (runtime_int64(v)) {
      r.set_input(i, int64_as_float(node, name, node.input(i), v));
    } else if (v.constant && v.constant->dtype == DType::Int64) {
      std::vector<float> values;
      for (int64_t x : v.constant->ints) {
        if (x < -(int64_t{1} << 24) || x > (int64_t{1} << 24))
          fail_node(node, name,
                    "the int64 constant " + in_quotes(node.input(i)) + " holds " +
                        std::to_string(x) +
                        "; Tessera's run-time integer arithmetic is float32, exact to 2^24");
        values.push_back(static_cast<float>(x));
      }
      r.set_input(
          i, float_constant(node.input(i) + ".as_float", v.constant->shape, std::move(values)));
    }
  }
  return r;
}

// Whether op `o` over `ins` gives integers held as float (float_ints_): an
// integer op whose run-time operands hold integers (or bools), one of them
// integers, and whose constants are whole numbers.
bool Importer::integral_result(const graph::Operator& o,
                               const std::vector<const Value*>& ins) const {
  if (!integer_capable(o.type) || graph::is_comparison(o.type)) return false;
  bool any_integers = false;
  for (size_t k = 0; k < ins.size(); ++k) {
    const Value& v = *ins[k];
    if (o.type == OpType::Where && k == 0) continue;
    if (v.constant) {
      for (float x : v.constant->floats)
        if (x != std::trunc(x)) return false;
    } else if (float_ints_.count(v.tensor)) {
      any_integers = true;
    } else if (!float_bools_.count(v.tensor)) {
      return false;
    }
  }
  return any_integers;
}

// The float32 copy of int64 input value `v` (named `value`), cast once.
std::string Importer::int64_as_float(const onnx::NodeProto& node, const std::string& name,
                                     const std::string& value, const Value& v) {
  const std::string key = value + "/as_float";
  if (values_.count(key)) return key;
  emit_int64_cast(node, name, v, /*to_bool=*/false, key, key);
  float_ints_.insert(values_.at(key).tensor);
  return key;
}

// OpType::Cast of the int64 input behind `v` (to its value, or 1 / 0 with
// to_bool) as value `out`, named `op_name`; a view of the input is cast
// whole, then viewed.
void Importer::emit_int64_cast(const onnx::NodeProto& node, const std::string& name, const Value& v,
                               bool to_bool, const std::string& out, const std::string& op_name) {
  const std::string whole = unused_name(out + "/int64");
  values_[whole] = Value{v.tensor, nullptr, nullptr};
  graph::Operator o;
  o.name = op_name;
  o.type = OpType::Cast;
  o.attrs.cast_to_bool = to_bool;
  const std::string cast = v.int64_view ? unused_name(out + "/unviewed") : out;
  emit_part(node, name, std::move(o), {whole}, cast, to_bool);
  if (v.int64_view) emit_reshape(node, name, cast, out, *v.int64_view);
}

// The int64 Gather indices of the float integers named `value`, once.
std::string Importer::as_index(const onnx::NodeProto& node, const std::string& name,
                               const std::string& value) {
  const std::string key = value + "/as_index";
  if (values_.count(key)) return key;
  emit_plain(node, name, OpType::ToIndex, {value}, key, key);
  return key;
}

// Whether `type` only moves its data input's elements (Gather's indices
// aside) and that input holds run-time bools: the output holds them too.
bool Importer::moves_bools(OpType type, const std::vector<const Value*>& ins,
                           const std::vector<int>& positions) const {
  switch (type) {
    case OpType::Reshape:
    case OpType::Flatten:
    case OpType::Transpose:
    case OpType::Gather:
    case OpType::Expand:
    case OpType::Slice:
      return !ins.empty() && !ins[0]->constant && float_bools_.count(ins[0]->tensor) > 0;
    case OpType::Concat:
      for (const Value* v : ins)
        if (v->constant || !float_bools_.count(v->tensor)) return false;
      return !positions.empty();
    default:
      return false;
  }
}

// Folds an op over int64 constants (shape arithmetic and index plumbing):
// Neg/Abs/Add/Sub/Mul/Div/Max/Min in int64; data movement through the float
// reference kernels, which move element ids that are then looked up.
std::shared_ptr<Constant> Importer::fold_integers(const onnx::NodeProto& node,
                                                  const std::string& name, const graph::Operator& o,
                                                  const std::vector<const Value*>& ins,
                                                  const Shape& out_shape) const {
  if (o.type == OpType::Neg || o.type == OpType::Abs) {
    auto c = std::make_shared<Constant>(*ins[0]->constant);
    c->name = node.output(0);
    for (int64_t& x : c->ints) {
      if (x == INT64_MIN) fail_node(node, name, "int64 overflow while folding");
      x = o.type == OpType::Neg || x < 0 ? -x : x;
    }
    return c;
  }
  const bool arithmetic = o.type == OpType::Add || o.type == OpType::Sub || o.type == OpType::Mul ||
                          o.type == OpType::Div || o.type == OpType::Max || o.type == OpType::Min;
  if (arithmetic) {
    const Constant& a = *ins[0]->constant;
    const Constant& b = *ins[1]->constant;
    if (a.dtype != DType::Int64 || b.dtype != DType::Int64)
      fail_node(node, name, "mixes int64 and float32 operands");
    auto c = std::make_shared<Constant>();
    c->dtype = DType::Int64;
    c->name = node.output(0);
    c->shape = out_shape;
    for (auto [i, j] : broadcast_pairs(a.shape, b.shape, out_shape)) {
      const int64_t x = a.ints[i], y = b.ints[j];
      int64_t r = 0;
      bool ok = true;
      switch (o.type) {
        case OpType::Add:
          ok = !__builtin_add_overflow(x, y, &r);
          break;
        case OpType::Sub:
          ok = !__builtin_sub_overflow(x, y, &r);
          break;
        case OpType::Mul:
          ok = !__builtin_mul_overflow(x, y, &r);
          break;
        case OpType::Max:
          r = std::max(x, y);
          break;
        case OpType::Min:
          r = std::min(x, y);
          break;
        default:  // Div truncates toward zero, like C
          ok = y != 0 && !(x == INT64_MIN && y == -1);
          r = ok ? x / y : 0;
      }
      if (!ok) fail_node(node, name, "int64 overflow or division by zero while folding");
      c->ints.push_back(r);
    }
    return c;
  }
  const bool data_movement = o.type == OpType::Gather || o.type == OpType::Concat ||
                             o.type == OpType::Slice || o.type == OpType::Expand ||
                             o.type == OpType::Where || o.type == OpType::Transpose ||
                             o.type == OpType::Reshape || o.type == OpType::Flatten;
  if (!data_movement)
    fail_node(node, name, "reads int64 constants as data; Tessera computes in float32");
  // The float reference kernels move element ids instead of the values
  // (every id up to 2^24 is an exact float), which are then looked up: any
  // int64 value folds exactly (T5's buckets hold INT64_MIN from a cast of
  // -inf). Where's condition is read as its 0/1 values.
  constexpr int64_t kExact = int64_t{1} << 24;
  const bool where = o.type == OpType::Where;
  const DType result = ins[where ? 1 : 0]->constant->dtype;
  std::vector<int64_t> pool_ints;
  std::vector<float> pool_floats;
  std::vector<Value> as_ids;
  as_ids.reserve(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    const Constant& from = *ins[i]->constant;
    auto c = std::make_shared<Constant>(from);
    c->dtype = DType::Float32;
    c->ints.clear();
    c->floats.clear();
    if (where && i == 0) {
      for (int64_t x : from.ints) c->floats.push_back(x != 0 ? 1.0f : 0.0f);
      for (float x : from.floats) c->floats.push_back(x != 0.0f ? 1.0f : 0.0f);
    } else {
      if (from.dtype != result) fail_node(node, name, "mixes int64 and float32 data");
      const auto first = static_cast<int64_t>(pool_ints.size() + pool_floats.size());
      if (first + graph::shape_numel(from.shape) > kExact)
        fail_node(node, name, "has too many int64 elements to fold (Tessera folds up to 2^24)");
      for (int64_t e = 0; e < graph::shape_numel(from.shape); ++e)
        c->floats.push_back(static_cast<float>(first + e));
      pool_ints.insert(pool_ints.end(), from.ints.begin(), from.ints.end());
      pool_floats.insert(pool_floats.end(), from.floats.begin(), from.floats.end());
    }
    as_ids.push_back(Value{-1, std::move(c)});
  }
  std::vector<const Value*> pointers;
  for (const Value& v : as_ids) pointers.push_back(&v);
  auto c = fold(node, name, o, pointers, out_shape);
  c->dtype = result;
  std::vector<float> ids = std::move(c->floats);
  c->floats.clear();
  for (float id : ids) {
    const auto at = static_cast<size_t>(id);
    if (result == DType::Int64)
      c->ints.push_back(pool_ints[at]);
    else
      c->floats.push_back(pool_floats[at]);
  }
  return c;
}

// Constant folding: run the reference kernel over the whole output.
std::shared_ptr<Constant> Importer::fold(const onnx::NodeProto& node, const std::string& name,
                                         const graph::Operator& o,
                                         const std::vector<const Value*>& ins,
                                         const Shape& out_shape) const {
  auto c = std::make_shared<Constant>();
  c->name = node.output(0);
  c->shape = out_shape;
  if (o.type == OpType::Reshape || o.type == OpType::Flatten) {
    c->dtype = ins[0]->constant->dtype;
    c->floats = ins[0]->constant->floats;  // same row-major data
    c->ints = ins[0]->constant->ints;
    return c;
  }
  const auto kernel = kernels::find_tile_kernel(o.type, "reference");
  if (!kernel) fail_node(node, name, "cannot fold constants: no reference kernel");
  std::vector<kernels::ConstTensorView> views;
  for (const Value* v : ins) views.push_back({v->constant->floats.data(), &v->constant->shape});
  c->floats.assign(static_cast<size_t>(graph::shape_numel(out_shape)), 0.0f);
  const graph::Region region = graph::Region::whole(out_shape);
  kernels::TileArgs args;
  args.op = &o;
  args.inputs = views.data();
  args.input_count = views.size();
  args.output = {c->floats.data(), &c->shape};
  args.region = &region;
  kernel(args);
  return c;
}

}  // namespace tessera::serialization::onnx_import
