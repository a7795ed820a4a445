#pragma once
// The ONNX importer's internals, shared by the .cpp files in this folder: the
// Importer class (one model's import) and the values it passes around.
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/dtype.hpp"
#include "graph/graph.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

using graph::DType;
using graph::OpType;
using graph::Shape;

// The domain of the nodes the importer makes up for the parts an ONNX node is
// imported as (never read from a file: ONNX shape inference skips them).
inline constexpr char kSyntheticDomain[] = "tessera.import";

// A value known at import time: an initializer, a Constant node's value or
// the output of a folded operator.
struct Constant {
  DType dtype = DType::Float32;  // Float32, or Int64 for shape-like constants
  Shape shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::string name;     // the ONNX value that defined it (the weight tensor's name)
  int32_t tensor = -1;  // the graph's weight tensor, once an operator reads it
};

// What an ONNX value name stands for: an activation tensor or a constant.
struct Value {
  int32_t tensor = -1;
  std::shared_ptr<Constant> constant;
  // An int64 model input viewed with another shape (Hugging Face 4.x's
  // attention_mask[:, None, None, :]): the view's shape. No op is emitted
  // for the view; a Cast of it, or the float copy integer arithmetic reads
  // (integers_as_float), casts the input and reshapes the result.
  std::shared_ptr<const Shape> int64_view = nullptr;
};

inline std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

// Each member function is defined in the .cpp file named above its declaration.
class Importer {
 public:
  // `external_base`: the folder of the model file, where tensors stored as
  // external data live; empty when the model came from memory.
  explicit Importer(std::string origin, std::filesystem::path external_base = {})
      : origin_(std::move(origin)), external_base_(std::move(external_base)) {}

  graph::Graph run(onnx::ModelProto& model);

 private:
  // onnx_importer.cpp, with run
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_node(const onnx::NodeProto& node, const std::string& name,
                              const std::string& message) const;

  // op_versions.cpp
  void read_opset(const onnx::ModelProto& model);
  void check_op_version(const onnx::NodeProto& node, const std::string& name) const;
  void reject_unsupported_ops(const onnx::GraphProto& g);

  // model_reading.cpp
  void name_nodes(const onnx::GraphProto& g);
  onnx::TensorProto with_external_data(const onnx::TensorProto& t, const std::string& what) const;
  std::shared_ptr<Constant> constant_from_tensor(const onnx::TensorProto& t,
                                                 const std::string& what) const;
  void read_inputs(const onnx::GraphProto& g);
  static std::string type_name(int32_t elem_type);
  std::vector<int> topological_order(const onnx::GraphProto& g);
  void sort_nodes(onnx::GraphProto& g, const std::vector<int>& order);
  void read_outputs(const onnx::GraphProto& g);

  // node_helpers.cpp
  int32_t add_tensor(const std::string& name, const Shape& shape);
  int32_t materialise(const onnx::NodeProto& node, const std::string& name, const Value& v);
  const Shape& shape_of(const Value& v) const;
  static bool has_input(const onnx::NodeProto& node, int i);
  const Value& input(const onnx::NodeProto& node, const std::string& name, int i) const;
  void require_only_first_output(const onnx::NodeProto& node, const std::string& name,
                                 const std::string& why) const;
  const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& key) const;
  void check_attr_type(const onnx::NodeProto& node, const std::string& name,
                       const onnx::AttributeProto& a, onnx::AttributeProto::AttributeType t) const;
  int64_t attr_int(const onnx::NodeProto& node, const std::string& name, const std::string& key,
                   int64_t fallback) const;
  float attr_float(const onnx::NodeProto& node, const std::string& name, const std::string& key,
                   float fallback) const;
  std::string attr_string(const onnx::NodeProto& node, const std::string& name,
                          const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name,
                                 const std::string& key, std::vector<int64_t> fallback) const;
  std::vector<int64_t> spatial_attr(const onnx::NodeProto& node, const std::string& name,
                                    const std::string& key, std::vector<int64_t> fallback) const;
  std::vector<int64_t> resolve_pads(const onnx::NodeProto& node, const std::string& name,
                                    const Shape& input, const std::vector<int64_t>& kernel,
                                    const std::vector<int64_t>& strides,
                                    const std::vector<int64_t>& dilations) const;
  std::vector<int64_t> resolve_transpose_pads(const onnx::NodeProto& node, const std::string& name,
                                              const Shape& input, const graph::OpAttributes& a,
                                              const std::vector<int64_t>& output_padding) const;
  float scalar_constant(const onnx::NodeProto& node, const std::string& name, int i,
                        const std::string& what) const;
  int64_t normalise_axis(const onnx::NodeProto& node, const std::string& name, int64_t axis,
                         int64_t rank) const;

  // import_node.cpp
  void import_node(const onnx::NodeProto& node, const std::string& name);
  std::vector<int64_t> resolve_reshape(const onnx::NodeProto& node, const std::string& name) const;
  void resolve_slice(const onnx::NodeProto& node, const std::string& name,
                     graph::OpAttributes& a) const;
  void resolve_pad(const onnx::NodeProto& node, const std::string& name,
                   graph::OpAttributes& a) const;
  void resolve_resize(const onnx::NodeProto& node, const std::string& name,
                      graph::OpAttributes& a) const;
  void alias(const onnx::NodeProto& node, const std::string& name);
  void import_dropout(const onnx::NodeProto& node, const std::string& name);

  // shape_computations.cpp
  // Largest element count a folded constant may have (bounds import memory).
  static constexpr int64_t kMaxFoldedElements = int64_t{1} << 28;

  std::vector<int64_t> int_values(const onnx::NodeProto& node, const std::string& name, int i,
                                  const std::string& what) const;
  Shape broadcast_or_fail(const onnx::NodeProto& node, const std::string& name, const Shape& a,
                          const Shape& b) const;
  static std::vector<std::pair<size_t, size_t>> broadcast_pairs(const Shape& a, const Shape& b,
                                                                const Shape& out);
  std::string unused_name(const std::string& base) const;
  void define_constant(const onnx::NodeProto& node, const std::string& name,
                       std::shared_ptr<Constant> c);
  void import_shape(const onnx::NodeProto& node, const std::string& name);
  void import_constant_of_shape(const onnx::NodeProto& node, const std::string& name);
  double scalar_value(const onnx::NodeProto& node, const std::string& name, int i) const;
  void import_range(const onnx::NodeProto& node, const std::string& name);
  void import_size(const onnx::NodeProto& node, const std::string& name);
  void import_constant(const onnx::NodeProto& node, const std::string& name);
  void import_squeeze(const onnx::NodeProto& node, const std::string& name);
  void import_gather_elements(const onnx::NodeProto& node, const std::string& name);
  void import_trilu(const onnx::NodeProto& node, const std::string& name);

  // logic_and_casts.cpp
  void import_comparison(const onnx::NodeProto& node, const std::string& name);
  void import_mod(const onnx::NodeProto& node, const std::string& name);
  void import_logic(const onnx::NodeProto& node, const std::string& name);
  void import_runtime_logic(const onnx::NodeProto& node, const std::string& name, bool unary);
  std::string bool_operand(const onnx::NodeProto& node, const std::string& name, int i);
  std::string float_constant(const std::string& base, Shape shape, std::vector<float> values);
  void import_cast(const onnx::NodeProto& node, const std::string& name);
  void import_runtime_cast(const onnx::NodeProto& node, const std::string& name, const Value& v,
                           int64_t to);

  // attention_import.cpp
  void import_attention(const onnx::NodeProto& node, const std::string& name);

  // multi_op_imports.cpp
  void import_gather_nd(const onnx::NodeProto& node, const std::string& name);
  bool import_1d_as_2d(const onnx::NodeProto& node, const std::string& name);
  void import_split(const onnx::NodeProto& node, const std::string& name);
  void import_max_min(const onnx::NodeProto& node, const std::string& name);

  // emit.cpp
  void emit_reshape(const onnx::NodeProto& node, const std::string& name, const std::string& in,
                    const std::string& out, const Shape& shape);
  void emit_part(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
                 const std::vector<std::string>& inputs, const std::string& out,
                 bool bool_output = false);
  void emit_plain(const onnx::NodeProto& node, const std::string& name, OpType type,
                  const std::vector<std::string>& inputs, const std::string& out,
                  const std::string& op_name, bool bool_output = false);
  void check_declared(const onnx::NodeProto& node, const std::string& name, const Shape& ours,
                      bool integer_constant, bool bool_output = false,
                      bool integer_output = false) const;
  void check_onnx_inference(const onnx::NodeProto& node, const std::string& name,
                            const graph::Operator& o, const Shape& ours) const;
  bool view_int64(const onnx::NodeProto& node, const std::string& name, const graph::Operator& o,
                  const std::vector<int>& positions);
  void emit(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
            const std::vector<int>& positions, bool bool_output = false);

  // integers_and_folding.cpp
  static std::string int64_coverage(OpType type);
  std::optional<onnx::NodeProto> integers_as_float(const onnx::NodeProto& node,
                                                   const std::string& name,
                                                   const graph::Operator& o,
                                                   const std::vector<int>& positions);
  bool integral_result(const graph::Operator& o, const std::vector<const Value*>& ins) const;
  std::string int64_as_float(const onnx::NodeProto& node, const std::string& name,
                             const std::string& value, const Value& v);
  void emit_int64_cast(const onnx::NodeProto& node, const std::string& name, const Value& v,
                       bool to_bool, const std::string& out, const std::string& op_name);
  std::string as_index(const onnx::NodeProto& node, const std::string& name,
                       const std::string& value);
  bool moves_bools(OpType type, const std::vector<const Value*>& ins,
                   const std::vector<int>& positions) const;
  std::shared_ptr<Constant> fold_integers(const onnx::NodeProto& node, const std::string& name,
                                          const graph::Operator& o,
                                          const std::vector<const Value*>& ins,
                                          const Shape& out_shape) const;
  std::shared_ptr<Constant> fold(const onnx::NodeProto& node, const std::string& name,
                                 const graph::Operator& o, const std::vector<const Value*>& ins,
                                 const Shape& out_shape) const;

  std::string origin_;
  std::filesystem::path external_base_;
  int64_t opset_ = 0;
  graph::Graph graph_;
  std::vector<std::string> node_names_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, const onnx::TypeProto*> declared_;
  std::unordered_set<std::string> used_names_;
  // Activations that hold bools as float 0/1 (casts to bool, comparisons,
  // logic ops, IsNaN): Where takes them as its condition.
  std::unordered_set<int32_t> float_bools_;
  // Activations that hold integers as float32 (integers_as_float).
  std::unordered_set<int32_t> float_ints_;
};

}  // namespace tessera::serialization::onnx_import
