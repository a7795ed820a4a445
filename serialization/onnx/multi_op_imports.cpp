// ONNX ops imported as several operators: GatherND as a Reshape and a Gather, 1-D
// Conv and pooling as 2-D between reshapes, Split as Slices, Max/Min as pairwise chains.
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "graph/operator.hpp"

namespace tessera::serialization::onnx_import {

// GatherND with constant indices [..., q] and batch_dims 0 (the dynamo
// exporter picks an attention mask's rows with it): a Gather along axis 0
// of the data viewed with its first q dims as one, [D0·…·Dq-1, Dq, …],
// at the flattened index tuples (shape indices[:-1]). Constant data folds.
void Importer::import_gather_nd(const onnx::NodeProto& node, const std::string& name) {
  if (attr_int(node, name, "batch_dims", 0) != 0)
    fail_node(node, name, "batch_dims other than 0 is not supported");
  const Value& index = input(node, name, 1);
  if (!index.constant || index.constant->dtype != DType::Int64)
    fail_node(
        node, name,
        "needs constant integer indices; " + in_quotes(node.input(1)) + " is computed at run time");
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

// 1-D Conv, ConvTranspose, MaxPool and AveragePool (3-D X [N, C, L]: audio
// and sequence models) run as their 2-D forms over [N, C, 1, L], with the
// 2-D kernels: X viewed as 4-D, W given a unit kernel row, each
// spatial attribute a leading 1 (pads [0, begin, 0, end]), and the output
// viewed back as [N, M, L']; a W given at run time is viewed like X. False
// for any other node.
bool Importer::import_1d_as_2d(const onnx::NodeProto& node, const std::string& name) {
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

// Split becomes one Slice per used output (Split-11 `split` attribute,
// Split-13 `split` input, Split-18 `num_outputs`).
void Importer::import_split(const onnx::NodeProto& node, const std::string& name) {
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
    fail_node(
        node, name,
        "split sizes add up to " + std::to_string(total) + ", not the dim " + std::to_string(dim));
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
void Importer::import_max_min(const onnx::NodeProto& node, const std::string& name) {
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

}  // namespace tessera::serialization::onnx_import
