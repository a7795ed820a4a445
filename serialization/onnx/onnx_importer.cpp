// The public entry points: parse the model, apply the input shape overrides,
// then run the Importer (whose run, fail and fail_node are here too).
#include "serialization/onnx/onnx_importer.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/error.hpp"
#include "serialization/onnx/importer.hpp"

namespace tessera::serialization {
namespace {

// Errors are one line: ONNX's own messages may span several.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

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
  return onnx_import::Importer(origin_for_errors, external_base).run(model);
}

}  // namespace

namespace onnx_import {

graph::Graph Importer::run(onnx::ModelProto& model) {
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

void Importer::fail(const std::string& message) const {
  throw Error(origin_ + ": " + one_line(message));
}

void Importer::fail_node(const onnx::NodeProto& node, const std::string& name,
                         const std::string& message) const {
  fail("node " + in_quotes(name) + " (op " + in_quotes(node.op_type()) + ", opset " +
       std::to_string(opset_) + "): " + message);
}

}  // namespace onnx_import

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
