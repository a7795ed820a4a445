// What every op import uses: graph tensors for values, and a node's inputs and
// attributes read and checked (pads, axes and scalar constants resolved).
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "graph/dtype.hpp"
#include "graph/graph.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

// --- tensors -------------------------------------------------------------

int32_t Importer::add_tensor(const std::string& name, const Shape& shape) {
  graph::TensorInfo t;
  t.name = name;
  t.shape = shape;
  graph_.tensors.push_back(std::move(t));
  return static_cast<int32_t>(graph_.tensors.size() - 1);
}

// The graph tensor an operator reads for this value; a constant becomes a
// weight tensor the first time an operator reads it, so unused
// initializers never reach the graph.
int32_t Importer::materialise(const onnx::NodeProto& node, const std::string& name,
                              const Value& v) {
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

const Shape& Importer::shape_of(const Value& v) const {
  if (v.constant) return v.constant->shape;
  if (v.int64_view) return *v.int64_view;
  return graph_.tensors[v.tensor].shape;
}

// --- node helpers ----------------------------------------------------------

bool Importer::has_input(const onnx::NodeProto& node, int i) {
  return i < node.input_size() && !node.input(i).empty();
}

const Value& Importer::input(const onnx::NodeProto& node, const std::string& name, int i) const {
  if (!has_input(node, i)) fail_node(node, name, "input " + std::to_string(i) + " is missing");
  return values_.at(node.input(i));
}

// Only the first output of the ops we support carries data; the optional
// others (MaxPool's Indices, Dropout's mask, training-mode BatchNorm
// statistics) must be absent or unused.
void Importer::require_only_first_output(const onnx::NodeProto& node, const std::string& name,
                                         const std::string& why) const {
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty() && used_names_.count(node.output(i))) fail_node(node, name, why);
}

const onnx::AttributeProto* Importer::find_attr(const onnx::NodeProto& node,
                                                const std::string& key) const {
  for (const auto& a : node.attribute())
    if (a.name() == key) return &a;
  return nullptr;
}

void Importer::check_attr_type(const onnx::NodeProto& node, const std::string& name,
                               const onnx::AttributeProto& a,
                               onnx::AttributeProto::AttributeType t) const {
  if (a.type() != t && a.type() != onnx::AttributeProto::UNDEFINED)
    fail_node(node, name, "attribute " + in_quotes(a.name()) + " has the wrong type");
}

int64_t Importer::attr_int(const onnx::NodeProto& node, const std::string& name,
                           const std::string& key, int64_t fallback) const {
  const auto* a = find_attr(node, key);
  if (!a) return fallback;
  check_attr_type(node, name, *a, onnx::AttributeProto::INT);
  return a->i();
}

float Importer::attr_float(const onnx::NodeProto& node, const std::string& name,
                           const std::string& key, float fallback) const {
  const auto* a = find_attr(node, key);
  if (!a) return fallback;
  check_attr_type(node, name, *a, onnx::AttributeProto::FLOAT);
  return a->f();
}

std::string Importer::attr_string(const onnx::NodeProto& node, const std::string& name,
                                  const std::string& key, const std::string& fallback) const {
  const auto* a = find_attr(node, key);
  if (!a) return fallback;
  check_attr_type(node, name, *a, onnx::AttributeProto::STRING);
  return a->s();
}

std::vector<int64_t> Importer::attr_ints(const onnx::NodeProto& node, const std::string& name,
                                         const std::string& key,
                                         std::vector<int64_t> fallback) const {
  const auto* a = find_attr(node, key);
  if (!a) return fallback;
  check_attr_type(node, name, *a, onnx::AttributeProto::INTS);
  return {a->ints().begin(), a->ints().end()};
}

// A per-spatial-dim attribute (kernel_shape, strides, dilations): 2 positive values.
std::vector<int64_t> Importer::spatial_attr(const onnx::NodeProto& node, const std::string& name,
                                            const std::string& key,
                                            std::vector<int64_t> fallback) const {
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
std::vector<int64_t> Importer::resolve_pads(const onnx::NodeProto& node, const std::string& name,
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
    fail_node(node, name,
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
std::vector<int64_t> Importer::resolve_transpose_pads(
    const onnx::NodeProto& node, const std::string& name, const Shape& input,
    const graph::OpAttributes& a, const std::vector<int64_t>& output_padding) const {
  const std::string auto_pad = attr_string(node, name, "auto_pad", "NOTSET");
  std::vector<int64_t> output_shape = attr_ints(node, name, "output_shape", {});
  if (output_shape.size() > 2) output_shape.erase(output_shape.begin(), output_shape.end() - 2);
  if (!output_shape.empty() && output_shape.size() != 2)
    fail_node(node, name, "attribute 'output_shape' must give both spatial dims");
  std::vector<int64_t> pads(4, 0);
  // SAME aims at input · stride but never pads below zero (ONNX Runtime's
  // rule: its output is then the taps' reach); an output_shape larger than
  // the taps reach grows the output at the end.
  const bool same = output_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER");
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
float Importer::scalar_constant(const onnx::NodeProto& node, const std::string& name, int i,
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

int64_t Importer::normalise_axis(const onnx::NodeProto& node, const std::string& name, int64_t axis,
                                 int64_t rank) const {
  if (axis < -rank || axis >= rank)
    fail_node(node, name,
              "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace tessera::serialization::onnx_import
