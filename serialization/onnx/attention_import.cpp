// The ONNX Attention op (opsets 23-25): the one import big enough for a file of its own, as
// the ops its ONNX function expands to (K/V cache, heads, GQA repeat, one additive mask).
#include "serialization/onnx/importer.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "graph/operator.hpp"

namespace tessera::serialization::onnx_import {

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
void Importer::import_attention(const onnx::NodeProto& node, const std::string& name) {
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
  if (q_heads % kv_heads != 0 || k[0] != batch || v[0] != batch || (!three_d && v[1] != kv_heads) ||
      (three_d ? k[2] / kv_heads : k[3]) != head || (three_d ? v[1] : v[2]) != kv_len)
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
    const std::string wide = op(OpType::Expand, a, {reshape(x, {batch, kv_heads, 1, total, size})});
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
    scores = op(OpType::Mul, {}, {op(OpType::Tanh, {}, {op(OpType::Div, {}, {scores, cap})}), cap});
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
      fail_node(node, name, "a bool attn_mask must be a constant; Tessera has no bool activations");
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

}  // namespace tessera::serialization::onnx_import
