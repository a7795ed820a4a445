#pragma once
// Small helpers to build operator graphs in tests.
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_shape.hpp"

namespace tessera::graph::test {

inline OpAttributes spatial_attrs(std::vector<int64_t> k, std::vector<int64_t> s,
                                  std::vector<int64_t> p, std::vector<int64_t> d) {
  OpAttributes a;
  a.kernel_shape = std::move(k);
  a.strides = std::move(s);
  a.pads = std::move(p);
  a.dilations = std::move(d);
  return a;
}

inline Operator make_op(OpType type, OpAttributes attrs = {}, std::string name = "op") {
  Operator op;
  op.type = type;
  op.attrs = std::move(attrs);
  op.name = std::move(name);
  return op;
}

struct GraphBuilder {
  Graph g;
  std::mt19937 rng{1};

  int32_t tensor(const std::string& name, Shape shape) {
    g.tensors.push_back(TensorInfo{name, std::move(shape), DType::Float32, false, {}});
    return static_cast<int32_t>(g.tensors.size() - 1);
  }
  int32_t input(const std::string& name, Shape shape) {
    int32_t t = tensor(name, std::move(shape));
    g.inputs.push_back(t);
    return t;
  }
  int32_t weight(const std::string& name, Shape shape) {
    int32_t t = tensor(name, shape);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto& info = g.tensors.back();
    info.is_weight = true;
    info.weight.resize(static_cast<size_t>(shape_numel(shape)));
    for (float& v : info.weight) v = u(rng);
    return t;
  }
  // Adds an op whose output shape comes from infer_output_shape.
  int32_t op(OpType type, std::vector<int32_t> inputs, OpAttributes attrs = {},
             std::string name = "") {
    if (name.empty()) name = std::string(op_type_name(type)) + std::to_string(g.ops.size());
    Operator o = make_op(type, std::move(attrs), name);
    o.inputs = std::move(inputs);
    std::vector<Shape> shapes;
    for (int32_t t : o.inputs) shapes.push_back(g.tensors[static_cast<size_t>(t)].shape);
    int32_t out = tensor(name + ".out", infer_output_shape(o, shapes));
    o.outputs = {out};
    g.ops.push_back(std::move(o));
    return out;
  }
  const Shape& shape(int32_t t) const { return g.tensors[static_cast<size_t>(t)].shape; }
};

// The op of that name; throws (a failed test) when there is none.
inline const Operator& op_named(const Graph& g, const std::string& name) {
  for (const Operator& op : g.ops)
    if (op.name == name) return op;
  throw std::out_of_range("no op " + name);
}

}  // namespace tessera::graph::test
