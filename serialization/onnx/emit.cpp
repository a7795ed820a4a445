// Adding an imported operator to the graph, or folding it: emit and its parts, the
// output shape checked against the model's declaration and ONNX's shape inference.
#include "serialization/onnx/importer.hpp"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <exception>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

namespace {

bool same_shape(const onnx::TensorShapeProto& theirs, const Shape& ours) {
  if (theirs.dim_size() != static_cast<int>(ours.size())) return false;
  for (int i = 0; i < theirs.dim_size(); ++i)
    if (theirs.dim(i).has_dim_value() && theirs.dim(i).dim_value() != ours[i]) return false;
  return true;
}

std::string shape_text(const onnx::TensorShapeProto& shape) {
  std::string text = "[";
  for (int i = 0; i < shape.dim_size(); ++i) {
    if (i) text += ",";
    const auto& d = shape.dim(i);
    text += d.has_dim_value() ? std::to_string(d.dim_value()) : std::string("?");
  }
  return text + "]";
}

}  // namespace

// A Reshape of `in` to `shape` named `out` (a view: no copy where the plan allows).
void Importer::emit_reshape(const onnx::NodeProto& node, const std::string& name,
                            const std::string& in, const std::string& out, const Shape& shape) {
  graph::Operator o;
  o.name = out;
  o.type = OpType::Reshape;
  o.attrs.new_shape = shape;
  emit_part(node, name, std::move(o), {in}, out);
}

// One op of the parts an ONNX node is imported as (Attention's chain, a
// 1-D op's reshapes): its inputs by value name, its output value `out`.
// The part is in kSyntheticDomain; errors name the ONNX node.
void Importer::emit_part(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
                         const std::vector<std::string>& inputs, const std::string& out,
                         bool bool_output) {
  onnx::NodeProto part;
  part.set_op_type(node.op_type());
  part.set_domain(kSyntheticDomain);
  part.set_name(node.name());
  std::vector<int> positions;
  for (const std::string& in : inputs) {
    positions.push_back(part.input_size());
    part.add_input(in);
  }
  part.add_output(out);
  emit(part, name, std::move(o), positions, bool_output);
}

// emit_part for an op without attributes, named `op_name`.
void Importer::emit_plain(const onnx::NodeProto& node, const std::string& name, OpType type,
                          const std::vector<std::string>& inputs, const std::string& out,
                          const std::string& op_name, bool bool_output) {
  graph::Operator o;
  o.name = op_name;
  o.type = type;
  emit_part(node, name, std::move(o), inputs, out, bool_output);
}

// The output shape the file declares (value_info or graph output), where
// it declares one, must be ours.
// `bool_output`: an op whose ONNX output is bool, which Tessera holds as
// float 0/1 (IsNaN): a declared BOOL is then its float.
// `integer_output`: integers held as float (float_ints_): a declared
// integer type is then its float.
void Importer::check_declared(const onnx::NodeProto& node, const std::string& name,
                              const Shape& ours, bool integer_constant, bool bool_output,
                              bool integer_output) const {
  auto it = declared_.find(node.output(0));
  if (it == declared_.end() || !it->second->has_tensor_type()) return;
  const auto& tt = it->second->tensor_type();
  const bool as_float = tt.elem_type() == 0 || tt.elem_type() == onnx::TensorProto::FLOAT ||
                        (bool_output && tt.elem_type() == onnx::TensorProto::BOOL) ||
                        (integer_output && (tt.elem_type() == onnx::TensorProto::INT64 ||
                                            tt.elem_type() == onnx::TensorProto::INT32));
  if (!integer_constant && !as_float)
    fail_node(node, name,
              "output " + in_quotes(node.output(0)) + " is declared " + type_name(tt.elem_type()) +
                  "; Tessera needs float32 activations");
  if (tt.has_shape() && !same_shape(tt.shape(), ours))
    fail_node(node, name,
              "Tessera computes output shape " + graph::shape_to_string(ours) +
                  " but the model declares " + shape_text(tt.shape()));
}

// ONNX's own shape inference for this node, fed the input shapes we know,
// must agree with graph::infer_output_shape. Per node rather than over the
// whole model so that a libonnx 1.12 quirk on one node does not spread to
// every node after it.
void Importer::check_onnx_inference(const onnx::NodeProto& node, const std::string& name,
                                    const graph::Operator& o, const Shape& ours) const {
  // libonnx 1.12 predates ONNX's ceil_mode rule that drops a last window
  // starting in the right padding (graph/op_shape.cpp follows the rule).
  if ((o.type == OpType::MaxPool || o.type == OpType::AveragePool) && o.attrs.ceil_mode) return;
  // Split is emitted as one Slice per output, each checked by Tessera's own
  // shape function; ONNX's Split inference needs the whole node. The same
  // for the parts an op is imported as (kSyntheticDomain: Attention's chain,
  // a 1-D op's reshapes), which have no ONNX node of their own.
  if (node.op_type() == "Split" || node.domain() == kSyntheticDomain) return;
  // libonnx 1.12 infers a rank-2 output for ConvTranspose with output_shape.
  if (node.op_type() == "ConvTranspose" && find_attr(node, "output_shape")) return;
  // Past the newest opset this libonnx knows, an op may have a newer
  // version it lacks (ReduceMean-18's axes input, Gelu-20): Tessera's own
  // shape function is then the only check.
  const auto& versions = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto known = versions.find(onnx::ONNX_DOMAIN);
  if (known == versions.end() || opset_ > known->second.second) return;
  const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset_), "");
  if (!schema || !schema->has_type_and_shape_inference_function()) return;
  std::vector<onnx::TypeProto> types(node.input_size());
  std::vector<onnx::TensorProto> data;
  data.reserve(node.input_size());  // data_by_name points into it
  std::unordered_map<std::string, onnx::TypeProto*> types_by_name;
  std::unordered_map<std::string, const onnx::TensorProto*> data_by_name;
  for (int i = 0; i < node.input_size(); ++i) {
    if (!has_input(node, i)) continue;
    const Value& v = values_.at(node.input(i));
    const bool is_int = v.constant ? v.constant->dtype == DType::Int64
                                   : graph_.tensors[v.tensor].dtype == DType::Int64;
    auto* tt = types[i].mutable_tensor_type();
    tt->set_elem_type(is_int ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
    auto* shape = tt->mutable_shape();
    for (int64_t d : shape_of(v)) shape->add_dim()->set_dim_value(d);
    types_by_name[node.input(i)] = &types[i];
    if (is_int && v.constant) {  // Reshape's shape: ONNX needs the values
      onnx::TensorProto& t = data.emplace_back();
      t.set_data_type(onnx::TensorProto::INT64);
      for (int64_t d : v.constant->shape) t.add_dims(d);
      for (int64_t x : v.constant->ints) t.add_int64_data(x);
      data_by_name[node.input(i)] = &t;
    }
  }
  onnx::NodeProto node_copy = node;
  onnx::shape_inference::InferenceContextImpl context(node_copy, types_by_name, data_by_name, {});
  try {
    schema->GetTypeAndShapeInferenceFunction()(context);
  } catch (const std::exception& e) {
    fail_node(node, name, std::string("ONNX shape inference failed: ") + e.what());
  }
  const onnx::TypeProto* out = context.getOutputType(0);
  if (!out || !out->has_tensor_type() || !out->tensor_type().has_shape()) return;
  if (!same_shape(out->tensor_type().shape(), ours))
    fail_node(node, name,
              "Tessera computes output shape " + graph::shape_to_string(ours) +
                  " but ONNX shape inference says " + shape_text(out->tensor_type().shape()));
}

// A Reshape or Flatten of an int64 model input: the same tensor where the
// shape is its own (GPT-2's exported `input_ids.view(-1, seq)`: still Gather
// indices), otherwise a view of it (Value::int64_view) that casts read.
// False for any other op.
bool Importer::view_int64(const onnx::NodeProto& node, const std::string& name,
                          const graph::Operator& o, const std::vector<int>& positions) {
  if ((o.type != OpType::Reshape && o.type != OpType::Flatten) || positions.empty()) return false;
  Value v = input(node, name, positions[0]);
  if (v.constant || graph_.tensors[v.tensor].dtype != DType::Int64) return false;
  Shape out;
  try {
    out = graph::infer_output_shape(o, {shape_of(v)});
  } catch (const Error& e) {
    fail_node(node, name, e.what());
  }
  check_declared(node, name, out, /*integer_constant=*/true);
  v.int64_view = out == graph_.tensors[v.tensor].shape ? nullptr : std::make_shared<Shape>(out);
  values_[node.output(0)] = std::move(v);
  return true;
}

// `bool_output`: the op's ONNX output is bool, held as float 0/1
// (float_bools_): casts to BOOL, comparisons, And, Or, Not, Xor. IsNaN's is
// too, and a data-movement op of bools gives bools.
void Importer::emit(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
                    const std::vector<int>& positions, bool bool_output) {
  if (view_int64(node, name, o, positions)) return;
  if (std::optional<onnx::NodeProto> r = integers_as_float(node, name, o, positions))
    return emit(*r, name, std::move(o), positions, bool_output);
  std::vector<const Value*> ins;
  std::vector<Shape> shapes;
  bool all_constant = true;
  int first_integer = -1;  // an int64 constant read as data, if any
  for (int i : positions) {
    const Value& v = input(node, name, i);
    if (v.constant && v.constant->dtype != DType::Float32 && first_integer < 0) first_integer = i;
    if (v.int64_view)
      fail_node(node, name,
                "reads " + in_quotes(node.input(i)) + ", an int64 input viewed with another " +
                    "shape; " + int64_coverage(o.type));
    if (!v.constant && graph_.tensors[v.tensor].dtype != DType::Float32 &&
        graph::operand_dtype(o, ins.size()) == DType::Float32)
      fail_node(node, name,
                "reads the int64 input " + in_quotes(node.input(i)) + " as data; " +
                    int64_coverage(o.type));
    ins.push_back(&v);
    shapes.push_back(shape_of(v));
    all_constant = all_constant && v.constant;
  }
  // Integer constants fold (shape computations); beside run-time integers
  // they are taken by integers_as_float for the ops it covers, others are
  // not supported.
  if (first_integer >= 0 && !all_constant) {
    for (const Value* v : ins)
      if (!v->constant && float_ints_.count(v->tensor))
        fail_node(node, name, "computes on int64 values at run time; " + int64_coverage(o.type));
    fail_node(node, name,
              "reads the int64 constant " + in_quotes(node.input(first_integer)) +
                  " as data; Tessera computes in float32");
  }
  Shape out;
  try {
    out = graph::infer_output_shape(o, shapes);
  } catch (const Error& e) {
    fail_node(node, name, e.what());
  }
  check_onnx_inference(node, name, o, out);
  const bool float_bool =
      bool_output || o.type == OpType::IsNaN || moves_bools(o.type, ins, positions);
  const bool float_int = integral_result(o, ins);
  check_declared(node, name, out, first_integer >= 0, float_bool, float_int);
  const std::string& out_name = node.output(0);
  if (all_constant) {
    values_[out_name] = Value{-1, first_integer >= 0 ? fold_integers(node, name, o, ins, out)
                                                     : fold(node, name, o, ins, out)};
    return;
  }
  for (const Value* v : ins) o.inputs.push_back(materialise(node, name, *v));
  const int32_t t = add_tensor(out_name, out);
  if (o.type == OpType::ToIndex) graph_.tensors[t].dtype = DType::Int64;
  o.outputs.push_back(t);
  values_[out_name] = Value{t, nullptr};
  if (float_bool) float_bools_.insert(t);
  if (float_int) float_ints_.insert(t);
  graph_.ops.push_back(std::move(o));
}

}  // namespace tessera::serialization::onnx_import
