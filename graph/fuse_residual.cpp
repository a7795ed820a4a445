#include "graph/fuse_residual.hpp"

#include "graph/graph_uses.hpp"

namespace tessera::graph {

std::vector<FusedResidual> fuse_residual_adds(Graph& graph) {
  const size_t tensor_count = graph.tensors.size();
  std::vector<int32_t> consumers(tensor_count, 0), producer(tensor_count, -1);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (int32_t t : graph.ops[i].inputs) ++consumers[static_cast<size_t>(t)];
    producer[static_cast<size_t>(graph.ops[i].outputs.at(0))] = static_cast<int32_t>(i);
  }
  for (int32_t t : graph.outputs) ++consumers[static_cast<size_t>(t)];  // outputs must stay
  auto shape_of = [&](int32_t t) -> const Shape& {
    return graph.tensors[static_cast<size_t>(t)].shape;
  };

  // Whether `prod` (writing `product`) can take a residual into its epilogue.
  auto epilogue_fits = [&](const Operator& prod, const Shape& product) {
    if (prod.attrs.activation != Activation::None || prod.attrs.fused_residual ||
        prod.inputs.size() < 2 || prod.inputs.size() > 3)
      return false;
    switch (prod.type) {
      case OpType::Conv:
        return product.size() == 4;
      case OpType::MatMul:
        // The residual is input 3 after a [N] bias, which needs a 2-D B (the
        // weight of a linear layer: graph/fuse_matmul_bias.hpp).
        return shape_of(prod.inputs[1]).size() == 2 && shape_of(prod.inputs[0]).size() >= 2;
      case OpType::Gemm: {
        // A full [M, N] C already takes the GEMM epilogue's residual operand
        // (kernels/cpu/gemm_ops.cpp).
        if (prod.inputs.size() < 3) return true;
        const Shape& c = shape_of(prod.inputs[2]);
        return !(c.size() == 2 && c[0] != 1 && c[1] != 1);
      }
      default:
        return false;
    }
  };

  // Operand k of `add` as a fusable product: the producer's index and, when
  // the product reaches the Add through one Reshape (GPT-2's Gemm on [M, N]
  // reshaped back to [1, M, N]), that Reshape's index.
  struct Candidate {
    int32_t producer = -1;
    int32_t reshape = -1;
  };
  auto candidate = [&](const Operator& add, size_t k) -> Candidate {
    const int32_t t = add.inputs[k], other = add.inputs[1 - k];
    const Shape& out = shape_of(add.outputs[0]);
    if (shape_of(t) != out || shape_of(other) != out) return {};
    int32_t p = producer[static_cast<size_t>(t)];
    if (p < 0 || consumers[static_cast<size_t>(t)] != 1) return {};
    int32_t reshape = -1, product = t;
    const Operator& first = graph.ops[static_cast<size_t>(p)];
    if (first.type == OpType::Reshape && first.inputs.size() == 1) {
      // The Add moves before the Reshape: elementwise, so the same sums on
      // the residual reshaped alike. Conv outputs are not seen through (NHWC).
      reshape = p;
      product = first.inputs[0];
      p = producer[static_cast<size_t>(product)];
      if (p < 0 || consumers[static_cast<size_t>(product)] != 1 ||
          graph.ops[static_cast<size_t>(p)].type == OpType::Conv)
        return {};
    }
    if (!epilogue_fits(graph.ops[static_cast<size_t>(p)], shape_of(product))) return {};
    // The residual must exist before the producer runs in operator order.
    if (producer[static_cast<size_t>(other)] >= p) return {};
    return {p, reshape};
  };

  std::vector<FusedResidual> fused;
  std::vector<bool> removed(graph.ops.size(), false);
  // Reshapes of residuals, to run just before the op at that index.
  std::vector<std::vector<Operator>> insert_before(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& add = graph.ops[i];
    if (add.type != OpType::Add || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1])
      continue;
    const Candidate c0 = candidate(add, 0), c1 = candidate(add, 1);
    if (c0.producer < 0 && c1.producer < 0) continue;
    const size_t k = c0.producer >= c1.producer ? 0 : 1;  // the later producer
    const Candidate chosen = k == 0 ? c0 : c1;
    const int32_t p = chosen.producer;
    int32_t residual = add.inputs[1 - k];
    const int32_t add_output = add.outputs[0];
    const std::string add_name = add.name;
    Operator& prod = graph.ops[static_cast<size_t>(p)];
    const Shape product_shape = shape_of(prod.outputs[0]);
    if (prod.inputs.size() == 2) {
      // Conv: one bias per output channel; MatMul, Gemm: one per column.
      append_zero_bias(
          graph, prod,
          prod.type == OpType::Conv ? shape_of(prod.inputs[1])[0] : product_shape.back());
    }
    if (chosen.reshape >= 0) {
      // The residual reshaped to the product's shape (an alias in the memory
      // plan: graph/memory_plan.hpp), read by the producer's epilogue; the
      // Reshape after the producer then writes the Add's output.
      TensorInfo reshaped;
      reshaped.name = graph.tensors[static_cast<size_t>(residual)].name + "_as_" + prod.name;
      reshaped.shape = product_shape;
      graph.tensors.push_back(std::move(reshaped));
      Operator reshape;
      reshape.name = prod.name + "_residual_reshape";
      reshape.type = OpType::Reshape;
      reshape.attrs.new_shape = product_shape;
      reshape.inputs = {residual};
      residual = static_cast<int32_t>(graph.tensors.size() - 1);
      reshape.outputs = {residual};
      insert_before[static_cast<size_t>(p)].push_back(std::move(reshape));
      graph.ops[static_cast<size_t>(chosen.reshape)].outputs = {add_output};
    }
    Operator& target = graph.ops[static_cast<size_t>(p)];
    target.inputs.push_back(residual);
    target.attrs.fused_residual = true;
    if (chosen.reshape < 0) target.outputs = {add_output};
    producer.resize(graph.tensors.size(), -1);
    consumers.resize(graph.tensors.size(), 0);
    producer[static_cast<size_t>(add_output)] = chosen.reshape >= 0 ? chosen.reshape : p;
    removed[i] = true;
    fused.push_back({add_name, target.name});
  }
  std::vector<Operator> kept;
  kept.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (Operator& op : insert_before[i]) kept.push_back(std::move(op));
    if (!removed[i]) kept.push_back(std::move(graph.ops[i]));
  }
  graph.ops = std::move(kept);
  return fused;
}

}  // namespace tessera::graph
