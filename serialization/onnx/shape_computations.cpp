// Shape computations and constant subgraphs, folded at import: Shape, Size,
// ConstantOfShape, Range, Constant, Squeeze/Unsqueeze, GatherElements, Trilu.
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

// PyTorch exports compute reshape targets from Shape, Gather, Unsqueeze,
// Concat, ConstantOfShape, Range... With static shapes all of it is known
// here, so it folds into int64 constants instead of becoming operators.

// A 1-D or scalar int64 constant input's values.
std::vector<int64_t> Importer::int_values(const onnx::NodeProto& node, const std::string& name,
                                          int i, const std::string& what) const {
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
Shape Importer::broadcast_or_fail(const onnx::NodeProto& node, const std::string& name,
                                  const Shape& a, const Shape& b) const {
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
std::vector<std::pair<size_t, size_t>> Importer::broadcast_pairs(const Shape& a, const Shape& b,
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

std::string Importer::unused_name(const std::string& base) const {
  std::string n = base;
  for (int i = 1; values_.count(n) || used_names_.count(n); ++i) n = base + "_" + std::to_string(i);
  return n;
}

void Importer::define_constant(const onnx::NodeProto& node, const std::string& name,
                               std::shared_ptr<Constant> c) {
  if (graph::shape_numel(c->shape) > kMaxFoldedElements)
    fail_node(node, name, "folds to a constant of more than 2^28 elements");
  c->name = node.output(0);
  c->tensor = -1;
  values_[node.output(0)] = Value{-1, std::move(c)};
}

void Importer::import_shape(const onnx::NodeProto& node, const std::string& name) {
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

void Importer::import_constant_of_shape(const onnx::NodeProto& node, const std::string& name) {
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
double Importer::scalar_value(const onnx::NodeProto& node, const std::string& name, int i) const {
  const Value& v = input(node, name, i);
  if (!v.constant || graph::shape_numel(v.constant->shape) != 1)
    fail_node(node, name, "input " + in_quotes(node.input(i)) + " must be a scalar constant");
  return v.constant->dtype == DType::Int64 ? static_cast<double>(v.constant->ints[0])
                                           : static_cast<double>(v.constant->floats[0]);
}

void Importer::import_range(const onnx::NodeProto& node, const std::string& name) {
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

// Size: the element count of a statically shaped tensor, a constant.
void Importer::import_size(const onnx::NodeProto& node, const std::string& name) {
  auto c = std::make_shared<Constant>();
  c->dtype = DType::Int64;
  c->ints = {graph::shape_numel(shape_of(input(node, name, 0)))};
  define_constant(node, name, std::move(c));
}

void Importer::import_constant(const onnx::NodeProto& node, const std::string& name) {
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

// Unsqueeze and Squeeze only change the shape: a constant gets the new
// shape, an activation a Reshape.
void Importer::import_squeeze(const onnx::NodeProto& node, const std::string& name) {
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
        fail_node(node, name,
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

// GatherElements of constants: Hugging Face's BERT export picks its
// token_type_ids buffer's first columns with it. out[i] = data[i with its
// axis coordinate replaced by index[i]] (negative indices from the end).
void Importer::import_gather_elements(const onnx::NodeProto& node, const std::string& name) {
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

// Trilu of constants (Hugging Face's GPT-2 export builds its causal mask
// with one): the upper (or lower) triangle of each matrix in the last two
// dims, from diagonal k, the rest zero.
void Importer::import_trilu(const onnx::NodeProto& node, const std::string& name) {
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

}  // namespace tessera::serialization::onnx_import
