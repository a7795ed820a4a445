#include "serialization/onnx/onnx_importer.hpp"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::serialization {
namespace {

using graph::DType;
using graph::OpType;
using graph::Shape;

constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 28;
// The domain of the nodes the importer makes up for the parts an ONNX node is
// imported as (never read from a file: ONNX shape inference skips them).
constexpr char kSyntheticDomain[] = "tessera.import";

// Errors are one line: ONNX's own messages may span several.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

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

// Little-endian decoding of TensorProto::raw_data, whatever the host order.
template <typename T>
std::vector<T> decode_raw(const std::string& raw, size_t count) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  std::vector<T> out(count);
  const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());
  for (size_t i = 0; i < count; ++i) {
    Bits bits = 0;
    for (size_t b = 0; b < sizeof(T); ++b) bits |= Bits(bytes[i * sizeof(T) + b]) << (8 * b);
    out[i] = std::bit_cast<T>(bits);
  }
  return out;
}

std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

class Importer {
 public:
  // `external_base`: the folder of the model file, where tensors stored as
  // external data live; empty when the model came from memory.
  explicit Importer(std::string origin, std::filesystem::path external_base = {})
      : origin_(std::move(origin)), external_base_(std::move(external_base)) {}

  graph::Graph run(onnx::ModelProto& model) {
    read_opset(model);
    const onnx::GraphProto& g = model.graph();
    name_nodes(g);
    reject_unsupported_ops(g);
    for (const auto& t : g.initializer()) {
      auto c = constant_from_tensor(t, "initializer " + in_quotes(t.name()));
      values_[t.name()] = Value{-1, c};
    }
    read_inputs(g);
    sort_nodes(*model.mutable_graph(), topological_order(g));
    for (const auto& v : g.value_info()) declared_[v.name()] = &v.type();
    for (const auto& v : g.output()) declared_[v.name()] = &v.type();
    for (const auto& n : g.node())
      for (const auto& in : n.input()) used_names_.insert(in);
    for (const auto& o : g.output()) used_names_.insert(o.name());
    for (int i = 0; i < g.node_size(); ++i) import_node(g.node(i), node_names_[i]);
    read_outputs(g);
    return std::move(graph_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(origin_ + ": " + one_line(message));
  }

  [[noreturn]] void fail_node(const onnx::NodeProto& node, const std::string& name,
                              const std::string& message) const {
    fail("node " + in_quotes(name) + " (op " + in_quotes(node.op_type()) + ", opset " +
         std::to_string(opset_) + "): " + message);
  }

  // --- model-level checks -------------------------------------------------

  void read_opset(const onnx::ModelProto& model) {
    if (!model.has_graph() || model.opset_import_size() == 0)
      fail("not a valid ONNX model (no graph or no opset import)");
    bool found = false;
    for (const auto& o : model.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        opset_ = o.version();
        found = true;
      }
    }
    if (!found) fail("the model imports no opset of the default ONNX domain");
    if (opset_ < kMinOpset || opset_ > kMaxOpset)
      fail("opset " + std::to_string(opset_) + " is not supported (Tessera supports " +
           std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
    graph_.opset = opset_;
  }

  void name_nodes(const onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      node_names_.push_back(n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name());
    }
  }

  // BEGIN reviewed op versions (tests/serialization_onnx/test_op_versions.py parses this table)
  // Every op Tessera claims, with each since-version of its ONNX schema up to
  // kMaxOpset whose semantics the importer was checked against (the version
  // in force at opset 11 included). Most versions after 13 only add element
  // types (bfloat16, float8, int4...), which float32 models never use; the
  // ones that change semantics and how they are handled:
  //   AveragePool-19 dilations (refused unless all 1), BatchNormalization-14
  //   training outputs (refused), Clip-11 min/max inputs, Dropout-12
  //   training_mode input, Gelu-20, LayerNormalization-17, Pad-11 pads input
  //   and Pad-18 axes input, Pad-19 wrap mode (refused), ReduceSum-13's and
  //   the other reductions' -18 axes input (empty with noop_with_empty_axes:
  //   nothing reduced; ReduceMax/Min-12 and -20 and ReduceLogSum(Exp)-28
  //   only change types), Reshape-14 allowzero, Resize-11/13/18/19 (roi,
  //   antialias, keep_aspect_ratio_policy, axes, half_pixel_symmetric), Shape-15
  //   start/end, Softmax-13 axis, Split-13 split input and Split-18
  //   num_outputs, Squeeze/Unsqueeze-13 axes input, Mod-28 (defines float
  //   fmod = 0; Mod folds constants only), Attention-23 (bottom-right causal
  //   mask), -24 (nonpad_kv_seqlen: refused), -25 (windows).
  static const std::unordered_map<std::string, std::vector<int>>& reviewed_op_versions() {
    static const std::unordered_map<std::string, std::vector<int>> kVersions = {
        {"Abs", {6, 13}},
        {"Add", {7, 13, 14}},
        {"And", {7}},
        {"Attention", {23, 24, 25}},
        {"AveragePool", {11, 19, 22}},
        {"BatchNormalization", {9, 14, 15}},
        {"Cast", {9, 13, 19, 21, 23, 24, 25, 28}},
        {"CastLike", {15, 19, 21, 23, 24, 25}},
        {"Clip", {11, 12, 13}},
        {"Concat", {11, 13}},
        {"Constant", {11, 12, 13, 19, 21, 23, 24, 25}},
        {"ConstantOfShape", {9, 20, 21, 23, 24, 25}},
        {"Conv", {11, 22}},
        {"ConvTranspose", {11, 22}},
        {"Div", {7, 13, 14}},
        {"Dropout", {10, 12, 13, 22}},
        {"Equal", {11, 13, 19}},
        {"Greater", {9, 13}},
        {"GreaterOrEqual", {12, 16}},
        {"Less", {9, 13}},
        {"LessOrEqual", {12, 16}},
        {"Not", {1}},
        {"Or", {7}},
        {"Xor", {7}},
        {"Erf", {9, 13}},
        {"Exp", {6, 13}},
        {"Expand", {8, 13}},
        {"Flatten", {11, 13, 21, 23, 24, 25}},
        {"Gather", {11, 13}},
        {"GatherElements", {11, 13}},
        {"GatherND", {11, 12, 13}},
        {"CumSum", {11, 14}},
        {"Gelu", {20}},
        {"Gemm", {11, 13}},
        {"GlobalAveragePool", {1, 22}},
        {"HardSigmoid", {6, 22}},
        {"HardSwish", {14, 22}},
        {"Identity", {1, 13, 14, 16, 19, 21, 23, 24, 25}},
        {"IsNaN", {9, 13, 20}},
        {"LayerNormalization", {17}},
        {"RMSNormalization", {23}},
        {"LeakyRelu", {6, 16}},
        {"Log", {6, 13}},
        {"MatMul", {9, 13}},
        {"Max", {8, 12, 13}},
        {"MaxPool", {11, 12, 22}},
        {"Min", {8, 12, 13}},
        {"Mod", {10, 13, 28}},
        {"Mul", {7, 13, 14}},
        {"Neg", {6, 13}},
        {"Sin", {7, 22}},
        {"Cos", {7, 22}},
        {"Floor", {6, 13}},
        {"Ceil", {6, 13}},
        {"Round", {11, 22}},
        {"Sign", {9, 13}},
        {"Pad", {11, 13, 18, 19, 21, 23, 24, 25}},
        {"Pow", {7, 12, 13, 15}},
        {"Range", {11, 27}},
        {"Reciprocal", {6, 13}},
        {"ReduceL1", {11, 13, 18}},
        {"ReduceL2", {11, 13, 18}},
        {"ReduceLogSum", {11, 13, 18, 28}},
        {"ReduceLogSumExp", {11, 13, 18, 28}},
        {"ReduceMax", {11, 12, 13, 18, 20}},
        {"ReduceMean", {11, 13, 18}},
        {"ReduceMin", {11, 12, 13, 18, 20}},
        {"ReduceProd", {11, 13, 18}},
        {"ReduceSum", {11, 13}},
        {"ReduceSumSquare", {11, 13, 18}},
        {"Relu", {6, 13, 14}},
        {"Reshape", {5, 13, 14, 19, 21, 23, 24, 25}},
        {"Resize", {11, 13, 18, 19}},
        {"Shape", {1, 13, 15, 19, 21, 23, 24, 25}},
        {"Size", {1, 13, 19, 21, 23, 24, 25}},
        {"Sigmoid", {6, 13}},
        {"Slice", {11, 13}},
        {"Softmax", {11, 13}},
        {"LogSoftmax", {11, 13}},
        {"Softplus", {1, 22}},
        {"Split", {11, 13, 18}},
        {"Sqrt", {6, 13}},
        {"Squeeze", {11, 13, 21, 23, 24, 25}},
        {"Sub", {7, 13, 14}},
        {"Tanh", {6, 13}},
        {"Transpose", {1, 13, 21, 23, 24, 25}},
        {"Trilu", {14}},
        {"Unsqueeze", {11, 13, 21, 23, 24, 25}},
        {"Where", {9, 16}},
    };
    return kVersions;
  }
  // END reviewed op versions

  static bool is_supported_op(const std::string& op) {
    return reviewed_op_versions().count(op) != 0;
  }

  // The since-version of `op`'s schema in force at this opset, when it was
  // reviewed. libonnx knows the schemas up to its own newest opset: there it
  // must agree with the table, so a version the table misses is refused
  // rather than imported with older semantics.
  void check_op_version(const onnx::NodeProto& node, const std::string& name) const {
    const std::vector<int>& versions = reviewed_op_versions().at(node.op_type());
    int in_force = 0;
    for (int v : versions)
      if (v <= opset_) in_force = std::max(in_force, v);
    // Past libonnx's newest opset its registry answers with older schemas:
    // there the table (checked against the onnx wheel by a test) is the word.
    const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
    const auto range = ranges.find(onnx::ONNX_DOMAIN);
    const bool libonnx_knows = range != ranges.end() && opset_ <= range->second.second;
    const auto* schema =
        libonnx_knows ? onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset_), "")
                      : nullptr;
    if (in_force == 0)
      fail_node(node, name,
                node.op_type() + " is not defined at opset " + std::to_string(opset_) +
                    " (it appeared in opset " + std::to_string(versions.front()) + ")");
    const int known = schema ? schema->since_version() : in_force;
    if (known != in_force) {
      std::string reviewed;
      for (int v : versions)
        reviewed.append(reviewed.empty() ? "" : ", ").append(std::to_string(v));
      fail_node(node, name,
                "version " + std::to_string(std::max(in_force, known)) + " of " + node.op_type() +
                    " has not been reviewed for Tessera (reviewed versions: " + reviewed + ")");
    }
  }

  // Before anything else so that an unsupported op is what the user hears
  // about, not a shape inference failure it causes.
  void reject_unsupported_ops(const onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
      if (!default_domain || !is_supported_op(n.op_type())) {
        std::string op = default_domain ? n.op_type() : n.domain() + "." + n.op_type();
        fail("node " + in_quotes(node_names_[i]) + " (op " + in_quotes(op) + ", opset " +
             std::to_string(opset_) + ") is not supported by Tessera");
      }
      check_op_version(n, node_names_[i]);
    }
  }

  // The tensor with its external data (ONNX external data: `location`
  // relative to the model's folder, optional `offset` and `length` in bytes)
  // read into raw_data. As ONNX's checker does, the location must stay
  // inside the model's folder.
  onnx::TensorProto with_external_data(const onnx::TensorProto& t, const std::string& what) const {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& entry : t.external_data()) {
      try {
        if (entry.key() == "location") location = entry.value();
        if (entry.key() == "offset") offset = std::stoll(entry.value());
        if (entry.key() == "length") length = std::stoll(entry.value());
      } catch (const std::exception&) {
        fail(what + ": external data " + entry.key() + " '" + entry.value() + "' is not a number");
      }
    }
    if (external_base_.empty())
      fail(what +
           " keeps its data in an external file; a model loaded from memory must hold "
           "its tensors inside (load it from its file instead)");
    const std::filesystem::path relative(location);
    if (location.empty() || relative.is_absolute() ||
        std::any_of(relative.begin(), relative.end(),
                    [](const auto& part) { return part == ".."; }))
      fail(what + ": external data location '" + location +
           "' must be a file name relative to the model's folder");
    if (offset < 0 || length < -1)
      fail(what + ": external data offset/length must not be negative");
    const std::filesystem::path file = external_base_ / relative;
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(what + ": cannot open its external data file " + file.string());
    in.seekg(0, std::ios::end);
    const auto size = static_cast<int64_t>(in.tellg());
    if (length < 0) length = size - std::min(offset, size);
    if (offset > size || length > size - offset)
      fail(what + ": external data [" + std::to_string(offset) + ", " +
           std::to_string(offset + length) + ") lies beyond the end of " + file.string() + " (" +
           std::to_string(size) + " bytes)");
    onnx::TensorProto inline_tensor = t;
    inline_tensor.clear_external_data();
    inline_tensor.set_data_location(onnx::TensorProto::DEFAULT);
    std::string& bytes = *inline_tensor.mutable_raw_data();
    bytes.resize(static_cast<size_t>(length));
    in.seekg(offset);
    if (!in.read(bytes.data(), length))
      fail(what + ": cannot read its external data from " + file.string());
    return inline_tensor;
  }

  std::shared_ptr<Constant> constant_from_tensor(const onnx::TensorProto& t,
                                                 const std::string& what) const {
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      return constant_from_tensor(with_external_data(t, what), what);
    if (t.has_segment()) fail(what + " is segmented; Tessera does not support segmented tensors");
    auto c = std::make_shared<Constant>();
    c->name = t.name();
    for (int64_t d : t.dims()) {
      if (d < 0) fail(what + " has a negative dimension");
      c->shape.push_back(d);
    }
    const auto count = static_cast<size_t>(graph::shape_numel(c->shape));
    const bool raw = t.has_raw_data();
    auto check_count = [&](size_t have) {
      if (have != count)
        fail(what + " holds " + std::to_string(have) + " values but its shape " +
             graph::shape_to_string(c->shape) + " needs " + std::to_string(count));
    };
    switch (t.data_type()) {
      case onnx::TensorProto::FLOAT:
        c->dtype = DType::Float32;
        if (raw) {
          check_count(t.raw_data().size() / 4);
          c->floats = decode_raw<float>(t.raw_data(), count);
        } else {
          check_count(static_cast<size_t>(t.float_data_size()));
          c->floats.assign(t.float_data().begin(), t.float_data().end());
        }
        break;
      case onnx::TensorProto::INT64:
        c->dtype = DType::Int64;
        if (raw) {
          check_count(t.raw_data().size() / 8);
          c->ints = decode_raw<int64_t>(t.raw_data(), count);
        } else {
          check_count(static_cast<size_t>(t.int64_data_size()));
          c->ints.assign(t.int64_data().begin(), t.int64_data().end());
        }
        break;
      case onnx::TensorProto::INT32:
        c->dtype = DType::Int64;  // only ever read as an integer constant
        if (raw) {
          check_count(t.raw_data().size() / 4);
          auto v = decode_raw<int32_t>(t.raw_data(), count);
          c->ints.assign(v.begin(), v.end());
        } else {
          check_count(static_cast<size_t>(t.int32_data_size()));
          c->ints.assign(t.int32_data().begin(), t.int32_data().end());
        }
        break;
      case onnx::TensorProto::BOOL:
        c->dtype = DType::Int64;  // only ever read as a flag (Dropout's training_mode)
        if (raw) {
          check_count(t.raw_data().size());
          for (char b : t.raw_data()) c->ints.push_back(b != 0);
        } else {
          check_count(static_cast<size_t>(t.int32_data_size()));
          c->ints.assign(t.int32_data().begin(), t.int32_data().end());
        }
        break;
      default:
        fail(what + " has type " +
             onnx::TensorProto_DataType_Name(
                 static_cast<onnx::TensorProto_DataType>(t.data_type())) +
             "; Tessera supports float32 tensors (and int64/bool only as constant operands)");
    }
    return c;
  }

  void read_inputs(const onnx::GraphProto& g) {
    for (const auto& in : g.input()) {
      if (values_.count(in.name())) continue;  // an initializer: a weight, not an input
      const std::string what = "input " + in_quotes(in.name());
      if (!in.type().has_tensor_type()) fail(what + " is not a tensor");
      const auto& tt = in.type().tensor_type();
      // int64 inputs carry indices (token ids for an embedding Gather).
      const bool is_int64 = tt.elem_type() == onnx::TensorProto::INT64;
      if (tt.elem_type() != onnx::TensorProto::FLOAT && !is_int64)
        fail(what + " has type " + type_name(tt.elem_type()) +
             "; Tessera needs float32 activations (or int64 indices)");
      if (!tt.has_shape()) fail(what + " has no shape; Tessera needs static shapes");
      Shape shape;
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        if (d.has_dim_value() && d.dim_value() > 0) {
          shape.push_back(d.dim_value());
        } else if (d.has_dim_param() && !d.dim_param().empty()) {
          fail(what + " has symbolic dimension " + in_quotes(d.dim_param()) + " at axis " +
               std::to_string(i) + "; Tessera needs static shapes: give it a value with --shape " +
               d.dim_param() + "=N, --shape " + in.name() + "=DIMS" +
               (i == 0 ? " or --batch N" : ""));
        } else {
          fail(what + " has an unknown dimension at axis " + std::to_string(i) +
               "; Tessera needs static shapes: give it a value with --shape " + in.name() +
               "=DIMS" + (i == 0 ? " or --batch N" : ""));
        }
      }
      const int32_t t = add_tensor(in.name(), shape);
      if (is_int64) graph_.tensors[t].dtype = DType::Int64;
      graph_.inputs.push_back(t);
      values_[in.name()] = Value{t, nullptr};
    }
  }

  static std::string type_name(int32_t elem_type) {
    if (!onnx::TensorProto_DataType_IsValid(elem_type)) return "unknown";
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type));
  }

  // Kahn's algorithm, always taking the earliest ready node, so a sorted
  // file keeps its order.
  std::vector<int> topological_order(const onnx::GraphProto& g) {
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output())
        if (!o.empty()) producer[o] = i;
    std::vector<int> missing(g.node_size(), 0);
    std::vector<std::vector<int>> consumers(g.node_size());
    for (int i = 0; i < g.node_size(); ++i) {
      std::unordered_set<std::string> seen;
      for (const auto& in : g.node(i).input()) {
        if (in.empty() || values_.count(in) || !seen.insert(in).second) continue;
        auto p = producer.find(in);
        if (p == producer.end())
          fail_node(
              g.node(i), node_names_[i],
              "reads " + in_quotes(in) + ", which no node, graph input or initializer produces");
        ++missing[i];
        consumers[p->second].push_back(i);
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < g.node_size(); ++i)
      if (missing[i] == 0) ready.push(i);
    std::vector<int> order;
    while (!ready.empty()) {
      int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int c : consumers[i])
        if (--missing[c] == 0) ready.push(c);
    }
    if (order.size() != static_cast<size_t>(g.node_size())) {
      for (int i = 0; i < g.node_size(); ++i)
        if (missing[i] > 0) fail_node(g.node(i), node_names_[i], "is part of a cycle");
    }
    return order;
  }

  void sort_nodes(onnx::GraphProto& g, const std::vector<int>& order) {
    std::vector<onnx::NodeProto> nodes(g.node().begin(), g.node().end());
    std::vector<std::string> names;
    g.clear_node();
    for (int i : order) {
      *g.add_node() = std::move(nodes[i]);
      names.push_back(std::move(node_names_[i]));
    }
    node_names_ = std::move(names);
  }

  void read_outputs(const onnx::GraphProto& g) {
    std::unordered_set<std::string> output_names;
    for (const auto& o : g.output()) output_names.insert(o.name());
    for (const auto& o : g.output()) {
      const std::string what = "graph output " + in_quotes(o.name());
      auto it = values_.find(o.name());
      if (it == values_.end()) fail(what + " is not produced by any node");
      const Value& v = it->second;
      if (v.constant)
        fail(what + " is a constant (an initializer or computed from constants only); " +
             "Tessera needs outputs computed from the graph inputs");
      if (std::find(graph_.inputs.begin(), graph_.inputs.end(), v.tensor) != graph_.inputs.end())
        fail(what + " is the graph input " + in_quotes(graph_.tensors[v.tensor].name) +
             " itself; Tessera needs at least one operator between them");
      if (std::find(graph_.outputs.begin(), graph_.outputs.end(), v.tensor) != graph_.outputs.end())
        fail(what + " is the same tensor as another graph output; Tessera needs distinct outputs");
      auto& tensor = graph_.tensors[v.tensor];
      if (tensor.name != o.name()) {
        // Reached through Identity/Dropout: the tensor takes the output's name.
        if (output_names.count(tensor.name))
          fail(what + " is the same tensor as graph output " + in_quotes(tensor.name) +
               "; Tessera needs distinct outputs");
        tensor.name = o.name();
      }
      if (o.type().has_tensor_type() && o.type().tensor_type().elem_type() != 0 &&
          o.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT)
        fail(what + " has type " + type_name(o.type().tensor_type().elem_type()) +
             "; Tessera needs float32 activations");
      graph_.outputs.push_back(v.tensor);
    }
  }

  // --- tensors -------------------------------------------------------------

  int32_t add_tensor(const std::string& name, const Shape& shape) {
    graph::TensorInfo t;
    t.name = name;
    t.shape = shape;
    graph_.tensors.push_back(std::move(t));
    return static_cast<int32_t>(graph_.tensors.size() - 1);
  }

  // The graph tensor an operator reads for this value; a constant becomes a
  // weight tensor the first time an operator reads it, so unused
  // initializers never reach the graph.
  int32_t materialise(const onnx::NodeProto& node, const std::string& name, const Value& v) {
    if (!v.constant) return v.tensor;
    Constant& c = *v.constant;
    if (c.dtype != DType::Float32)
      fail_node(node, name,
                "reads the " + std::string(graph::dtype_name(c.dtype)) + " constant " +
                    in_quotes(c.name) + " as data; Tessera computes in float32");
    if (c.tensor < 0) {
      c.tensor = add_tensor(c.name, c.shape);
      auto& t = graph_.tensors[c.tensor];
      t.is_weight = true;
      t.weight = c.floats;
    }
    return c.tensor;
  }

  const Shape& shape_of(const Value& v) const {
    if (v.constant) return v.constant->shape;
    if (v.int64_view) return *v.int64_view;
    return graph_.tensors[v.tensor].shape;
  }

  // --- node helpers ----------------------------------------------------------

  static bool has_input(const onnx::NodeProto& node, int i) {
    return i < node.input_size() && !node.input(i).empty();
  }

  const Value& input(const onnx::NodeProto& node, const std::string& name, int i) const {
    if (!has_input(node, i)) fail_node(node, name, "input " + std::to_string(i) + " is missing");
    return values_.at(node.input(i));
  }

  // Only the first output of the ops we support carries data; the optional
  // others (MaxPool's Indices, Dropout's mask, training-mode BatchNorm
  // statistics) must be absent or unused.
  void require_only_first_output(const onnx::NodeProto& node, const std::string& name,
                                 const std::string& why) const {
    for (int i = 1; i < node.output_size(); ++i)
      if (!node.output(i).empty() && used_names_.count(node.output(i))) fail_node(node, name, why);
  }

  const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& key) const {
    for (const auto& a : node.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }

  void check_attr_type(const onnx::NodeProto& node, const std::string& name,
                       const onnx::AttributeProto& a, onnx::AttributeProto::AttributeType t) const {
    if (a.type() != t && a.type() != onnx::AttributeProto::UNDEFINED)
      fail_node(node, name, "attribute " + in_quotes(a.name()) + " has the wrong type");
  }

  int64_t attr_int(const onnx::NodeProto& node, const std::string& name, const std::string& key,
                   int64_t fallback) const {
    const auto* a = find_attr(node, key);
    if (!a) return fallback;
    check_attr_type(node, name, *a, onnx::AttributeProto::INT);
    return a->i();
  }

  float attr_float(const onnx::NodeProto& node, const std::string& name, const std::string& key,
                   float fallback) const {
    const auto* a = find_attr(node, key);
    if (!a) return fallback;
    check_attr_type(node, name, *a, onnx::AttributeProto::FLOAT);
    return a->f();
  }

  std::string attr_string(const onnx::NodeProto& node, const std::string& name,
                          const std::string& key, const std::string& fallback) const {
    const auto* a = find_attr(node, key);
    if (!a) return fallback;
    check_attr_type(node, name, *a, onnx::AttributeProto::STRING);
    return a->s();
  }

  std::vector<int64_t> attr_ints(const onnx::NodeProto& node, const std::string& name,
                                 const std::string& key, std::vector<int64_t> fallback) const {
    const auto* a = find_attr(node, key);
    if (!a) return fallback;
    check_attr_type(node, name, *a, onnx::AttributeProto::INTS);
    return {a->ints().begin(), a->ints().end()};
  }

  // A per-spatial-dim attribute (kernel_shape, strides, dilations): 2 positive values.
  std::vector<int64_t> spatial_attr(const onnx::NodeProto& node, const std::string& name,
                                    const std::string& key, std::vector<int64_t> fallback) const {
    auto v = attr_ints(node, name, key, std::move(fallback));
    if (v.size() != 2)
      fail_node(node, name,
                "attribute " + in_quotes(key) + " has " + std::to_string(v.size()) +
                    " values; Tessera supports 2-D (2 values) only");
    for (int64_t x : v)
      if (x <= 0) fail_node(node, name, "attribute " + in_quotes(key) + " must be positive");
    return v;
  }

  // auto_pad resolved into explicit pads [h_begin, w_begin, h_end, w_end]
  // with ONNX's rule: output = ceil(in / stride); SAME_UPPER puts the odd
  // pad at the end, SAME_LOWER at the beginning.
  std::vector<int64_t> resolve_pads(const onnx::NodeProto& node, const std::string& name,
                                    const Shape& input, const std::vector<int64_t>& kernel,
                                    const std::vector<int64_t>& strides,
                                    const std::vector<int64_t>& dilations) const {
    const std::string auto_pad = attr_string(node, name, "auto_pad", "NOTSET");
    auto pads = attr_ints(node, name, "pads", {0, 0, 0, 0});
    if (pads.size() != 4)
      fail_node(node, name,
                "attribute 'pads' has " + std::to_string(pads.size()) +
                    " values; Tessera supports 2-D (4 values) only");
    for (int64_t p : pads)
      if (p < 0) fail_node(node, name, "attribute 'pads' must not be negative");
    if (auto_pad == "NOTSET") return pads;
    const bool explicit_pads = std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p; });
    if (explicit_pads)
      fail_node(
          node, name,
          "attributes 'pads' and auto_pad " + in_quotes(auto_pad) + " cannot be used together");
    if (auto_pad == "VALID") return {0, 0, 0, 0};
    if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
      fail_node(node, name, "attribute auto_pad = " + in_quotes(auto_pad) + " is not supported");
    std::vector<int64_t> out(4, 0);
    for (size_t d = 0; d < 2; ++d) {
      const int64_t in = input[2 + d];
      const int64_t out_size = (in + strides[d] - 1) / strides[d];
      const int64_t extent = (kernel[d] - 1) * dilations[d] + 1;
      const int64_t total = std::max<int64_t>(0, (out_size - 1) * strides[d] + extent - in);
      const int64_t small = total / 2, large = total - total / 2;
      out[d] = auto_pad == "SAME_UPPER" ? small : large;
      out[2 + d] = auto_pad == "SAME_UPPER" ? large : small;
    }
    return out;
  }

  // ConvTranspose's pads: explicit, VALID, or from the output size (the
  // output_shape attribute, or input · stride for SAME_UPPER/LOWER) split
  // as ONNX says (SAME_UPPER: the smaller half first); then each end pad
  // lowered by output_padding, which extends the output past the last tap.
  std::vector<int64_t> resolve_transpose_pads(const onnx::NodeProto& node, const std::string& name,
                                              const Shape& input, const graph::OpAttributes& a,
                                              const std::vector<int64_t>& output_padding) const {
    const std::string auto_pad = attr_string(node, name, "auto_pad", "NOTSET");
    std::vector<int64_t> output_shape = attr_ints(node, name, "output_shape", {});
    if (output_shape.size() > 2) output_shape.erase(output_shape.begin(), output_shape.end() - 2);
    if (!output_shape.empty() && output_shape.size() != 2)
      fail_node(node, name, "attribute 'output_shape' must give both spatial dims");
    std::vector<int64_t> pads(4, 0);
    // SAME aims at input · stride but never pads below zero (ONNX Runtime's
    // rule: its output is then the taps' reach); an output_shape larger than
    // the taps reach grows the output at the end.
    const bool same =
        output_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER");
    if (same) output_shape = {input[2] * a.strides[0], input[3] * a.strides[1]};
    if (!output_shape.empty()) {
      for (size_t d = 0; d < 2; ++d) {
        int64_t total = a.strides[d] * (input[2 + d] - 1) + output_padding[d] +
                        (a.kernel_shape[d] - 1) * a.dilations[d] + 1 - output_shape[d];
        if (same) total = std::max<int64_t>(total, 0);
        // Halves rounded down, as ONNX's Python reference does.
        const int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
        pads[d] = auto_pad == "SAME_UPPER" ? half : total - half;
        pads[2 + d] = total - pads[d];
      }
    } else if (auto_pad == "NOTSET") {
      pads = attr_ints(node, name, "pads", pads);
      if (pads.size() != 4) fail_node(node, name, "attribute 'pads' must have 4 values (2-D)");
      for (int64_t p : pads)
        if (p < 0) fail_node(node, name, "attribute 'pads' must not be negative");
    } else if (auto_pad != "VALID") {
      fail_node(node, name, "attribute auto_pad = " + in_quotes(auto_pad) + " is not supported");
    }
    for (size_t d = 0; d < 2; ++d) {
      if (output_padding[d] < 0 || output_padding[d] >= std::max(a.strides[d], a.dilations[d]))
        fail_node(node, name, "output_padding must be below the stride or the dilation");
      pads[2 + d] -= output_padding[d];
    }
    return pads;
  }

  // A scalar constant input (Clip's min/max), as float.
  float scalar_constant(const onnx::NodeProto& node, const std::string& name, int i,
                        const std::string& what) const {
    const Value& v = input(node, name, i);
    if (!v.constant)
      fail_node(node, name,
                what + " (input " + in_quotes(node.input(i)) +
                    ") must be a constant (an initializer or Constant node)");
    const Constant& c = *v.constant;
    if (graph::shape_numel(c.shape) != 1) fail_node(node, name, what + " must be a scalar");
    return c.dtype == DType::Float32 ? c.floats[0] : static_cast<float>(c.ints[0]);
  }

  int64_t normalise_axis(const onnx::NodeProto& node, const std::string& name, int64_t axis,
                         int64_t rank) const {
    if (axis < -rank || axis >= rank)
      fail_node(
          node, name,
          "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    return axis < 0 ? axis + rank : axis;
  }

  // --- operators -------------------------------------------------------------

  void import_node(const onnx::NodeProto& node, const std::string& name) {
    const std::string& op = node.op_type();
    if (import_1d_as_2d(node, name)) return;
    if (op == "Identity") return alias(node, name);
    if (op == "Dropout") return import_dropout(node, name);
    if (op == "Constant") return import_constant(node, name);
    if (op == "Shape") return import_shape(node, name);
    if (op == "ConstantOfShape") return import_constant_of_shape(node, name);
    if (op == "Range") return import_range(node, name);
    if (op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" ||
        op == "GreaterOrEqual")
      return import_comparison(node, name);
    if (op == "And" || op == "Or" || op == "Xor" || op == "Not") return import_logic(node, name);
    if (op == "Size") return import_size(node, name);
    if (op == "Mod") return import_mod(node, name);
    if (op == "GatherElements") return import_gather_elements(node, name);
    if (op == "GatherND") return import_gather_nd(node, name);
    if (op == "Trilu") return import_trilu(node, name);
    if (op == "Attention") return import_attention(node, name);
    if (op == "Cast" || op == "CastLike") return import_cast(node, name);
    if (op == "Unsqueeze" || op == "Squeeze") return import_squeeze(node, name);
    if (op == "Split") return import_split(node, name);
    if (op == "Max" || op == "Min") return import_max_min(node, name);

    graph::Operator o;
    // Where reads its condition through a float 0/1 copy (emit_node).
    onnx::NodeProto where_node;
    const onnx::NodeProto* emit_node = &node;
    o.name = name;
    o.type = *graph::op_type_from_name(op);
    std::vector<int> data_inputs;  // ONNX input positions that become operator inputs
    switch (o.type) {
      case OpType::Conv:
      case OpType::ConvTranspose: {
        const bool transposed = o.type == OpType::ConvTranspose;
        const Shape x = shape_of(input(node, name, 0));
        const Shape w = shape_of(input(node, name, 1));
        if (x.size() != 4 || w.size() != 4)
          fail_node(node, name,
                    transposed ? "only 1-D and 2-D transposed convolution (3-D or 4-D X and W) "
                                 "is supported"
                               : "only 1-D and 2-D convolution (3-D or 4-D X and W) is supported");
        o.attrs.kernel_shape = spatial_attr(node, name, "kernel_shape", {w[2], w[3]});
        if (o.attrs.kernel_shape[0] != w[2] || o.attrs.kernel_shape[1] != w[3])
          fail_node(node, name, "attribute 'kernel_shape' does not match the shape of W");
        o.attrs.strides = spatial_attr(node, name, "strides", {1, 1});
        o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
        o.attrs.group = attr_int(node, name, "group", 1);
        if (transposed) {
          const std::vector<int64_t> output_padding =
              attr_ints(node, name, "output_padding", {0, 0});
          if (output_padding.size() != 2)
            fail_node(node, name, "attribute 'output_padding' must have 2 values (2-D)");
          o.attrs.pads = resolve_transpose_pads(node, name, x, o.attrs, output_padding);
        } else {
          o.attrs.pads =
              resolve_pads(node, name, x, o.attrs.kernel_shape, o.attrs.strides, o.attrs.dilations);
        }
        data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
        break;
      }
      case OpType::Gemm:
        o.attrs.alpha = attr_float(node, name, "alpha", 1.0f);
        o.attrs.beta = attr_float(node, name, "beta", 1.0f);
        o.attrs.trans_a = attr_int(node, name, "transA", 0) != 0;
        o.attrs.trans_b = attr_int(node, name, "transB", 0) != 0;
        data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
        break;
      case OpType::MatMul:
      case OpType::Add:
      case OpType::Mul:
        data_inputs = {0, 1};
        break;
      case OpType::Relu:
      case OpType::Sigmoid:
      case OpType::GlobalAveragePool:
        data_inputs = {0};
        break;
      case OpType::Clip:
        if (has_input(node, 1)) o.attrs.clip_min = scalar_constant(node, name, 1, "min");
        if (has_input(node, 2)) o.attrs.clip_max = scalar_constant(node, name, 2, "max");
        data_inputs = {0};
        break;
      case OpType::MaxPool:
      case OpType::AveragePool: {
        const Shape x = shape_of(input(node, name, 0));
        if (x.size() != 4)
          fail_node(node, name, "only 1-D and 2-D pooling (3-D or 4-D input) is supported");
        if (o.type == OpType::MaxPool) {
          if (node.output_size() > 1 && !node.output(1).empty())
            fail_node(node, name, "the Indices output is not supported");
          const int64_t storage_order = attr_int(node, name, "storage_order", 0);
          if (storage_order != 0)
            fail_node(node, name,
                      "attribute storage_order = " + std::to_string(storage_order) +
                          " is not supported (only 0)");
          o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
        } else {
          o.attrs.count_include_pad = attr_int(node, name, "count_include_pad", 0) != 0;
          // AveragePool-19 added dilations; the reference kernel follows ONNX
          // Runtime's window clipping, which it implements without them.
          o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
          if (o.attrs.dilations != std::vector<int64_t>{1, 1})
            fail_node(node, name, "attribute 'dilations' other than 1 is not supported");
        }
        if (!find_attr(node, "kernel_shape"))
          fail_node(node, name, "attribute 'kernel_shape' is missing");
        o.attrs.kernel_shape = spatial_attr(node, name, "kernel_shape", {});
        o.attrs.strides = spatial_attr(node, name, "strides", {1, 1});
        o.attrs.ceil_mode = attr_int(node, name, "ceil_mode", 0) != 0;
        o.attrs.pads =
            resolve_pads(node, name, x, o.attrs.kernel_shape, o.attrs.strides, o.attrs.dilations);
        data_inputs = {0};
        break;
      }
      case OpType::Flatten: {
        const Shape x = shape_of(input(node, name, 0));
        const auto rank = static_cast<int64_t>(x.size());
        int64_t axis = attr_int(node, name, "axis", 1);
        // Flatten's axis may equal the rank (everything in the first dim).
        if (axis < -rank || axis > rank)
          fail_node(
              node, name,
              "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
        if (axis < 0) axis += rank;
        o.attrs.axis = axis;
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= x[d];
        o.attrs.new_shape = {outer, inner};
        data_inputs = {0};
        break;
      }
      case OpType::Reshape:
        o.attrs.new_shape = resolve_reshape(node, name);
        data_inputs = {0};
        break;
      case OpType::Concat: {
        if (!find_attr(node, "axis")) fail_node(node, name, "attribute 'axis' is missing");
        const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
        o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", 0), rank);
        for (int i = 0; i < node.input_size(); ++i)
          if (has_input(node, i)) data_inputs.push_back(i);
        break;
      }
      case OpType::Softmax:
      case OpType::LogSoftmax: {
        const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
        // (Log)Softmax-1/11 flatten to 2-D at axis (default 1); -13 is per-axis (default -1).
        o.attrs.softmax_coerce_2d = opset_ < 13;
        const int64_t axis = attr_int(node, name, "axis", opset_ < 13 ? 1 : -1);
        o.attrs.axis = normalise_axis(node, name, axis, rank);
        data_inputs = {0};
        break;
      }
      case OpType::BatchNormalization: {
        const int64_t training_mode = attr_int(node, name, "training_mode", 0);
        if (training_mode != 0)
          fail_node(node, name, "attribute training_mode = 1 is not supported (inference only)");
        require_only_first_output(node, name,
                                  "only the first output (Y) is supported: training-mode "
                                  "statistics outputs are used");
        o.attrs.epsilon = attr_float(node, name, "epsilon", 1e-5f);
        data_inputs = {0, 1, 2, 3, 4};
        break;
      }
      case OpType::Transpose: {
        const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
        std::vector<int64_t> reversed;
        for (int64_t d = rank; d-- > 0;) reversed.push_back(d);
        o.attrs.perm = attr_ints(node, name, "perm", reversed);
        data_inputs = {0};
        break;
      }
      case OpType::Gather: {
        const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
        o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", 0), rank);
        const Value& indices = input(node, name, 1);
        if (indices.constant) {
          if (indices.constant->dtype != DType::Int64)
            fail_node(node, name, "the indices " + in_quotes(node.input(1)) + " must be integers");
          o.attrs.indices = indices.constant->ints;
          o.attrs.indices_shape = indices.constant->shape;
          data_inputs = {0};
        } else {
          data_inputs = {0, 1};  // an int64 model input (token ids)
        }
        break;
      }
      case OpType::Sub:
      case OpType::Div:
      case OpType::Pow:
        data_inputs = {0, 1};
        break;
      case OpType::Sqrt:
      case OpType::Erf:
      case OpType::Tanh:
        data_inputs = {0};
        break;
      case OpType::Gelu: {
        const std::string approximate = attr_string(node, name, "approximate", "none");
        if (approximate != "none" && approximate != "tanh")
          fail_node(node, name,
                    "attribute approximate = " + in_quotes(approximate) +
                        " is not supported ('none' or 'tanh')");
        o.attrs.gelu_tanh = approximate == "tanh";
        data_inputs = {0};
        break;
      }
      case OpType::Where: {
        // The condition is read as float 0/1 (graph/operator.hpp).
        where_node = node;
        where_node.set_input(0, bool_operand(node, name, 0));
        emit_node = &where_node;
        data_inputs = {0, 1, 2};
        break;
      }
      case OpType::Expand: {
        const Shape x = shape_of(input(node, name, 0));
        const std::vector<int64_t> target = int_values(node, name, 1, "the shape");
        o.attrs.new_shape = broadcast_or_fail(node, name, x, target);
        data_inputs = {0};
        break;
      }
      case OpType::ReduceMean:
      case OpType::ReduceSum:
      case OpType::ReduceMax:
      case OpType::ReduceMin:
      case OpType::ReduceProd:
      case OpType::ReduceSumSquare:
      case OpType::ReduceL1:
      case OpType::ReduceL2:
      case OpType::ReduceLogSum:
      case OpType::ReduceLogSumExp: {
        const Shape x = shape_of(input(node, name, 0));
        const auto rank = static_cast<int64_t>(x.size());
        std::vector<int64_t> axes;
        // The axes became an optional input at ReduceSum-13 and the others' -18.
        const bool axes_input = opset_ >= (o.type == OpType::ReduceSum ? 13 : 18);
        if (axes_input) {
          if (has_input(node, 1)) axes = int_values(node, name, 1, "the axes");
        } else {
          axes = attr_ints(node, name, "axes", {});
        }
        o.attrs.keepdims = attr_int(node, name, "keepdims", 1) != 0;
        // noop_with_empty_axes: no axis is reduced, and the op still applies
        // to each element (ReduceSumSquare squares it, ReduceL1 takes |x|).
        const bool noop = axes_input && attr_int(node, name, "noop_with_empty_axes", 0) != 0;
        if (axes.empty() && !noop)
          for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
        for (int64_t& a : axes) a = normalise_axis(node, name, a, rank);
        std::sort(axes.begin(), axes.end());
        if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
          fail_node(node, name, "the axes list an axis twice");
        o.attrs.axes = axes;
        data_inputs = {0};
        // The spatial mean of an NCHW tensor (squeeze-and-excitation blocks,
        // as PyTorch exports x.mean((2, 3), keepdim=True)) is GlobalAveragePool,
        // which has a SIMD kernel and works on NHWC activations.
        if (o.type == OpType::ReduceMean && rank == 4 && axes == std::vector<int64_t>{2, 3} &&
            o.attrs.keepdims) {
          o.type = OpType::GlobalAveragePool;
          o.attrs = {};
        }
        break;
      }
      case OpType::LayerNormalization:
      case OpType::RMSNormalization: {
        const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
        o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", -1), rank);
        o.attrs.epsilon = attr_float(node, name, "epsilon", 1e-5f);
        require_only_first_output(node, name,
                                  "only the first output (Y) is supported: the Mean or "
                                  "InvStdDev output is used");
        data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
        break;
      }
      case OpType::Slice:
        resolve_slice(node, name, o.attrs);
        data_inputs = {0};
        break;
      case OpType::LeakyRelu:
        o.attrs.alpha = attr_float(node, name, "alpha", 0.01f);
        data_inputs = {0};
        break;
      case OpType::HardSigmoid:
        o.attrs.alpha = attr_float(node, name, "alpha", 0.2f);
        o.attrs.beta = attr_float(node, name, "beta", 0.5f);
        data_inputs = {0};
        break;
      case OpType::HardSwish:
      case OpType::Neg:
      case OpType::Exp:
      case OpType::Log:
      case OpType::Reciprocal:
      case OpType::Abs:
      case OpType::Softplus:
      case OpType::IsNaN:
      case OpType::Sin:
      case OpType::Cos:
      case OpType::Floor:
      case OpType::Ceil:
      case OpType::Round:
      case OpType::Sign:
        data_inputs = {0};
        break;
      case OpType::Max:  // import_max_min: two operands
      case OpType::Min:
        data_inputs = {0, 1};
        break;
      case OpType::Pad:
        resolve_pad(node, name, o.attrs);
        data_inputs = {0};
        break;
      case OpType::Resize:
        resolve_resize(node, name, o.attrs);
        data_inputs = {0};
        break;
      case OpType::FusedAttention:  // the compiler's, never a model's (no reviewed version)
        fail_node(node, name, "FusedAttention is made by the compiler, not imported");
      case OpType::CumSum: {
        if (attr_int(node, name, "exclusive", 0) != 0 || attr_int(node, name, "reverse", 0) != 0)
          fail_node(node, name, "exclusive and reverse sums are not supported");
        const std::vector<int64_t> axis = int_values(node, name, 1, "the axis");
        if (axis.size() != 1) fail_node(node, name, "the axis must be one value");
        o.attrs.axis = normalise_axis(node, name, axis[0],
                                      static_cast<int64_t>(shape_of(input(node, name, 0)).size()));
        data_inputs = {0};
        break;
      }
      case OpType::ToIndex:  // made by integers_as_float, never a model's
      case OpType::Cast:     // import_cast and import_comparison, before this switch
      case OpType::Equal:
      case OpType::Less:
      case OpType::LessOrEqual:
      case OpType::Greater:
      case OpType::GreaterOrEqual:
        fail_node(node, name, "has an import path of its own");
    }
    emit(*emit_node, name, std::move(o), data_inputs);
  }

  std::vector<int64_t> resolve_reshape(const onnx::NodeProto& node, const std::string& name) const {
    const Shape x = shape_of(input(node, name, 0));
    const Value& sv = input(node, name, 1);
    if (!sv.constant || sv.constant->dtype != DType::Int64)
      fail_node(node, name,
                "the shape input " + in_quotes(node.input(1)) +
                    " must be an int64 constant (an initializer or Constant node)");
    if (sv.constant->shape.size() != 1) fail_node(node, name, "the shape input must be 1-D");
    const bool allow_zero = attr_int(node, name, "allowzero", 0) != 0;
    std::vector<int64_t> shape = sv.constant->ints;
    int infer_at = -1;
    int64_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allow_zero) {
        if (i >= x.size())
          fail_node(node, name,
                    "shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " +
                        std::to_string(x.size()));
        shape[i] = x[i];
      }
      if (shape[i] == -1) {
        if (infer_at >= 0) fail_node(node, name, "the shape has more than one -1");
        infer_at = static_cast<int>(i);
      } else if (shape[i] < 0) {
        fail_node(node, name, "the shape has the invalid entry " + std::to_string(shape[i]));
      } else {
        known *= shape[i];
      }
    }
    const int64_t total = graph::shape_numel(x);
    if (infer_at >= 0) {
      if (known == 0 || total % known != 0)
        fail_node(node, name,
                  "cannot reshape " + graph::shape_to_string(x) + " to " +
                      graph::shape_to_string(sv.constant->ints));
      shape[infer_at] = total / known;
    }
    if (graph::shape_numel(shape) != total)
      fail_node(node, name,
                "cannot reshape " + graph::shape_to_string(x) + " (" + std::to_string(total) +
                    " elements) to " + graph::shape_to_string(shape));
    return shape;
  }

  // --- shape computations, folded at import ----------------------------------
  // PyTorch exports compute reshape targets from Shape, Gather, Unsqueeze,
  // Concat, ConstantOfShape, Range... With static shapes all of it is known
  // here, so it folds into int64 constants instead of becoming operators.

  // Largest element count a folded constant may have (bounds import memory).
  static constexpr int64_t kMaxFoldedElements = int64_t{1} << 28;

  // A 1-D or scalar int64 constant input's values.
  std::vector<int64_t> int_values(const onnx::NodeProto& node, const std::string& name, int i,
                                  const std::string& what) const {
    const Value& v = input(node, name, i);
    if (!v.constant || v.constant->dtype != DType::Int64)
      fail_node(node, name,
                what + " (input " + in_quotes(node.input(i)) +
                    ") must be an int64 constant (an initializer, a Constant node or computed "
                    "from constants and static shapes)");
    if (v.constant->shape.size() > 1) fail_node(node, name, what + " must be 1-D or a scalar");
    return v.constant->ints;
  }

  // numpy broadcast of two shapes, or a node error.
  Shape broadcast_or_fail(const onnx::NodeProto& node, const std::string& name, const Shape& a,
                          const Shape& b) const {
    const size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (size_t i = 0; i < rank; ++i) {
      const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
      const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
      if (da != db && da != 1 && db != 1)
        fail_node(node, name,
                  "shapes " + graph::shape_to_string(a) + " and " + graph::shape_to_string(b) +
                      " cannot be broadcast together");
      out[i] = da == 1 ? db : da;
    }
    return out;
  }

  // For every element of the broadcast shape, the flat index into a and b.
  static std::vector<std::pair<size_t, size_t>> broadcast_pairs(const Shape& a, const Shape& b,
                                                                const Shape& out) {
    std::vector<std::pair<size_t, size_t>> pairs;
    const size_t rank = out.size();
    auto strides_in = [&](const Shape& s) {
      std::vector<int64_t> st(rank, 0);
      const auto dense = graph::shape_strides(s);
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d] != 1) st[d + rank - s.size()] = dense[d];
      return st;
    };
    const auto sa = strides_in(a), sb = strides_in(b);
    std::vector<int64_t> index(rank, 0);
    const int64_t n = graph::shape_numel(out);
    for (int64_t k = 0; k < n; ++k) {
      int64_t fa = 0, fb = 0;
      for (size_t d = 0; d < rank; ++d) fa += index[d] * sa[d], fb += index[d] * sb[d];
      pairs.emplace_back(static_cast<size_t>(fa), static_cast<size_t>(fb));
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < out[d]) break;
        index[d] = 0;
      }
    }
    return pairs;
  }

  std::string unused_name(const std::string& base) const {
    std::string n = base;
    for (int i = 1; values_.count(n) || used_names_.count(n); ++i)
      n = base + "_" + std::to_string(i);
    return n;
  }

  void define_constant(const onnx::NodeProto& node, const std::string& name,
                       std::shared_ptr<Constant> c) {
    if (graph::shape_numel(c->shape) > kMaxFoldedElements)
      fail_node(node, name, "folds to a constant of more than 2^28 elements");
    c->name = node.output(0);
    c->tensor = -1;
    values_[node.output(0)] = Value{-1, std::move(c)};
  }

  void import_shape(const onnx::NodeProto& node, const std::string& name) {
    const Shape x = shape_of(input(node, name, 0));
    const auto rank = static_cast<int64_t>(x.size());
    // Shape-15's start/end: negative counts from the back, then clamped.
    auto clamp_dim = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const int64_t start = clamp_dim(attr_int(node, name, "start", 0));
    const int64_t end = std::max(start, clamp_dim(attr_int(node, name, "end", rank)));
    auto c = std::make_shared<Constant>();
    c->dtype = DType::Int64;
    c->ints.assign(x.begin() + start, x.begin() + end);
    c->shape = {end - start};
    define_constant(node, name, std::move(c));
  }

  void import_constant_of_shape(const onnx::NodeProto& node, const std::string& name) {
    const std::vector<int64_t> dims = int_values(node, name, 0, "the shape");
    int64_t count = 1;
    for (int64_t d : dims) {
      if (d < 0) fail_node(node, name, "the shape has the negative entry " + std::to_string(d));
      if (d > kMaxFoldedElements || (count *= d) > kMaxFoldedElements)
        fail_node(node, name, "folds to a constant of more than 2^28 elements");
    }
    auto c = std::make_shared<Constant>();  // ONNX's default value: float 0
    if (const auto* a = find_attr(node, "value")) {
      check_attr_type(node, name, *a, onnx::AttributeProto::TENSOR);
      auto v = constant_from_tensor(a->t(), "node " + in_quotes(name) + " value");
      if (graph::shape_numel(v->shape) != 1)
        fail_node(node, name, "attribute 'value' must hold exactly one element");
      c->dtype = v->dtype;
      if (v->dtype == DType::Int64)
        c->ints.assign(static_cast<size_t>(count), v->ints[0]);
      else
        c->floats.assign(static_cast<size_t>(count), v->floats[0]);
    } else {
      c->floats.assign(static_cast<size_t>(count), 0.0f);
    }
    c->shape = dims;
    define_constant(node, name, std::move(c));
  }

  // A scalar constant input as double, for Range.
  double scalar_value(const onnx::NodeProto& node, const std::string& name, int i) const {
    const Value& v = input(node, name, i);
    if (!v.constant || graph::shape_numel(v.constant->shape) != 1)
      fail_node(node, name, "input " + in_quotes(node.input(i)) + " must be a scalar constant");
    return v.constant->dtype == DType::Int64 ? static_cast<double>(v.constant->ints[0])
                                             : static_cast<double>(v.constant->floats[0]);
  }

  void import_range(const onnx::NodeProto& node, const std::string& name) {
    const double start = scalar_value(node, name, 0);
    const double limit = scalar_value(node, name, 1);
    const double delta = scalar_value(node, name, 2);
    if (delta == 0) fail_node(node, name, "delta must not be 0");
    const double steps = std::ceil((limit - start) / delta);
    if (steps > static_cast<double>(kMaxFoldedElements))
      fail_node(node, name, "folds to a constant of more than 2^28 elements");
    const auto count = static_cast<int64_t>(std::max(0.0, steps));
    auto c = std::make_shared<Constant>();
    c->dtype = input(node, name, 0).constant->dtype;
    c->shape = {count};
    for (int64_t k = 0; k < count; ++k) {
      if (c->dtype == DType::Int64)
        c->ints.push_back(static_cast<int64_t>(start) + k * static_cast<int64_t>(delta));
      else
        c->floats.push_back(static_cast<float>(start + static_cast<double>(k) * delta));
    }
    define_constant(node, name, std::move(c));
  }

  // Equal, Less, LessOrEqual, Greater, GreaterOrEqual. Of constants (shape
  // computations, masks built at export time: GPT-2's causal mask at sequence
  // 1024, as torch.onnx exports it, is LessOrEqual of two ranges) they fold
  // into bool (int64 0/1) constants; with a run-time operand they run
  // (OpType Equal .. GreaterOrEqual), giving a run-time bool.
  void import_comparison(const onnx::NodeProto& node, const std::string& name) {
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

  // Attention (opset 23-25) as the ops its ONNX function expands to, which
  // graph/fuse_attention.hpp then fuses into one FusedAttention:
  //   K = Concat(past_key, K), V = Concat(past_value, V)    (present_key/value)
  //   Y = Softmax(scale · Q·Kᵀ [softcapped] + attn_mask + causal/window mask) · V
  // with 3-D inputs split into heads (q_num_heads, kv_num_heads) and K, V
  // repeated over each group of query heads (GQA / MQA). The causal and
  // window masks are bottom-right aligned: query i sits at i + past length.
  // qk_matmul_output is the scores at the stage its mode names. Refused in one
  // line: nonpad_kv_seqlen (an external cache whose length is data), bool
  // masks computed at run time.
  void import_attention(const onnx::NodeProto& node, const std::string& name) {
    if (has_input(node, 6))
      fail_node(node, name, "nonpad_kv_seqlen (an external KV cache) is not supported");
    if (has_input(node, 4) != has_input(node, 5))
      fail_node(node, name, "past_key and past_value must be given together");
    const int64_t precision = attr_int(node, name, "softmax_precision", 1);
    if (precision != onnx::TensorProto::FLOAT)
      fail_node(node, name, "softmax_precision other than float32 is not supported");
    const Shape q = shape_of(input(node, name, 0));
    const Shape k = shape_of(input(node, name, 1));
    const Shape v = shape_of(input(node, name, 2));
    const bool three_d = q.size() == 3;
    if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
      fail_node(node, name, "Q, K and V must all be 3-D or all 4-D");
    const int64_t batch = q[0];
    int64_t q_heads = q.size() == 4 ? q[1] : attr_int(node, name, "q_num_heads", 0);
    int64_t kv_heads = k.size() == 4 ? k[1] : attr_int(node, name, "kv_num_heads", 0);
    if (three_d &&
        (q_heads < 1 || kv_heads < 1 || q[2] % q_heads || k[2] % kv_heads || v[2] % kv_heads))
      fail_node(node, name,
                "3-D inputs need q_num_heads and kv_num_heads that divide their hidden sizes");
    const int64_t q_len = three_d ? q[1] : q[2], kv_len = three_d ? k[1] : k[2];
    const int64_t head = three_d ? q[2] / q_heads : q[3];
    const int64_t v_head = three_d ? v[2] / kv_heads : v[3];
    if (q_heads % kv_heads != 0 || k[0] != batch || v[0] != batch ||
        (!three_d && v[1] != kv_heads) || (three_d ? k[2] / kv_heads : k[3]) != head ||
        (three_d ? v[1] : v[2]) != kv_len)
      fail_node(node, name,
                "Q, K and V do not agree: one batch size, K with Q's head size, V with K's "
                "sequence length, q_num_heads a multiple of kv_num_heads");
    int64_t past = 0;
    if (has_input(node, 4)) {
      const Shape pk = shape_of(input(node, name, 4));
      const Shape pv = shape_of(input(node, name, 5));
      past = pk.size() == 4 ? pk[2] : 0;
      if (pk != Shape{batch, kv_heads, past, head} || pv != Shape{batch, kv_heads, past, v_head})
        fail_node(node, name, "past_key and past_value must be [B, kv_num_heads, P, head size]");
    }
    const int64_t total = past + kv_len;

    // One emitted op: its inputs by value name, its output a fresh name.
    int step = 0;
    auto op = [&](OpType type, graph::OpAttributes attrs, std::vector<std::string> inputs,
                  const std::string& out = "") {
      graph::Operator o;
      o.name = name + "/" + std::to_string(step++) + "_" + std::string(graph::op_type_name(type));
      o.type = type;
      o.attrs = std::move(attrs);
      const std::string result = out.empty() ? unused_name(o.name) : out;
      emit_part(node, name, std::move(o), inputs, result);
      return result;
    };
    auto constant = [&](Shape shape, std::vector<float> values) {
      auto c = std::make_shared<Constant>();
      c->shape = std::move(shape);
      c->floats = std::move(values);
      c->name = unused_name(name + "/constant");
      values_[c->name] = Value{-1, c};
      return c->name;
    };
    auto reshape = [&](const std::string& x, Shape to, const std::string& out = "") {
      graph::OpAttributes a;
      a.new_shape = std::move(to);
      return op(OpType::Reshape, a, {x}, out);
    };
    auto transpose = [&](const std::string& x, std::vector<int64_t> perm) {
      graph::OpAttributes a;
      a.perm = std::move(perm);
      return op(OpType::Transpose, a, {x});
    };
    // [B, S, H·D] -> [B, H, S, D]
    auto split_heads = [&](const std::string& x, int64_t heads, int64_t len, int64_t size) {
      return transpose(reshape(x, {batch, len, heads, size}), {0, 2, 1, 3});
    };
    // The cache and the new keys or values, [B, Hkv, P + L, D]: present_key/value.
    auto with_past = [&](const std::string& x, int past_input, int present_output) {
      const bool wanted = node.output_size() > present_output &&
                          !node.output(present_output).empty() &&
                          used_names_.count(node.output(present_output));
      if (past == 0 && !wanted) return x;
      const std::string present = wanted ? node.output(present_output) : "";
      if (past == 0) {  // no cache: present is the new keys or values themselves
        graph::OpAttributes a;
        a.new_shape = shape_of(values_.at(x));
        return op(OpType::Reshape, a, {x}, present);
      }
      graph::OpAttributes a;
      a.axis = 2;
      return op(OpType::Concat, a, {node.input(past_input), x}, present);
    };
    // [B, Hkv, T, D] -> [B, Hq, T, D], each KV head serving q_heads / kv_heads query heads.
    auto repeat_heads = [&](const std::string& x, int64_t size) {
      if (q_heads == kv_heads) return x;
      const int64_t group = q_heads / kv_heads;
      graph::OpAttributes a;
      a.new_shape = {batch, kv_heads, group, total, size};
      const std::string wide =
          op(OpType::Expand, a, {reshape(x, {batch, kv_heads, 1, total, size})});
      return reshape(wide, {batch, q_heads, total, size});
    };
    std::string qh = node.input(0), kh = node.input(1), vh = node.input(2);
    if (three_d) {
      qh = split_heads(qh, q_heads, q_len, head);
      kh = split_heads(kh, kv_heads, kv_len, head);
      vh = split_heads(vh, kv_heads, kv_len, v_head);
    }
    kh = repeat_heads(with_past(kh, 4, 1), head);
    vh = repeat_heads(with_past(vh, 5, 2), v_head);
    std::string scores = op(OpType::MatMul, {}, {qh, transpose(kh, {0, 1, 3, 2})});
    const float scale = attr_float(node, name, "scale", 1.0f / std::sqrt(static_cast<float>(head)));
    scores = op(OpType::Mul, {}, {scores, constant({}, {scale})});
    // qk_matmul_output: the scores after the scale (mode 0), the softcap (1),
    // the masks (2) or the softmax (3).
    std::string stages[4] = {scores};
    const float softcap = attr_float(node, name, "softcap", 0.0f);
    if (softcap > 0.0f) {
      const std::string cap = constant({}, {softcap});
      scores =
          op(OpType::Mul, {}, {op(OpType::Tanh, {}, {op(OpType::Div, {}, {scores, cap})}), cap});
    }
    stages[1] = scores;
    // One additive mask, so that the chain is MatMul, Mul, Add, Softmax,
    // MatMul (graph/fuse_softmax_input.hpp and fuse_attention.hpp fuse it):
    // the attn_mask (a bool one as 0 / -inf) plus the causal and window mask
    // (folded into one constant where the attn_mask is one).
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    std::string bias;
    if (has_input(node, 3)) {
      const Value& mask = input(node, name, 3);
      bias = node.input(3);
      if (mask.constant && mask.constant->dtype == DType::Int64) {
        std::vector<float> values;
        for (int64_t x : mask.constant->ints) values.push_back(x ? 0.0f : kMasked);
        bias = constant(mask.constant->shape, std::move(values));
      } else if (!mask.constant && graph_.tensors[mask.tensor].dtype != DType::Float32) {
        fail_node(node, name,
                  "a bool attn_mask must be a constant; Tessera has no bool activations");
      }
    }
    const bool causal = attr_int(node, name, "is_causal", 0) != 0;
    const int64_t left = attr_int(node, name, "left_window_size", -1);
    const int64_t right = attr_int(node, name, "right_window_size", -1);
    if (causal || left >= 0 || right >= 0) {
      // Query i is at position i + past among the keys.
      std::vector<float> values;
      for (int64_t i = past; i < past + q_len; ++i)
        for (int64_t j = 0; j < total; ++j) {
          const bool attend =
              (!causal || j <= i) && (left < 0 || j >= i - left) && (right < 0 || j <= i + right);
          values.push_back(attend ? 0.0f : kMasked);
        }
      const std::string positions = constant({q_len, total}, std::move(values));
      bias = bias.empty() ? positions : op(OpType::Add, {}, {bias, positions});
    }
    if (!bias.empty()) scores = op(OpType::Add, {}, {scores, bias});
    stages[2] = scores;
    graph::OpAttributes softmax;
    softmax.axis = 3;
    const std::string probs = op(OpType::Softmax, softmax, {scores});
    stages[3] = probs;
    if (node.output_size() > 3 && !node.output(3).empty() && used_names_.count(node.output(3))) {
      const int64_t mode = attr_int(node, name, "qk_matmul_output_mode", 0);
      if (mode < 0 || mode > 3) fail_node(node, name, "qk_matmul_output_mode must be 0, 1, 2 or 3");
      values_[node.output(3)] = values_.at(stages[mode]);
    }
    if (!three_d) {
      op(OpType::MatMul, {}, {probs, vh}, node.output(0));
      return;
    }
    const std::string y = transpose(op(OpType::MatMul, {}, {probs, vh}), {0, 2, 1, 3});
    reshape(y, {batch, q_len, q_heads * v_head}, node.output(0));
  }

  // GatherElements of constants: Hugging Face's BERT export picks its
  // token_type_ids buffer's first columns with it. out[i] = data[i with its
  // axis coordinate replaced by index[i]] (negative indices from the end).
  void import_gather_elements(const onnx::NodeProto& node, const std::string& name) {
    const Value& data = input(node, name, 0);
    const Value& index = input(node, name, 1);
    // Constant data of one value gives that value whatever the run-time
    // indices pick (RoBERTa's token_type_ids buffer, all zeros, gathered at
    // its position ids); the indices' range is then not checked.
    if (data.constant && !index.constant) {
      const Constant& d = *data.constant;
      const bool uniform = d.dtype == DType::Int64
                               ? std::adjacent_find(d.ints.begin(), d.ints.end(),
                                                    std::not_equal_to<>()) == d.ints.end()
                               : std::adjacent_find(d.floats.begin(), d.floats.end(),
                                                    std::not_equal_to<>()) == d.floats.end();
      if (uniform && graph::shape_numel(d.shape) > 0 && d.shape.size() == shape_of(index).size()) {
        auto c = std::make_shared<Constant>();
        c->dtype = d.dtype;
        c->shape = shape_of(index);
        const auto n = static_cast<size_t>(graph::shape_numel(c->shape));
        if (d.dtype == DType::Int64)
          c->ints.assign(n, d.ints[0]);
        else
          c->floats.assign(n, d.floats[0]);
        return define_constant(node, name, std::move(c));
      }
    }
    if (!data.constant || !index.constant)
      fail_node(node, name, "is supported only on constants (or constant data of one value)");
    if (index.constant->dtype != DType::Int64) fail_node(node, name, "needs integer indices");
    const Shape& ds = data.constant->shape;
    const Shape& is = index.constant->shape;
    const auto rank = static_cast<int64_t>(ds.size());
    if (static_cast<int64_t>(is.size()) != rank || rank == 0)
      fail_node(node, name, "data and indices must have one rank (at least 1)");
    const auto axis =
        static_cast<size_t>(normalise_axis(node, name, attr_int(node, name, "axis", 0), rank));
    for (size_t d = 0; d < ds.size(); ++d)
      if (d != axis && is[d] > ds[d])
        fail_node(node, name, "indices are larger than the data at axis " + std::to_string(d));
    const std::vector<int64_t> data_strides = graph::shape_strides(ds);
    const std::vector<int64_t> index_strides = graph::shape_strides(is);
    auto c = std::make_shared<Constant>();
    c->dtype = data.constant->dtype;
    c->shape = is;
    for (int64_t f = 0; f < graph::shape_numel(is); ++f) {
      int64_t at = 0;
      for (size_t d = 0; d < is.size(); ++d) {
        int64_t i = f / index_strides[d] % is[d];
        if (d == axis) {
          i = index.constant->ints[static_cast<size_t>(f)];
          if (i < 0) i += ds[d];
          if (i < 0 || i >= ds[d])
            fail_node(node, name, "index " + std::to_string(i) + " is out of range");
        }
        at += i * data_strides[d];
      }
      if (c->dtype == DType::Int64)
        c->ints.push_back(data.constant->ints[static_cast<size_t>(at)]);
      else
        c->floats.push_back(data.constant->floats[static_cast<size_t>(at)]);
    }
    define_constant(node, name, std::move(c));
  }

  // GatherND with constant indices [..., q] and batch_dims 0 (the dynamo
  // exporter picks an attention mask's rows with it): a Gather along axis 0
  // of the data viewed with its first q dims as one, [D0·…·Dq-1, Dq, …],
  // at the flattened index tuples (shape indices[:-1]). Constant data folds.
  void import_gather_nd(const onnx::NodeProto& node, const std::string& name) {
    if (attr_int(node, name, "batch_dims", 0) != 0)
      fail_node(node, name, "batch_dims other than 0 is not supported");
    const Value& index = input(node, name, 1);
    if (!index.constant || index.constant->dtype != DType::Int64)
      fail_node(node, name,
                "needs constant integer indices; " + in_quotes(node.input(1)) +
                    " is computed at run time");
    const Shape ds = shape_of(input(node, name, 0));
    const Shape& is = index.constant->shape;
    const int64_t q = is.empty() ? 0 : is.back();
    if (q < 1 || q > static_cast<int64_t>(ds.size()))
      fail_node(node, name,
                "the indices' last dimension must be 1 to the data's rank (" +
                    std::to_string(ds.size()) + ")");
    Shape flat{1};
    for (int64_t d = 0; d < static_cast<int64_t>(ds.size()); ++d)
      if (d < q)
        flat[0] *= ds[d];
      else
        flat.push_back(ds[d]);
    graph::Operator gather;
    gather.name = name;
    gather.type = OpType::Gather;
    gather.attrs.axis = 0;
    gather.attrs.indices_shape.assign(is.begin(), is.end() - 1);
    const std::vector<int64_t>& tuples = index.constant->ints;
    for (size_t t = 0; t < tuples.size(); t += static_cast<size_t>(q)) {
      int64_t at = 0;
      for (int64_t d = 0; d < q; ++d) {
        int64_t i = tuples[t + static_cast<size_t>(d)];
        if (i < -ds[d] || i >= ds[d])
          fail_node(node, name,
                    "index " + std::to_string(i) + " is out of range for dimension " +
                        std::to_string(d) + " of size " + std::to_string(ds[d]));
        at = at * ds[d] + (i < 0 ? i + ds[d] : i);
      }
      gather.attrs.indices.push_back(at);
    }
    const std::string viewed = unused_name(node.output(0) + "/data_rows");
    emit_reshape(node, name, node.input(0), viewed, flat);
    emit_part(node, name, std::move(gather), {viewed}, node.output(0));
  }

  // Trilu of constants (Hugging Face's GPT-2 export builds its causal mask
  // with one): the upper (or lower) triangle of each matrix in the last two
  // dims, from diagonal k, the rest zero.
  void import_trilu(const onnx::NodeProto& node, const std::string& name) {
    const Value& x = input(node, name, 0);
    if (!x.constant) fail_node(node, name, "is supported only on constants");
    const Shape& s = x.constant->shape;
    if (s.size() < 2) fail_node(node, name, "needs at least 2 dims");
    const int64_t k = has_input(node, 1) ? int_values(node, name, 1, "k").at(0) : 0;
    const bool upper = attr_int(node, name, "upper", 1) != 0;
    const int64_t rows = s[s.size() - 2], cols = s.back();
    auto c = std::make_shared<Constant>(*x.constant);
    for (int64_t f = 0; f < graph::shape_numel(s); ++f) {
      const int64_t i = f / cols % rows, j = f % cols;
      if (upper ? j - i >= k : j - i <= k) continue;
      if (c->dtype == DType::Int64)
        c->ints[static_cast<size_t>(f)] = 0;
      else
        c->floats[static_cast<size_t>(f)] = 0.0f;
    }
    define_constant(node, name, std::move(c));
  }

  // Mod of constants (shape arithmetic: the expanded Attention function
  // checks that heads divide evenly). fmod = 0: the sign of B, as Python's %;
  // fmod = 1: the sign of A, as C's fmod.
  void import_mod(const onnx::NodeProto& node, const std::string& name) {
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
  void import_logic(const onnx::NodeProto& node, const std::string& name) {
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

  void import_runtime_logic(const onnx::NodeProto& node, const std::string& name, bool unary) {
    const std::string& op = node.op_type();
    std::vector<std::string> operands;
    for (int i = 0; i < (unary ? 1 : 2); ++i) operands.push_back(bool_operand(node, name, i));
    const std::string& out = node.output(0);
    auto part = [&](OpType type, const std::vector<std::string>& inputs,
                    const std::string& result) {
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
  std::string bool_operand(const onnx::NodeProto& node, const std::string& name, int i) {
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
  std::string float_constant(const std::string& base, Shape shape, std::vector<float> values) {
    auto c = std::make_shared<Constant>();
    c->name = unused_name(base);
    c->shape = std::move(shape);
    c->floats = std::move(values);
    values_[c->name] = Value{-1, c};
    return c->name;
  }

  // Size: the element count of a statically shaped tensor, a constant.
  void import_size(const onnx::NodeProto& node, const std::string& name) {
    auto c = std::make_shared<Constant>();
    c->dtype = DType::Int64;
    c->ints = {graph::shape_numel(shape_of(input(node, name, 0)))};
    define_constant(node, name, std::move(c));
  }

  // Cast to the attribute's type; CastLike to its second input's (float32,
  // or int64 for Tessera's integer constants).
  void import_cast(const onnx::NodeProto& node, const std::string& name) {
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
  void import_runtime_cast(const onnx::NodeProto& node, const std::string& name, const Value& v,
                           int64_t to) {
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

  // Unsqueeze and Squeeze only change the shape: a constant gets the new
  // shape, an activation a Reshape.
  void import_squeeze(const onnx::NodeProto& node, const std::string& name) {
    const bool unsqueeze = node.op_type() == "Unsqueeze";
    const Value& x = input(node, name, 0);
    const Shape in = shape_of(x);
    std::vector<int64_t> axes;
    if (opset_ >= 13) {  // axes became an input in opset 13
      if (has_input(node, 1)) axes = int_values(node, name, 1, "the axes");
    } else {
      axes = attr_ints(node, name, "axes", {});
    }
    const auto rank = static_cast<int64_t>(in.size());
    const int64_t out_rank = unsqueeze ? rank + static_cast<int64_t>(axes.size()) : rank;
    for (int64_t& a : axes) a = normalise_axis(node, name, a, out_rank);
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
      fail_node(node, name, "the axes list an axis twice");
    Shape out;
    if (unsqueeze) {
      if (axes.empty()) fail_node(node, name, "needs axes");
      size_t next = 0;
      for (int64_t d = 0; d < out_rank; ++d)
        out.push_back(std::binary_search(axes.begin(), axes.end(), d) ? 1 : in[next++]);
    } else {
      for (int64_t d = 0; d < rank; ++d) {
        const bool listed = std::binary_search(axes.begin(), axes.end(), d);
        if (listed && in[d] != 1)
          fail_node(
              node, name,
              "cannot squeeze axis " + std::to_string(d) + " of size " + std::to_string(in[d]));
        if (!(listed || (axes.empty() && in[d] == 1))) out.push_back(in[d]);
      }
    }
    if (x.constant) {
      auto c = std::make_shared<Constant>(*x.constant);
      c->shape = out;
      define_constant(node, name, std::move(c));
      return;
    }
    graph::Operator o;
    o.name = name;
    o.type = OpType::Reshape;
    o.attrs.new_shape = out;
    emit(node, name, std::move(o), {0});
  }

  // A Reshape of `in` to `shape` named `out` (a view: no copy where the plan allows).
  void emit_reshape(const onnx::NodeProto& node, const std::string& name, const std::string& in,
                    const std::string& out, const Shape& shape) {
    graph::Operator o;
    o.name = out;
    o.type = OpType::Reshape;
    o.attrs.new_shape = shape;
    emit_part(node, name, std::move(o), {in}, out);
  }

  // One op of the parts an ONNX node is imported as (Attention's chain, a
  // 1-D op's reshapes): its inputs by value name, its output value `out`.
  // The part is in kSyntheticDomain; errors name the ONNX node.
  void emit_part(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
                 const std::vector<std::string>& inputs, const std::string& out,
                 bool bool_output = false) {
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
  void emit_plain(const onnx::NodeProto& node, const std::string& name, OpType type,
                  const std::vector<std::string>& inputs, const std::string& out,
                  const std::string& op_name, bool bool_output = false) {
    graph::Operator o;
    o.name = op_name;
    o.type = type;
    emit_part(node, name, std::move(o), inputs, out, bool_output);
  }

  // 1-D Conv, ConvTranspose, MaxPool and AveragePool (3-D X [N, C, L]: audio
  // and sequence models) run as their 2-D forms over [N, C, 1, L], with the
  // 2-D kernels: X viewed as 4-D, W given a unit kernel row, each
  // spatial attribute a leading 1 (pads [0, begin, 0, end]), and the output
  // viewed back as [N, M, L']; a W given at run time is viewed like X. False
  // for any other node.
  bool import_1d_as_2d(const onnx::NodeProto& node, const std::string& name) {
    const std::string& op = node.op_type();
    const bool conv = op == "Conv" || op == "ConvTranspose";
    if ((!conv && op != "MaxPool" && op != "AveragePool") || !has_input(node, 0)) return false;
    const Shape x = shape_of(input(node, name, 0));
    if (x.size() != 3) return false;
    onnx::NodeProto flat = node;
    flat.set_input(0, unused_name(node.input(0) + "/as_2d"));
    emit_reshape(node, name, node.input(0), flat.input(0), {x[0], x[1], 1, x[2]});
    if (conv && has_input(node, 1)) {
      const Value& w = input(node, name, 1);
      const Shape ws = shape_of(w);
      if (ws.size() != 3) fail_node(node, name, "a 1-D convolution needs a 3-D W");
      flat.set_input(1, unused_name(node.input(1) + "/as_2d"));
      if (w.constant) {
        auto w4 = std::make_shared<Constant>(*w.constant);
        w4->shape = {ws[0], ws[1], 1, ws[2]};
        w4->name = flat.input(1);
        w4->tensor = -1;
        values_[flat.input(1)] = Value{-1, std::move(w4)};
      } else {
        emit_reshape(node, name, node.input(1), flat.input(1), {ws[0], ws[1], 1, ws[2]});
      }
    }
    for (auto& a : *flat.mutable_attribute()) {
      const std::string& key = a.name();
      if (key != "kernel_shape" && key != "strides" && key != "dilations" && key != "pads" &&
          key != "output_padding" && key != "output_shape")
        continue;
      if (a.ints_size() != (key == "pads" ? 2 : 1))
        fail_node(node, name,
                  "attribute " + in_quotes(key) + " has " + std::to_string(a.ints_size()) +
                      " values for a 1-D input");
      const std::vector<int64_t> v(a.ints().begin(), a.ints().end());
      a.clear_ints();
      const int64_t lead = key == "pads" || key == "output_padding" ? 0 : 1;
      a.add_ints(lead);
      a.add_ints(v[0]);
      if (key == "pads") {
        a.add_ints(0);
        a.add_ints(v[1]);
      }
    }
    flat.set_output(0, unused_name(node.output(0) + "/as_2d"));
    import_node(flat, name);
    const Shape y = shape_of(values_.at(flat.output(0)));
    emit_reshape(node, name, flat.output(0), node.output(0), {y[0], y[1], y[3]});
    return true;
  }

  // Slice's constant starts/ends/axes/steps resolved with ONNX's clamping
  // into one start, step and element count per input dim.
  void resolve_slice(const onnx::NodeProto& node, const std::string& name,
                     graph::OpAttributes& a) const {
    const Shape x = shape_of(input(node, name, 0));
    const auto rank = static_cast<int64_t>(x.size());
    const std::vector<int64_t> starts = int_values(node, name, 1, "starts");
    const std::vector<int64_t> ends = int_values(node, name, 2, "ends");
    std::vector<int64_t> axes;
    if (has_input(node, 3)) {
      axes = int_values(node, name, 3, "axes");
    } else {
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
    }
    const std::vector<int64_t> steps = has_input(node, 4) ? int_values(node, name, 4, "steps")
                                                          : std::vector<int64_t>(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
      fail_node(node, name, "starts, ends, axes and steps must have the same length");
    a.starts.assign(x.size(), 0);
    a.steps.assign(x.size(), 1);
    a.new_shape = x;
    std::vector<bool> seen(x.size(), false);
    for (size_t k = 0; k < starts.size(); ++k) {
      const auto d = static_cast<size_t>(normalise_axis(node, name, axes[k], rank));
      if (seen[d]) fail_node(node, name, "the axes list axis " + std::to_string(d) + " twice");
      seen[d] = true;
      const int64_t dim = x[d], step = steps[k];
      if (step == 0) fail_node(node, name, "a step is 0");
      int64_t start = starts[k] < 0 ? starts[k] + dim : starts[k];
      int64_t end = ends[k] < 0 ? ends[k] + dim : ends[k];
      int64_t count = 0;
      if (step > 0) {
        start = std::clamp<int64_t>(start, 0, dim);
        end = std::clamp<int64_t>(end, 0, dim);
        if (end > start) count = (end - start - 1) / step + 1;
      } else {
        start = std::clamp<int64_t>(start, -1, dim - 1);
        end = std::clamp<int64_t>(end, -1, dim - 1);
        const int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
        if (start > end) count = (start - end - 1) / magnitude + 1;
      }
      if (count == 0)
        fail_node(node, name,
                  "selects no elements along axis " + std::to_string(d) +
                      "; Tessera does not support empty tensors");
      a.starts[d] = start;
      a.steps[d] = count == 1 ? 1 : step;  // one element: any step reads the same
      a.new_shape[d] = count;
    }
  }

  // Split becomes one Slice per used output (Split-11 `split` attribute,
  // Split-13 `split` input, Split-18 `num_outputs`).
  void import_split(const onnx::NodeProto& node, const std::string& name) {
    const Shape x = shape_of(input(node, name, 0));
    const auto rank = static_cast<int64_t>(x.size());
    const auto axis =
        static_cast<size_t>(normalise_axis(node, name, attr_int(node, name, "axis", 0), rank));
    const int64_t dim = x[axis];
    const auto outputs = static_cast<int64_t>(node.output_size());
    std::vector<int64_t> sizes;
    if (opset_ >= 13) {
      if (has_input(node, 1)) sizes = int_values(node, name, 1, "split");
    } else {
      sizes = attr_ints(node, name, "split", {});
    }
    if (sizes.empty()) {
      if (opset_ >= 18 && find_attr(node, "num_outputs")) {
        // Split-18: equal chunks of ceil(dim / n), the last one smaller.
        const int64_t n = attr_int(node, name, "num_outputs", 0);
        if (n < 1 || n != outputs)
          fail_node(node, name,
                    "num_outputs = " + std::to_string(n) + " but the node has " +
                        std::to_string(outputs) + " outputs");
        const int64_t chunk = (dim + n - 1) / n;
        for (int64_t i = 0; i < n; ++i) sizes.push_back(std::min(chunk, dim - i * chunk));
      } else {
        if (outputs < 1 || dim % outputs != 0)
          fail_node(node, name,
                    "cannot split a dim of " + std::to_string(dim) + " into " +
                        std::to_string(outputs) + " equal parts");
        sizes.assign(static_cast<size_t>(outputs), dim / outputs);
      }
    }
    if (static_cast<int64_t>(sizes.size()) != outputs)
      fail_node(node, name,
                "has " + std::to_string(sizes.size()) + " split sizes for " +
                    std::to_string(outputs) + " outputs");
    int64_t total = 0;
    for (int64_t v : sizes) {
      if (v <= 0)
        fail_node(node, name,
                  "split size " + std::to_string(v) +
                      " gives an empty output; Tessera does not support empty tensors");
      total += v;
    }
    if (total != dim)
      fail_node(node, name,
                "split sizes add up to " + std::to_string(total) + ", not the dim " +
                    std::to_string(dim));
    int64_t offset = 0;
    for (int i = 0; i < node.output_size(); ++i) {
      const int64_t size = sizes[static_cast<size_t>(i)];
      const std::string& out = node.output(i);
      if (!out.empty() && used_names_.count(out)) {
        graph::Operator o;
        o.name = node.output_size() == 1 ? name : name + "." + std::to_string(i);
        o.type = OpType::Slice;
        o.attrs.starts.assign(x.size(), 0);
        o.attrs.steps.assign(x.size(), 1);
        o.attrs.new_shape = x;
        o.attrs.starts[axis] = offset;
        o.attrs.new_shape[axis] = size;
        onnx::NodeProto part;
        part.set_op_type(node.op_type());
        part.set_name(node.name());
        part.add_input(node.input(0));
        part.add_output(out);
        emit(part, name, std::move(o), {0});
      }
      offset += size;
    }
  }

  // Max and Min take any number of operands: chained pairwise (the first
  // alone is the value itself).
  void import_max_min(const onnx::NodeProto& node, const std::string& name) {
    std::vector<int> present;
    for (int i = 0; i < node.input_size(); ++i)
      if (has_input(node, i)) present.push_back(i);
    if (present.empty()) fail_node(node, name, "has no inputs");
    if (present.size() == 1) {
      values_[node.output(0)] = input(node, name, present[0]);
      return;
    }
    std::string acc = node.input(present[0]);
    for (size_t k = 1; k < present.size(); ++k) {
      const bool last = k + 1 == present.size();
      onnx::NodeProto step;
      step.set_op_type(node.op_type());
      step.set_name(node.name());
      step.add_input(acc);
      step.add_input(node.input(present[k]));
      step.add_output(last ? node.output(0) : unused_name(node.output(0) + ".partial"));
      graph::Operator o;
      o.name = last && present.size() == 2 ? name : name + "." + std::to_string(k);
      o.type = *graph::op_type_from_name(node.op_type());
      acc = step.output(0);
      emit(step, name, std::move(o), {0, 1});
    }
  }

  // Pad-11+: pads (and Pad-18 axes) as constant inputs, constant_value an
  // optional scalar input; mode constant, reflect or edge.
  void resolve_pad(const onnx::NodeProto& node, const std::string& name,
                   graph::OpAttributes& a) const {
    const Shape x = shape_of(input(node, name, 0));
    const auto rank = static_cast<int64_t>(x.size());
    const std::string mode = attr_string(node, name, "mode", "constant");
    if (mode == "constant")
      a.pad_mode = graph::PadMode::Constant;
    else if (mode == "reflect")
      a.pad_mode = graph::PadMode::Reflect;
    else if (mode == "edge")
      a.pad_mode = graph::PadMode::Edge;
    else
      fail_node(node, name,
                "mode " + in_quotes(mode) + " is not supported ('constant', 'reflect' or 'edge')");
    const std::vector<int64_t> pads = int_values(node, name, 1, "pads");
    std::vector<int64_t> axes;
    if (has_input(node, 3)) {
      axes = int_values(node, name, 3, "axes");
    } else {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    if (pads.size() != 2 * axes.size())
      fail_node(node, name,
                "pads has " + std::to_string(pads.size()) + " entries for " +
                    std::to_string(axes.size()) + " axes (needs 2 per axis)");
    a.pads.assign(2 * x.size(), 0);
    std::vector<bool> seen(x.size(), false);
    for (size_t k = 0; k < axes.size(); ++k) {
      const auto d = static_cast<size_t>(normalise_axis(node, name, axes[k], rank));
      if (seen[d]) fail_node(node, name, "the axes list axis " + std::to_string(d) + " twice");
      seen[d] = true;
      a.pads[d] = pads[k];
      a.pads[d + x.size()] = pads[k + axes.size()];
    }
    if (has_input(node, 2)) a.pad_value = scalar_constant(node, name, 2, "constant_value");
    for (size_t d = 0; d < x.size(); ++d)
      if (x[d] + a.pads[d] + a.pads[d + x.size()] < 1)
        fail_node(node, name,
                  "pads leave dim " + std::to_string(d) +
                      " empty; Tessera does not support empty tensors");
  }

  // Resize with constant scales or sizes: nearest (every nearest_mode) or
  // linear, every coordinate_transformation_mode but tf_crop_and_resize.
  void resolve_resize(const onnx::NodeProto& node, const std::string& name,
                      graph::OpAttributes& a) const {
    const Shape x = shape_of(input(node, name, 0));
    const auto rank = static_cast<int64_t>(x.size());
    const std::string mode = attr_string(node, name, "mode", "nearest");
    if (mode == "nearest")
      a.resize_mode = graph::ResizeMode::Nearest;
    else if (mode == "linear")
      a.resize_mode = graph::ResizeMode::Linear;
    else
      fail_node(node, name,
                "mode " + in_quotes(mode) + " is not supported ('nearest' or 'linear')");
    const std::string coordinates =
        attr_string(node, name, "coordinate_transformation_mode", "half_pixel");
    static const std::unordered_map<std::string, graph::CoordinateMode> kCoordinateModes = {
        {"half_pixel", graph::CoordinateMode::HalfPixel},
        {"half_pixel_symmetric", graph::CoordinateMode::HalfPixelSymmetric},
        {"pytorch_half_pixel", graph::CoordinateMode::PytorchHalfPixel},
        {"align_corners", graph::CoordinateMode::AlignCorners},
        {"asymmetric", graph::CoordinateMode::Asymmetric}};
    const auto cm = kCoordinateModes.find(coordinates);
    if (cm == kCoordinateModes.end())
      fail_node(node, name,
                "coordinate_transformation_mode " + in_quotes(coordinates) + " is not supported");
    a.coordinate_mode = cm->second;
    const std::string nearest = attr_string(node, name, "nearest_mode", "round_prefer_floor");
    static const std::unordered_map<std::string, graph::NearestMode> kNearestModes = {
        {"round_prefer_floor", graph::NearestMode::RoundPreferFloor},
        {"round_prefer_ceil", graph::NearestMode::RoundPreferCeil},
        {"floor", graph::NearestMode::Floor},
        {"ceil", graph::NearestMode::Ceil}};
    const auto nm = kNearestModes.find(nearest);
    if (nm == kNearestModes.end())
      fail_node(node, name, "nearest_mode " + in_quotes(nearest) + " is not supported");
    a.nearest_mode = nm->second;
    if (attr_int(node, name, "antialias", 0) != 0 && a.resize_mode != graph::ResizeMode::Nearest)
      fail_node(node, name, "attribute antialias = 1 is not supported");
    const std::string policy = attr_string(node, name, "keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch")
      fail_node(
          node, name,
          "keep_aspect_ratio_policy " + in_quotes(policy) + " is not supported (only 'stretch')");
    std::vector<int64_t> axes = attr_ints(node, name, "axes", {});
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    for (int64_t& d : axes) d = normalise_axis(node, name, d, rank);
    // Scales (input 2) or sizes (input 3), one per axis; an empty tensor
    // stands for an absent input.
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    if (has_input(node, 2)) {
      const Value& v = input(node, name, 2);
      if (!v.constant || v.constant->dtype != DType::Float32)
        fail_node(node, name,
                  "the scales (input " + in_quotes(node.input(2)) +
                      ") must be a float32 constant (an initializer or Constant node)");
      scales = v.constant->floats;
    }
    if (has_input(node, 3)) sizes = int_values(node, name, 3, "the sizes");
    if (scales.empty() == sizes.empty())
      fail_node(node, name, "needs exactly one of scales and sizes");
    const size_t given = scales.empty() ? sizes.size() : scales.size();
    if (given != axes.size())
      fail_node(node, name,
                "has " + std::to_string(given) + " scales or sizes for " +
                    std::to_string(axes.size()) + " axes");
    a.new_shape = x;
    a.scales.assign(x.size(), 1.0f);
    for (size_t k = 0; k < axes.size(); ++k) {
      const auto d = static_cast<size_t>(axes[k]);
      if (!scales.empty()) {
        if (!(scales[k] > 0.0f) || !std::isfinite(scales[k]))
          fail_node(node, name, "scales must be positive");
        a.scales[d] = scales[k];
        // ONNX Runtime's rule, in float: floor(scale * input).
        a.new_shape[d] = static_cast<int64_t>(scales[k] * static_cast<float>(x[d]));
      } else {
        a.new_shape[d] = sizes[k];
        if (sizes[k] > 0) a.scales[d] = static_cast<float>(sizes[k]) / static_cast<float>(x[d]);
      }
      if (a.new_shape[d] < 1)
        fail_node(node, name,
                  "resizes dim " + std::to_string(d) +
                      " to nothing; Tessera does not support empty tensors");
    }
  }

  void alias(const onnx::NodeProto& node, const std::string& name) {
    values_[node.output(0)] = input(node, name, 0);
  }

  void import_dropout(const onnx::NodeProto& node, const std::string& name) {
    // Dropout-12+ takes training_mode as an optional input; inference needs it false.
    if (has_input(node, 2)) {
      const Value& mode = input(node, name, 2);
      const bool is_false = mode.constant && graph::shape_numel(mode.constant->shape) == 1 &&
                            (mode.constant->dtype == DType::Float32 ? mode.constant->floats[0] == 0
                                                                    : mode.constant->ints[0] == 0);
      if (!is_false)
        fail_node(node, name, "training_mode must be a constant false (inference only)");
    }
    require_only_first_output(node, name, "the mask output is not supported");
    alias(node, name);
  }

  void import_constant(const onnx::NodeProto& node, const std::string& name) {
    if (node.attribute_size() != 1) fail_node(node, name, "needs exactly one value attribute");
    const auto& a = node.attribute(0);
    auto c = std::make_shared<Constant>();
    if (a.name() == "value") {
      check_attr_type(node, name, a, onnx::AttributeProto::TENSOR);
      c = constant_from_tensor(a.t(), "node " + in_quotes(name) + " (op 'Constant') value");
    } else if (a.name() == "value_float") {
      check_attr_type(node, name, a, onnx::AttributeProto::FLOAT);
      c->floats = {a.f()};
    } else if (a.name() == "value_floats") {
      check_attr_type(node, name, a, onnx::AttributeProto::FLOATS);
      c->floats.assign(a.floats().begin(), a.floats().end());
      c->shape = {a.floats_size()};
    } else if (a.name() == "value_int") {
      check_attr_type(node, name, a, onnx::AttributeProto::INT);
      c->dtype = DType::Int64;
      c->ints = {a.i()};
    } else if (a.name() == "value_ints") {
      check_attr_type(node, name, a, onnx::AttributeProto::INTS);
      c->dtype = DType::Int64;
      c->ints.assign(a.ints().begin(), a.ints().end());
      c->shape = {a.ints_size()};
    } else {
      fail_node(node, name, "attribute " + in_quotes(a.name()) + " is not supported");
    }
    c->name = node.output(0);
    c->tensor = -1;
    values_[node.output(0)] = Value{-1, c};
  }

  // The output shape the file declares (value_info or graph output), where
  // it declares one, must be ours.
  // `bool_output`: an op whose ONNX output is bool, which Tessera holds as
  // float 0/1 (IsNaN): a declared BOOL is then its float.
  // `integer_output`: integers held as float (float_ints_): a declared
  // integer type is then its float.
  void check_declared(const onnx::NodeProto& node, const std::string& name, const Shape& ours,
                      bool integer_constant, bool bool_output = false,
                      bool integer_output = false) const {
    auto it = declared_.find(node.output(0));
    if (it == declared_.end() || !it->second->has_tensor_type()) return;
    const auto& tt = it->second->tensor_type();
    const bool as_float = tt.elem_type() == 0 || tt.elem_type() == onnx::TensorProto::FLOAT ||
                          (bool_output && tt.elem_type() == onnx::TensorProto::BOOL) ||
                          (integer_output && (tt.elem_type() == onnx::TensorProto::INT64 ||
                                              tt.elem_type() == onnx::TensorProto::INT32));
    if (!integer_constant && !as_float)
      fail_node(node, name,
                "output " + in_quotes(node.output(0)) + " is declared " +
                    type_name(tt.elem_type()) + "; Tessera needs float32 activations");
    if (tt.has_shape() && !same_shape(tt.shape(), ours))
      fail_node(node, name,
                "Tessera computes output shape " + graph::shape_to_string(ours) +
                    " but the model declares " + shape_text(tt.shape()));
  }

  static bool same_shape(const onnx::TensorShapeProto& theirs, const Shape& ours) {
    if (theirs.dim_size() != static_cast<int>(ours.size())) return false;
    for (int i = 0; i < theirs.dim_size(); ++i)
      if (theirs.dim(i).has_dim_value() && theirs.dim(i).dim_value() != ours[i]) return false;
    return true;
  }

  static std::string shape_text(const onnx::TensorShapeProto& shape) {
    std::string text = "[";
    for (int i = 0; i < shape.dim_size(); ++i) {
      if (i) text += ",";
      const auto& d = shape.dim(i);
      text += d.has_dim_value() ? std::to_string(d.dim_value()) : std::string("?");
    }
    return text + "]";
  }

  // ONNX's own shape inference for this node, fed the input shapes we know,
  // must agree with graph::infer_output_shape. Per node rather than over the
  // whole model so that a libonnx 1.12 quirk on one node does not spread to
  // every node after it.
  void check_onnx_inference(const onnx::NodeProto& node, const std::string& name,
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
    const auto* schema =
        onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset_), "");
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
  bool view_int64(const onnx::NodeProto& node, const std::string& name, const graph::Operator& o,
                  const std::vector<int>& positions) {
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
  void emit(const onnx::NodeProto& node, const std::string& name, graph::Operator o,
            const std::vector<int>& positions, bool bool_output = false) {
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

  static std::string int64_coverage(OpType type) {
    return "Tessera's run-time int64 arithmetic (float32, exact to 2^24) covers Add, Sub, Mul, "
           "Neg, Abs, Max, Min, the comparisons, Where, CumSum, casts, Gather indices and data "
           "movement, not " +
           std::string(graph::op_type_name(type));
  }

  static bool integer_capable(OpType type) {
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

  // Integer arithmetic at run time (RoBERTa's position ids: CumSum over
  // token ids != pad, times the mask, plus pad, as Gather indices) runs in
  // float32, exact for integers up to 2^24 (float_ints_: tensors holding
  // them). An int64 input read by such an op is cast to float32 first (once;
  // a view of it is cast, then viewed), int64 constants beside a run-time
  // integer become float constants (refused past 2^24), and run-time Gather
  // indices held as float go through ToIndex, which fails the run on a value
  // that is not an integer within ±2^24. Returns the node with those inputs
  // renamed, or nothing when none needs it.
  std::optional<onnx::NodeProto> integers_as_float(const onnx::NodeProto& node,
                                                   const std::string& name,
                                                   const graph::Operator& o,
                                                   const std::vector<int>& positions) {
    const auto runtime_int64 = [&](const Value& v) {
      return !v.constant && graph_.tensors[v.tensor].dtype == DType::Int64;
    };
    const auto float_int = [&](const Value& v) {
      return !v.constant && float_ints_.count(v.tensor);
    };
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
  bool integral_result(const graph::Operator& o, const std::vector<const Value*>& ins) const {
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
  std::string int64_as_float(const onnx::NodeProto& node, const std::string& name,
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
  void emit_int64_cast(const onnx::NodeProto& node, const std::string& name, const Value& v,
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
  std::string as_index(const onnx::NodeProto& node, const std::string& name,
                       const std::string& value) {
    const std::string key = value + "/as_index";
    if (values_.count(key)) return key;
    emit_plain(node, name, OpType::ToIndex, {value}, key, key);
    return key;
  }

  // Whether `type` only moves its data input's elements (Gather's indices
  // aside) and that input holds run-time bools: the output holds them too.
  bool moves_bools(OpType type, const std::vector<const Value*>& ins,
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
  std::shared_ptr<Constant> fold_integers(const onnx::NodeProto& node, const std::string& name,
                                          const graph::Operator& o,
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
    const bool arithmetic = o.type == OpType::Add || o.type == OpType::Sub ||
                            o.type == OpType::Mul || o.type == OpType::Div ||
                            o.type == OpType::Max || o.type == OpType::Min;
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
  std::shared_ptr<Constant> fold(const onnx::NodeProto& node, const std::string& name,
                                 const graph::Operator& o, const std::vector<const Value*>& ins,
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

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text;
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  return text;
}

// Writes the overrides into the model inputs' dims, so that everything after
// (the importer's shape checks, ONNX's shape inference) sees static shapes.
// A dim still symbolic afterwards is left for read_inputs to refuse.
void apply_shape_overrides(onnx::ModelProto& model, const InputShapeOverrides& overrides,
                           const std::string& origin) {
  if (overrides.batch < 0)
    throw Error(origin + ": --batch must be positive, got " + std::to_string(overrides.batch));
  if (!model.has_graph()) return;
  auto* g = model.mutable_graph();
  std::unordered_set<std::string> initializers, symbols, used;
  for (const auto& t : g->initializer()) initializers.insert(t.name());
  for (const auto& in : g->input())
    if (in.type().has_tensor_type() && in.type().tensor_type().has_shape())
      for (const auto& d : in.type().tensor_type().shape().dim())
        if (d.has_dim_param() && !d.dim_param().empty()) symbols.insert(d.dim_param());
  auto is_unknown = [](const onnx::TensorShapeProto_Dimension& d) {
    return !d.has_dim_value() || d.dim_value() <= 0;
  };
  for (auto& in : *g->mutable_input()) {
    if (initializers.count(in.name()) || !in.type().has_tensor_type()) continue;
    auto* tt = in.mutable_type()->mutable_tensor_type();
    const auto whole = overrides.shapes.find(in.name());
    if (whole != overrides.shapes.end()) {
      used.insert(in.name());
      const std::vector<int64_t>& dims = whole->second;
      for (int64_t v : dims)
        if (v < 1)
          throw Error(origin + ": --shape " + in.name() + "=" + dims_text(dims) +
                      ": dims must be positive");
      if (tt->has_shape() && tt->shape().dim_size() != static_cast<int>(dims.size()))
        throw Error(origin + ": --shape " + in.name() + "=" + dims_text(dims) + " has " +
                    std::to_string(dims.size()) + " dims but input '" + in.name() + "' has rank " +
                    std::to_string(tt->shape().dim_size()));
      auto* shape = tt->mutable_shape();
      if (shape->dim_size() == 0)
        for (size_t i = 0; i < dims.size(); ++i) shape->add_dim();
      for (int i = 0; i < shape->dim_size(); ++i) {
        auto* d = shape->mutable_dim(i);
        if (!is_unknown(*d) && d->dim_value() != dims[static_cast<size_t>(i)])
          throw Error(origin + ": --shape " + in.name() + "=" + dims_text(dims) +
                      " disagrees with the model, whose input '" + in.name() + "' has " +
                      std::to_string(d->dim_value()) + " at axis " + std::to_string(i));
        d->set_dim_value(dims[static_cast<size_t>(i)]);
      }
      continue;
    }
    if (!tt->has_shape()) continue;
    for (int i = 0; i < tt->shape().dim_size(); ++i) {
      auto* d = tt->mutable_shape()->mutable_dim(i);
      if (!is_unknown(*d)) continue;
      const auto symbol =
          d->has_dim_param() ? overrides.shapes.find(d->dim_param()) : overrides.shapes.end();
      if (symbol != overrides.shapes.end()) {
        used.insert(symbol->first);
        if (symbol->second.size() != 1 || symbol->second[0] < 1)
          throw Error(origin + ": --shape " + symbol->first + "=" + dims_text(symbol->second) +
                      " names the symbolic dim '" + symbol->first +
                      "', which needs one positive value");
        d->set_dim_value(symbol->second[0]);
      } else if (i == 0 && overrides.batch > 0) {
        d->set_dim_value(overrides.batch);
      }
    }
  }
  for (const auto& [key, dims] : overrides.shapes)
    if (!used.count(key))
      throw Error(origin + ": --shape " + key + "=" + dims_text(dims) +
                  ": the model has no input " + (symbols.count(key) ? "dim " : "or symbolic dim ") +
                  "named '" + key + "'");
}

graph::Graph import_model(const void* data, size_t size, const std::string& origin_for_errors,
                          const InputShapeOverrides& overrides,
                          const std::filesystem::path& external_base) {
  onnx::ModelProto model;
  if (size > static_cast<size_t>(INT_MAX) || !model.ParseFromArray(data, static_cast<int>(size)))
    throw Error(origin_for_errors + ": not a valid ONNX model (protobuf parse failed)");
  apply_shape_overrides(model, overrides, origin_for_errors);
  return Importer(origin_for_errors, external_base).run(model);
}

}  // namespace

graph::Graph import_onnx_bytes(const void* data, size_t size, const std::string& origin_for_errors,
                               const InputShapeOverrides& overrides) {
  return import_model(data, size, origin_for_errors, overrides, {});
}

graph::Graph import_onnx_file(const std::string& path, const InputShapeOverrides& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(path + ": cannot read the file (it is a directory)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file (" + std::strerror(errno) + ")");
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw Error(path + ": cannot read the file (" + one_line(e.what()) + ")");
  }
  if (in.bad()) throw Error(path + ": cannot read the file");
  std::filesystem::path base = std::filesystem::path(path).parent_path();
  if (base.empty()) base = ".";
  return import_model(bytes.data(), bytes.size(), path, overrides, base);
}

}  // namespace tessera::serialization
