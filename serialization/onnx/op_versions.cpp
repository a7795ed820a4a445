// Which models and ops the importer accepts: the default ONNX domain at opsets
// kMinOpset to kMaxOpset, and each op at the schema versions reviewed for Tessera.
#include "serialization/onnx/importer.hpp"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::serialization::onnx_import {

namespace {

constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 28;

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
const std::unordered_map<std::string, std::vector<int>>& reviewed_op_versions() {
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

bool is_supported_op(const std::string& op) {
  return reviewed_op_versions().count(op) != 0;
}

}  // namespace

void Importer::read_opset(const onnx::ModelProto& model) {
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

// The since-version of `op`'s schema in force at this opset, when it was
// reviewed. libonnx knows the schemas up to its own newest opset: there it
// must agree with the table, so a version the table misses is refused
// rather than imported with older semantics.
void Importer::check_op_version(const onnx::NodeProto& node, const std::string& name) const {
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
    for (int v : versions) reviewed.append(reviewed.empty() ? "" : ", ").append(std::to_string(v));
    fail_node(node, name,
              "version " + std::to_string(std::max(in_force, known)) + " of " + node.op_type() +
                  " has not been reviewed for Tessera (reviewed versions: " + reviewed + ")");
  }
}

// Before anything else so that an unsupported op is what the user hears
// about, not a shape inference failure it causes.
void Importer::reject_unsupported_ops(const onnx::GraphProto& g) {
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

}  // namespace tessera::serialization::onnx_import
