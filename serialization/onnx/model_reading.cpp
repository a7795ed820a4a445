// Reading the model graph: node names, tensors (inline or external data), the
// graph inputs and outputs, and the nodes in topological order.
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

namespace {

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

}  // namespace

void Importer::name_nodes(const onnx::GraphProto& g) {
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    node_names_.push_back(n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name());
  }
}

// The tensor with its external data (ONNX external data: `location`
// relative to the model's folder, optional `offset` and `length` in bytes)
// read into raw_data. As ONNX's checker does, the location must stay
// inside the model's folder.
onnx::TensorProto Importer::with_external_data(const onnx::TensorProto& t,
                                               const std::string& what) const {
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
      std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; }))
    fail(what + ": external data location '" + location +
         "' must be a file name relative to the model's folder");
  if (offset < 0 || length < -1) fail(what + ": external data offset/length must not be negative");
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

std::shared_ptr<Constant> Importer::constant_from_tensor(const onnx::TensorProto& t,
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
           onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t.data_type())) +
           "; Tessera supports float32 tensors (and int64/bool only as constant operands)");
  }
  return c;
}

void Importer::read_inputs(const onnx::GraphProto& g) {
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
             "; Tessera needs static shapes: give it a value with --shape " + in.name() + "=DIMS" +
             (i == 0 ? " or --batch N" : ""));
      }
    }
    const int32_t t = add_tensor(in.name(), shape);
    if (is_int64) graph_.tensors[t].dtype = DType::Int64;
    graph_.inputs.push_back(t);
    values_[in.name()] = Value{t, nullptr};
  }
}

std::string Importer::type_name(int32_t elem_type) {
  if (!onnx::TensorProto_DataType_IsValid(elem_type)) return "unknown";
  return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type));
}

// Kahn's algorithm, always taking the earliest ready node, so a sorted
// file keeps its order.
std::vector<int> Importer::topological_order(const onnx::GraphProto& g) {
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

void Importer::sort_nodes(onnx::GraphProto& g, const std::vector<int>& order) {
  std::vector<onnx::NodeProto> nodes(g.node().begin(), g.node().end());
  std::vector<std::string> names;
  g.clear_node();
  for (int i : order) {
    *g.add_node() = std::move(nodes[i]);
    names.push_back(std::move(node_names_[i]));
  }
  node_names_ = std::move(names);
}

void Importer::read_outputs(const onnx::GraphProto& g) {
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

}  // namespace tessera::serialization::onnx_import
