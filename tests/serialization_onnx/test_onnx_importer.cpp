// The ONNX importer against models make_models.py writes with onnx 1.23.
// Expected attributes are the values the generator sets; expected output
// shapes, resolved auto_pad pads and folded constants come from ONNX Runtime
// (or onnx's reference evaluator) via <model>.expect files, never from the
// importer itself.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "graph/error.hpp"
#include "serialization/onnx/onnx_importer.hpp"

using tessera::graph::Graph;
using tessera::graph::Operator;
using tessera::graph::OpType;
using tessera::graph::Shape;
using tessera::serialization::import_onnx_bytes;
using tessera::serialization::import_onnx_file;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs the generator once per process with a fresh seed (or TESSERA_TEST_SEED).
const std::string& model_dir() {
  static const std::string dir = [] {
    unsigned seed = std::random_device{}();
    if (const char* s = std::getenv("TESSERA_TEST_SEED"))
      seed = static_cast<unsigned>(std::stoul(s));
    std::cout << "test_onnx_importer: model seed " << seed << " (set TESSERA_TEST_SEED to repeat)"
              << std::endl;
    const std::string out = TESSERA_ONNX_MODEL_DIR;
    const std::string cmd = std::string("mkdir -p '") + out + "' && '" + TESSERA_TEST_PYTHON +
                            "' '" + TESSERA_ONNX_MODEL_SCRIPT + "' '" + out + "' " +
                            std::to_string(seed);
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make_models.py failed: " + cmd);
    return out;
  }();
  return dir;
}

std::string path_of(const std::string& model) {
  return model_dir() + "/" + model + ".onnx";
}

using Expect = std::map<std::string, std::vector<double>>;

Expect read_expect(const std::string& model) {
  std::ifstream in(model_dir() + "/" + model + ".expect");
  REQUIRE_MESSAGE(in.good(), "no expect file for " << model);
  Expect e;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    double v;
    while (ls >> v) e[key].push_back(v);
  }
  return e;
}

std::vector<int64_t> ints(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

// Structural invariants every imported graph must satisfy.
void check_well_formed(const Graph& g) {
  std::set<std::string> names;
  for (const auto& t : g.tensors) {
    CHECK_MESSAGE(names.insert(t.name).second, "duplicate tensor name " << t.name);
    if (t.is_weight)
      CHECK(static_cast<int64_t>(t.weight.size()) == tessera::graph::shape_numel(t.shape));
  }
  std::vector<bool> ready(g.tensors.size(), false);
  for (int32_t i : g.inputs) {
    CHECK_FALSE(g.tensors[i].is_weight);
    ready[i] = true;
  }
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (g.tensors[i].is_weight) ready[i] = true;
  for (const auto& op : g.ops) {
    for (int32_t in : op.inputs)
      CHECK_MESSAGE(ready[in], op.name << " reads a tensor not yet made");
    REQUIRE(op.outputs.size() == 1);
    CHECK_FALSE(ready[op.outputs[0]]);
    ready[op.outputs[0]] = true;
  }
  for (int32_t o : g.outputs) CHECK(ready[o]);
}

Graph load(const std::string& model) {
  Graph g = import_onnx_file(path_of(model));
  check_well_formed(g);
  return g;
}

const Operator& op_named(const Graph& g, const std::string& name) {
  for (const auto& op : g.ops)
    if (op.name == name) return op;
  FAIL("no op named " << name);
  throw std::logic_error("unreachable");
}

const Shape& out_shape(const Graph& g, const Operator& op) {
  return g.tensors[op.outputs[0]].shape;
}

const tessera::graph::TensorInfo& input_tensor(const Graph& g, const Operator& op, size_t i) {
  return g.tensors[op.inputs.at(i)];
}

// The importer's message for a model it must refuse ("" if it imports).
std::string import_error(const std::string& model) {
  try {
    import_onnx_file(path_of(model));
  } catch (const tessera::Error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find('\n') == std::string::npos, "multi-line error: " << what);
    return what;
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Conv with explicit attributes; raw_data weights; a newer ir_version imports") {
  const Expect e = read_expect("conv_basic");
  CHECK(e.at("ir_version")[0] > 8);  // newer than libonnx 1.12 knows
  const Graph g = load("conv_basic");
  CHECK(g.opset == 13);
  REQUIRE(g.ops.size() == 1);
  const Operator& op = op_named(g, "conv1");
  CHECK(op.type == OpType::Conv);
  CHECK(op.attrs.strides == std::vector<int64_t>{2, 1});
  CHECK(op.attrs.pads == std::vector<int64_t>{1, 0, 2, 1});
  CHECK(op.attrs.dilations == std::vector<int64_t>{1, 2});
  CHECK(op.attrs.kernel_shape == std::vector<int64_t>{3, 3});
  CHECK(op.attrs.group == 1);
  REQUIRE(op.inputs.size() == 3);
  CHECK(g.inputs == std::vector<int32_t>{op.inputs[0]});
  const auto& w = input_tensor(g, op, 1);
  CHECK(w.name == "w");
  CHECK(w.is_weight);
  CHECK(w.shape == Shape{5, 3, 3, 3});
  REQUIRE(w.weight.size() == e.at("w").size());
  for (size_t i = 0; i < w.weight.size(); ++i)
    CHECK(w.weight[i] == static_cast<float>(e.at("w")[i]));
  CHECK(input_tensor(g, op, 2).shape == Shape{5});
  CHECK(out_shape(g, op) == ints(e.at("out_shape")));
  REQUIRE(g.outputs.size() == 1);
  CHECK(g.tensors[g.outputs[0]].name == "y");
}

TEST_CASE("import_onnx_bytes gives the same graph as import_onnx_file") {
  std::ifstream in(path_of("conv_basic"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Graph a = import_onnx_bytes(bytes.data(), bytes.size(), "mem");
  const Graph b = load("conv_basic");
  REQUIRE(a.ops.size() == b.ops.size());
  CHECK(a.ops[0].attrs == b.ops[0].attrs);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].weight == b.tensors[i].weight);
  }
}

TEST_CASE("Conv with groups and kernel_shape taken from W") {
  const Graph g = load("conv_group");
  const Operator& op = op_named(g, "conv_g");
  CHECK(op.attrs.group == 3);
  CHECK(op.attrs.kernel_shape == std::vector<int64_t>{2, 3});
  CHECK(op.attrs.strides == std::vector<int64_t>{1, 1});
  CHECK(op.attrs.dilations == std::vector<int64_t>{1, 1});
  CHECK(op.attrs.pads == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(op.inputs.size() == 2);
  CHECK(out_shape(g, op) == ints(read_expect("conv_group").at("out_shape")));
}

TEST_CASE("Gemm attributes, optional C, generated names") {
  const Graph g = load("gemm");
  const Operator& op = op_named(g, "fc");
  CHECK(op.attrs.alpha == 0.5f);
  CHECK(op.attrs.beta == 2.0f);
  CHECK(op.attrs.trans_a);
  CHECK(op.attrs.trans_b);
  CHECK(op.inputs.size() == 3);
  CHECK(out_shape(g, op) == ints(read_expect("gemm").at("out_shape")));

  const Graph g2 = load("gemm_no_c");
  const Operator& op2 = op_named(g2, "Gemm_0");
  CHECK(op2.inputs.size() == 2);
  CHECK(op2.attrs.alpha == 1.0f);
  CHECK(op2.attrs.beta == 1.0f);
  CHECK_FALSE(op2.attrs.trans_a);
  CHECK_FALSE(op2.attrs.trans_b);
  CHECK(g2.inputs.size() == 2);
  CHECK(out_shape(g2, op2) == Shape{1, 2});
}

TEST_CASE("MatMul and broadcasting Add/Mul; float_data initializers") {
  const Graph g = load("matmul");
  CHECK(out_shape(g, op_named(g, "mm")) == ints(read_expect("matmul").at("out_shape")));

  const Graph b = load("broadcast");
  const Operator& add = op_named(b, "add");
  CHECK(add.type == OpType::Add);
  const auto& bias = input_tensor(b, add, 1);
  CHECK(bias.is_weight);
  CHECK(bias.weight == std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f});
  const Operator& mul = op_named(b, "mul");
  CHECK(mul.type == OpType::Mul);
  CHECK(out_shape(b, mul) == ints(read_expect("broadcast").at("out_shape")));
  CHECK(b.inputs.size() == 2);
}

TEST_CASE("Relu, Sigmoid and Clip with constant, absent and missing bounds") {
  const Graph g = load("unary");
  REQUIRE(g.ops.size() == 5);
  CHECK(op_named(g, "relu").type == OpType::Relu);
  CHECK(op_named(g, "sig").type == OpType::Sigmoid);
  const Operator& both = op_named(g, "clip_both");
  CHECK(both.attrs.clip_min == -0.25f);
  CHECK(both.attrs.clip_max == 0.75f);
  CHECK(both.inputs.size() == 1);
  const Operator& max_only = op_named(g, "clip_max");
  CHECK(max_only.attrs.clip_min == -kInf);
  CHECK(max_only.attrs.clip_max == 0.75f);
  const Operator& none = op_named(g, "clip_none");
  CHECK(none.attrs.clip_min == -kInf);
  CHECK(none.attrs.clip_max == kInf);
  // Bounds are attributes now, not tensors.
  CHECK_FALSE(g.find_tensor("lo").has_value());
  CHECK_FALSE(g.find_tensor("hi").has_value());
  for (const auto& op : g.ops) CHECK(out_shape(g, op) == Shape{3, 1, 2});
}

TEST_CASE("MaxPool and AveragePool attributes") {
  const Graph g = load("avgpool");
  const Operator& avg = op_named(g, "avg");
  CHECK(avg.attrs.kernel_shape == std::vector<int64_t>{3, 2});
  CHECK(avg.attrs.strides == std::vector<int64_t>{2, 2});
  CHECK(avg.attrs.pads == std::vector<int64_t>{1, 0, 1, 1});
  CHECK(avg.attrs.dilations == std::vector<int64_t>{1, 1});
  CHECK(avg.attrs.count_include_pad);
  CHECK(avg.attrs.ceil_mode);
  CHECK(out_shape(g, avg) == ints(read_expect("avgpool").at("out_shape")));

  const Graph m = load("maxpool");
  const Operator& mp = op_named(m, "mp");
  CHECK(mp.attrs.kernel_shape == std::vector<int64_t>{2, 3});
  CHECK(mp.attrs.strides == std::vector<int64_t>{1, 2});
  CHECK(mp.attrs.dilations == std::vector<int64_t>{2, 1});
  CHECK(mp.attrs.pads == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(mp.attrs.ceil_mode);
  CHECK_FALSE(mp.attrs.count_include_pad);
  CHECK(out_shape(m, mp) == ints(read_expect("maxpool").at("out_shape")));

  const Graph gap = load("global_avgpool");
  CHECK(out_shape(gap, op_named(gap, "gap")) == Shape{1, 5, 1, 1});
}

TEST_CASE("auto_pad resolved to explicit pads (random cases, oracle-confirmed)") {
  std::ifstream count_file(model_dir() + "/autopad.count");
  int count = 0;
  count_file >> count;
  REQUIRE(count > 0);
  const OpType types[] = {OpType::Conv, OpType::MaxPool, OpType::AveragePool};
  for (int i = 0; i < count; ++i) {
    const std::string name = "autopad_" + std::to_string(i);
    CAPTURE(name);
    const Expect e = read_expect(name);
    const Graph g = load(name);
    REQUIRE(g.ops.size() == 1);
    const Operator& op = g.ops[0];
    CHECK(op.type == types[static_cast<int>(e.at("op")[0])]);
    CHECK(op.attrs.pads == ints(e.at("pads")));
    CHECK(op.attrs.kernel_shape == ints(e.at("kernel")));
    CHECK(op.attrs.strides == ints(e.at("strides")));
    CHECK(op.attrs.dilations == ints(e.at("dilations")));
    CHECK(out_shape(g, op) == ints(e.at("out_shape")));
  }
}

TEST_CASE("Flatten with a negative axis stores its 2-D shape") {
  const Graph g = load("flatten_neg");
  const Operator& op = op_named(g, "flat");
  CHECK(op.attrs.axis == 1);
  CHECK(op.attrs.new_shape == std::vector<int64_t>{2, 60});
  CHECK(out_shape(g, op) == Shape{2, 60});
  CHECK(op.inputs.size() == 1);
}

TEST_CASE("Reshape resolves 0 and -1; allowzero; shape operand dropped") {
  const Graph g = load("reshape");
  const Operator& r1 = op_named(g, "reshape1");
  CHECK(r1.attrs.new_shape == std::vector<int64_t>{2, 12});
  CHECK(out_shape(g, r1) == Shape{2, 12});
  CHECK(r1.inputs.size() == 1);
  const Operator& r2 = op_named(g, "reshape2");
  CHECK(r2.attrs.new_shape == std::vector<int64_t>{1, 12, 2});
  CHECK(out_shape(g, r2) == Shape{1, 12, 2});
  CHECK_FALSE(g.find_tensor("s1").has_value());
  CHECK_FALSE(g.find_tensor("s2").has_value());

  const Graph z = load("reshape_allowzero");
  CHECK(z.opset == 14);
  CHECK(op_named(z, "rz").attrs.new_shape == std::vector<int64_t>{3, 2, 1});
}

TEST_CASE("Concat with a negative axis and a weight operand") {
  const Graph g = load("concat_neg");
  const Operator& op = op_named(g, "cat");
  CHECK(op.attrs.axis == 1);
  REQUIRE(op.inputs.size() == 3);
  CHECK(input_tensor(g, op, 1).is_weight);
  CHECK(input_tensor(g, op, 1).shape == Shape{2, 1, 4});
  CHECK(out_shape(g, op) == Shape{2, 9, 4});
}

TEST_CASE("Softmax: opset 11 coerces to 2-D with axis 1, opset 13 defaults to the last axis") {
  const Graph g11 = load("softmax_default_opset11");
  CHECK(g11.opset == 11);
  CHECK(op_named(g11, "sm").attrs.axis == 1);
  CHECK(op_named(g11, "sm").attrs.softmax_coerce_2d);
  const Graph n11 = load("softmax_neg_opset11");
  CHECK(op_named(n11, "sm").attrs.axis == 2);
  CHECK(op_named(n11, "sm").attrs.softmax_coerce_2d);
  const Graph g13 = load("softmax_default_opset13");
  CHECK(op_named(g13, "sm").attrs.axis == 2);
  CHECK_FALSE(op_named(g13, "sm").attrs.softmax_coerce_2d);
  const Graph n13 = load("softmax_neg_opset13");
  CHECK(op_named(n13, "sm").attrs.axis == 2);
  CHECK_FALSE(op_named(n13, "sm").attrs.softmax_coerce_2d);
}

TEST_CASE("BatchNormalization stays an op with its epsilon") {
  const Graph g = load("batchnorm");
  const Operator& op = op_named(g, "bn");
  CHECK(op.type == OpType::BatchNormalization);
  CHECK(op.attrs.epsilon == 1e-3f);
  REQUIRE(op.inputs.size() == 5);
  for (size_t i = 1; i < 5; ++i) CHECK(input_tensor(g, op, i).is_weight);
  CHECK(out_shape(g, op) == Shape{1, 3, 4, 4});
}

TEST_CASE("Constant nodes of every form become weights or Reshape shapes") {
  const Graph g = load("constants");
  REQUIRE(g.ops.size() == 4);
  const auto& k_tensor = input_tensor(g, op_named(g, "add_tensor"), 1);
  CHECK(k_tensor.is_weight);
  CHECK(k_tensor.weight == std::vector<float>{0, 1, 2, 3});
  const auto& k_float = input_tensor(g, op_named(g, "mul_float"), 1);
  CHECK(k_float.shape == Shape{});
  CHECK(k_float.weight == std::vector<float>{2.5f});
  CHECK(op_named(g, "reshape_ints").attrs.new_shape == std::vector<int64_t>{4, 2});
  const auto& k_floats = input_tensor(g, op_named(g, "add_floats"), 1);
  CHECK(k_floats.shape == Shape{2});
  CHECK(k_floats.weight == std::vector<float>{1.0f, -2.0f});
  CHECK_FALSE(g.find_tensor("k_int").has_value());  // unused constant dropped
  CHECK(g.tensors[g.outputs[0]].shape == Shape{4, 2});
}

TEST_CASE("Constant folding: ops on weights only become one weight") {
  const Graph g = load("fold");
  REQUIRE(g.ops.size() == 1);
  const Operator& live = op_named(g, "live_add");
  const auto& folded = input_tensor(g, live, 1);
  CHECK(folded.is_weight);
  CHECK(folded.name == "g");
  CHECK(folded.shape == Shape{3, 2});
  const auto expected = read_expect("fold").at("folded");
  REQUIRE(folded.weight.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK(folded.weight[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  // Inputs of folded ops and unused initializers are not in the graph.
  for (const char* gone : {"w0", "w1", "wg", "r", "k", "m", "f", "unused"})
    CHECK_MESSAGE(!g.find_tensor(gone).has_value(), gone);
  CHECK(g.tensors.size() == 3);
}

// A model whose one op is live_add(x, folded): the folded weight, equal
// element for element to ONNX Runtime's values in the model's .expect file.
tessera::graph::TensorInfo exact_folded_weight(const std::string& model) {
  const Graph g = load(model);
  REQUIRE(g.ops.size() == 1);
  const tessera::graph::TensorInfo folded = input_tensor(g, op_named(g, "live_add"), 1);
  const auto expected = read_expect(model).at("folded");
  REQUIRE(folded.weight.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(folded.weight[i] == expected[i]);
  return folded;
}

TEST_CASE("Constant folding: Mod, Neg, Abs, Size, CastLike of constants (ORT's values)") {
  CHECK(exact_folded_weight("fold_int_ops").is_weight);
}

TEST_CASE("Constant folding: GatherElements of constants (ORT's values)") {
  CHECK(exact_folded_weight("fold_gather_elements").shape == Shape{2, 3});
}

TEST_CASE("Constant folding: Trilu of constants, lower and upper (ORT's values)") {
  exact_folded_weight("fold_trilu");
}

TEST_CASE(
    "Constant folding: casts of NaN, infinities, out-of-range and fractional values; "
    "int64 Where, Max, Min of any size (ORT's values)") {
  exact_folded_weight("fold_casts");
}

TEST_CASE(
    "Constant folding: Floor, Ceil, Round, Sign exactly; Sin and Cos within an ulp; "
    "a run-time Sin") {
  exact_folded_weight("fold_rounding");
  const Graph g = load("fold_trig");
  REQUIRE(g.ops.size() == 1);
  const std::vector<float>& folded = input_tensor(g, op_named(g, "live_add"), 1).weight;
  const auto expected = read_expect("fold_trig").at("folded");
  REQUIRE(folded.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK(std::fabs(folded[i] - expected[i]) <= 1.2e-7 * std::max(1.0, std::fabs(expected[i])));
  const Graph runtime = load("sin_runtime");
  REQUIRE(runtime.ops.size() == 1);
  CHECK(runtime.ops[0].type == OpType::Sin);
}

TEST_CASE("Attention becomes the chain its ONNX function expands to; a KV length is refused") {
  const Graph g = load("attention_causal");
  std::vector<OpType> types;
  for (const Operator& op : g.ops) types.push_back(op.type);
  CHECK(types == std::vector<OpType>{OpType::Transpose, OpType::MatMul, OpType::Mul, OpType::Add,
                                     OpType::Softmax, OpType::MatMul});
  CHECK(g.tensors[g.outputs[0]].name == "y");
  CHECK(g.tensors[g.outputs[0]].shape == Shape{1, 2, 3, 4});
  CHECK(contains(import_error("attention_nonpad"),
                 "node 'attn_np' (op 'Attention', opset 24): nonpad_kv_seqlen (an external KV "
                 "cache) is not supported"));
  // A run-time bool mask is refused where it enters: Tessera has no bool activations.
  CHECK(contains(import_error("attention_bool_mask"), "input 'm' has type BOOL"));
}

TEST_CASE("Unsorted nodes, initializer listed as input, Identity/Dropout aliases") {
  const Graph g = load("unsorted");
  REQUIRE(g.ops.size() == 2);
  CHECK(g.ops[0].name == "add");
  CHECK(g.ops[1].name == "relu");
  REQUIRE(g.inputs.size() == 1);
  CHECK(g.tensors[g.inputs[0]].name == "x");
  CHECK(g.tensors[*g.find_tensor("w")].is_weight);
  CHECK_FALSE(g.find_tensor("unused").has_value());
  REQUIRE(g.outputs.size() == 1);
  CHECK(g.outputs[0] == g.ops[1].outputs[0]);
  CHECK(g.tensors[g.outputs[0]].name == "y");
  CHECK(g.tensors.size() == 4);
}

TEST_CASE("Unsupported ops are named with node, op and opset") {
  CHECK(import_error("unsupported_lstm") ==
        path_of("unsupported_lstm") +
            ": node 'conv3' (op 'LSTM', opset 13) is not supported by Tessera");
  CHECK(import_error("unsupported_unnamed") ==
        path_of("unsupported_unnamed") +
            ": node 'Softsign_0' (op 'Softsign', opset 12) is not supported by Tessera");
}

TEST_CASE("Static shapes, float32 activations and opsets 11..28 are required") {
  CHECK(import_error("symbolic_dim") ==
        path_of("symbolic_dim") +
            ": input 'x' has symbolic dimension 'batch' at axis 0; Tessera needs static shapes: "
            "give it a value with --shape batch=N, --shape x=DIMS or --batch N");
  CHECK(contains(import_error("unknown_dim"), "input 'x' has an unknown dimension at axis 0"));
  CHECK(import_error("opset9") ==
        path_of("opset9") + ": opset 9 is not supported (Tessera supports 11 to 28)");
  CHECK(contains(import_error("opset29"), "opset 29 is not supported (Tessera supports 11 to 28)"));
  CHECK(import_error("opset28").empty());
  CHECK(contains(import_error("gelu_opset13"),
                 "node 'gelu13' (op 'Gelu', opset 13): Gelu is not defined at opset 13"));
  CHECK(contains(import_error("avgpool_dilated"),
                 "node 'ap_dil' (op 'AveragePool', opset 19): attribute 'dilations' other than 1 "
                 "is not supported"));
  CHECK(contains(import_error("int_input"),
                 "node 'Relu_0' (op 'Relu', opset 13): reads the int64 input 'x' as data; "
                 "Tessera's run-time int64 arithmetic (float32, exact to 2^24) covers"));
}

TEST_CASE("Unsupported attribute values and non-constant operands are refused") {
  CHECK(contains(import_error("maxpool_storage_order"),
                 "node 'mp_so' (op 'MaxPool', opset 13): attribute storage_order = 1 is not "
                 "supported"));
  CHECK(contains(import_error("maxpool_indices"),
                 "node 'mp_idx' (op 'MaxPool', opset 13): the Indices output is not supported"));
  CHECK(contains(import_error("clip_dynamic_min"),
                 "node 'clip_dyn' (op 'Clip', opset 13): min (input 'lo') must be a constant"));
  CHECK(contains(import_error("int64_data"),
                 "node 'add_int' (op 'Add', opset 13): reads the int64 constant 'k' as data"));
  CHECK(contains(import_error("dropout_training"),
                 "node 'drop_train' (op 'Dropout', opset 13): training_mode must be a constant "
                 "false"));
  CHECK(contains(import_error("batchnorm_training"),
                 "node 'bn_train' (op 'BatchNormalization', opset 15): attribute training_mode = "
                 "1 is not supported"));
  CHECK(contains(import_error("reshape_dynamic_shape"),
                 "node 'rs_dyn' (op 'Reshape', opset 13): the shape input 's' must be an int64 "
                 "constant"));
  CHECK(contains(import_error("resize_dynamic_scales"),
                 "node 'rz_dyn' (op 'Resize', opset 19): the scales (input 'sc') must be a "
                 "float32 constant"));
  CHECK(contains(import_error("layernorm_mean_output"),
                 "node 'ln_mean' (op 'LayerNormalization', opset 17): only the first output (Y) "
                 "is supported"));
  const std::string bad_pad = import_error("bad_auto_pad");
  CHECK_MESSAGE(contains(bad_pad, "auto_pad"), bad_pad);
}

TEST_CASE("Graph outputs must be computed; declared shapes must agree") {
  CHECK(contains(import_error("output_is_input"), "graph output 'x' is the graph input 'x'"));
  CHECK(contains(import_error("output_is_weight"), "graph output 'w' is a constant"));
  const std::string mismatch = import_error("shape_mismatch");
  CHECK_MESSAGE(contains(mismatch, "relu_bad"), mismatch);
}

TEST_CASE("Missing, truncated and garbage files") {
  const std::string missing = model_dir() + "/no_such_model.onnx";
  try {
    import_onnx_file(missing);
    FAIL("a missing file imported");
  } catch (const tessera::Error& e) {
    CHECK(std::string(e.what()) == missing + ": cannot open the file (No such file or directory)");
  }

  std::ifstream in(path_of("conv_basic"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 100);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 7, size_t{0}}) {
    CAPTURE(keep);
    try {
      import_onnx_bytes(bytes.data(), keep, "trunc.onnx");
      FAIL("a truncated model imported");
    } catch (const tessera::Error& e) {
      CHECK(contains(e.what(), "trunc.onnx: not a valid ONNX model"));
    }
  }

  const std::string garbage_path = model_dir() + "/garbage.onnx";
  {
    std::ofstream out(garbage_path, std::ios::binary);
    out << "this is not an ONNX model\n";
    std::mt19937 rng(1234);
    for (int i = 0; i < 256; ++i) out.put(static_cast<char>(rng() & 0xff));
  }
  try {
    import_onnx_file(garbage_path);
    FAIL("garbage imported");
  } catch (const tessera::Error& e) {
    CHECK(std::string(e.what()).rfind(garbage_path + ": not a valid ONNX model", 0) == 0);
  }
}

TEST_CASE("Gather: int64 ids input for embeddings, constant indices as attributes") {
  const Graph g = load("gather_embedding");
  REQUIRE(g.inputs.size() == 1);
  CHECK(g.tensors[g.inputs[0]].dtype == tessera::graph::DType::Int64);
  REQUIRE(g.ops.size() == 2);
  CHECK(g.ops[0].type == OpType::Gather);
  CHECK(g.ops[0].inputs.size() == 2);  // table (weight) and ids (arena)
  CHECK(g.tensors[g.ops[0].outputs[0]].shape == Shape{2, 5, 4});
  CHECK(g.ops[1].inputs.size() == 1);  // constant scalar index: attributes
  CHECK(g.ops[1].attrs.axis == 1);
  CHECK(g.ops[1].attrs.indices == std::vector<int64_t>{0});
  CHECK(g.ops[1].attrs.indices_shape.empty());
  CHECK(g.tensors[g.outputs[0]].shape == Shape{2, 4});
}

TEST_CASE("Shape subgraphs fold at import; Reshape and Transpose remain") {
  const Graph g = load("shape_subgraph");
  REQUIRE(g.ops.size() == 2);
  CHECK(g.ops[0].type == OpType::Reshape);
  CHECK(g.ops[0].attrs.new_shape == Shape{2, 6, 2, 4});
  CHECK(g.ops[1].type == OpType::Transpose);
  CHECK(g.ops[1].attrs.perm == std::vector<int64_t>{0, 2, 1, 3});
  CHECK(g.tensors[g.outputs[0]].shape == Shape{2, 2, 6, 4});
}

TEST_CASE("Slice resolves clamped ends and negative steps; Unsqueeze becomes Reshape") {
  const Graph g = load("slice_unsqueeze");
  REQUIRE(g.ops.size() == 2);
  const Operator& sl = g.ops[0];
  CHECK(sl.type == OpType::Slice);
  // x[-1::-2, 1::3] of [4, 9]: rows 3, 1; columns 1, 4, 7.
  CHECK(sl.attrs.starts == std::vector<int64_t>{3, 1});
  CHECK(sl.attrs.steps == std::vector<int64_t>{-2, 3});
  CHECK(sl.attrs.new_shape == Shape{2, 3});
  CHECK(g.ops[1].type == OpType::Reshape);
  CHECK(g.ops[1].attrs.new_shape == Shape{2, 1, 3});
}

TEST_CASE("Opset 20: ReduceMean axes input, LayerNormalization, Gelu tanh") {
  const Graph g = load("norm_opset20");
  REQUIRE(g.ops.size() == 3);
  CHECK(g.ops[0].type == OpType::ReduceMean);
  CHECK(g.ops[0].attrs.axes == std::vector<int64_t>{0, 2});
  CHECK_FALSE(g.ops[0].attrs.keepdims);
  CHECK(g.tensors[g.ops[0].outputs[0]].shape == Shape{4});
  CHECK(g.ops[1].type == OpType::LayerNormalization);
  CHECK(g.ops[1].attrs.axis == 2);
  CHECK(g.ops[1].attrs.epsilon == doctest::Approx(1e-3));
  CHECK(g.ops[2].type == OpType::Gelu);
  CHECK(g.ops[2].attrs.gelu_tanh);
}

TEST_CASE("Where reads a bool constant as a float 0/1 weight; Expand; Cast float->float") {
  const Graph g = load("where_expand");
  REQUIRE(g.ops.size() == 2);  // the Cast is an identity
  const Operator& w = g.ops[0];
  CHECK(w.type == OpType::Where);
  const auto& mask = g.tensors[w.inputs[0]];
  CHECK(mask.is_weight);
  CHECK(mask.weight == std::vector<float>{1, 0, 0, 1, 1, 0, 1, 1, 1});
  CHECK(g.ops[1].type == OpType::Expand);
  CHECK(g.ops[1].attrs.new_shape == Shape{2, 3, 3});
}

TEST_CASE("Transformer-op refusals name the node and say why") {
  CHECK(contains(import_error("where_dynamic"),
                 "node 'where_dyn' (op 'Where', opset 13): 'c' is a float32 tensor computed at "
                 "run time, not a bool"));
  CHECK(contains(import_error("gather_nd_batch_dims"),
                 "node 'gnd' (op 'GatherND', opset 13): batch_dims other than 0 is not supported"));
  CHECK(contains(import_error("gather_nd_runtime_indices"),
                 "node 'gnd' (op 'GatherND', opset 13): needs constant integer indices; 'i' is "
                 "computed at run time"));
  CHECK(contains(import_error("cast_activation"),
                 "node 'cast_int' (op 'Cast', opset 13): casts the computed tensor 'x' (float32) "
                 "to INT64"));
  CHECK(contains(import_error("slice_empty"),
                 "node 'sl_empty' (op 'Slice', opset 13): selects no elements along axis 0"));
}

TEST_CASE("A float32 tensor cast to bool at run time: 1 - (x == 0)") {
  const Graph g = load("cast_float_to_bool");
  REQUIRE(g.ops.size() == 2);
  CHECK(g.ops[0].type == OpType::Equal);
  CHECK(g.ops[1].type == OpType::Sub);
  CHECK(g.ops[1].name == "cast_fb");
}

TEST_CASE("A run-time attention mask: a viewed int64 input cast to bool, Not, Where") {
  // The view emits nothing: the Cast reads the input itself and its result
  // is reshaped; bools are float 0/1, Not is 1 - x.
  const Graph g = load("runtime_mask");
  REQUIRE(g.ops.size() == 5);
  CHECK(g.ops[0].type == OpType::Cast);
  CHECK(g.ops[0].attrs.cast_to_bool);
  CHECK(g.tensors[g.ops[0].inputs[0]].dtype == tessera::graph::DType::Int64);
  CHECK(g.tensors[g.ops[0].outputs[0]].shape == Shape{2, 3});
  CHECK(g.ops[1].type == OpType::Reshape);
  CHECK(g.ops[1].attrs.new_shape == Shape{2, 1, 1, 3});
  CHECK(g.ops[2].type == OpType::Sub);
  CHECK(g.ops[3].type == OpType::Where);
  CHECK(g.ops[4].type == OpType::Add);
}

TEST_CASE("Integer arithmetic on int64 inputs runs in float32 and ends in checked indices") {
  // RoBERTa's position ids: the ids cast once, the int64 constant as float,
  // bools as integers (Cast to int32 keeps the tensor), Gather's indices
  // through ToIndex.
  const Graph g = load("position_ids");
  std::vector<OpType> types;
  for (const Operator& op : g.ops) types.push_back(op.type);
  CHECK(types == std::vector<OpType>{OpType::Cast, OpType::Equal, OpType::Sub, OpType::CumSum,
                                     OpType::Mul, OpType::Add, OpType::ToIndex, OpType::Gather});
  CHECK_FALSE(g.ops[0].attrs.cast_to_bool);
  CHECK(g.ops[3].attrs.axis == 1);
  CHECK(g.tensors[g.ops[6].outputs[0]].dtype == tessera::graph::DType::Int64);
  CHECK(g.ops[7].inputs[1] == g.ops[6].outputs[0]);
  // Token ids viewed with another shape as Gather indices: cast, viewed,
  // checked back to int64.
  const Graph viewed = load("int64_view_gather");
  types.clear();
  for (const Operator& op : viewed.ops) types.push_back(op.type);
  CHECK(types ==
        std::vector<OpType>{OpType::Cast, OpType::Reshape, OpType::ToIndex, OpType::Gather});
  CHECK(viewed.tensors[viewed.ops[3].outputs[0]].shape == Shape{2, 1, 3, 4});
  CHECK(contains(import_error("int_div_runtime"),
                 "node 'halve' (op 'Div', opset 13): reads the int64 input 'ids' as data; "
                 "Tessera's run-time int64 arithmetic (float32, exact to 2^24) covers"));
  CHECK(contains(import_error("int_constant_too_big"),
                 "node 'shift' (op 'Add', opset 13): the int64 constant 'big' holds 1073741824"));
  CHECK(contains(import_error("cumsum_exclusive"),
                 "node 'cs' (op 'CumSum', opset 13): exclusive and reverse sums are not "
                 "supported"));
}

TEST_CASE("Split becomes one Slice per output: attribute, input and num_outputs forms") {
  const Graph g11 = load("split_op11");
  REQUIRE(g11.ops.size() == 2);
  CHECK(g11.ops[0].type == OpType::Slice);
  CHECK(g11.ops[0].attrs.starts == std::vector<int64_t>{0, 0, 0});
  CHECK(g11.ops[0].attrs.new_shape == Shape{2, 1, 3});
  CHECK(g11.ops[1].attrs.starts == std::vector<int64_t>{0, 1, 0});
  CHECK(g11.ops[1].attrs.new_shape == Shape{2, 3, 3});
  const Graph g13 = load("split_op13");
  REQUIRE(g13.ops.size() == 3);
  CHECK(g13.ops[2].attrs.starts == std::vector<int64_t>{0, 6});
  CHECK(g13.tensors[g13.outputs[1]].shape == Shape{2, 4});
  const Graph g18 = load("split_op18");  // ceil(7 / 3) = 3: chunks 3, 3, 1
  REQUIRE(g18.ops.size() == 3);
  CHECK(g18.tensors[g18.outputs[0]].shape == Shape{3, 2});
  CHECK(g18.tensors[g18.outputs[2]].shape == Shape{1, 2});
  CHECK(g18.ops[2].attrs.starts == std::vector<int64_t>{6, 0});
  CHECK(contains(import_error("split_bad"),
                 "node 'sp_bad' (op 'Split', opset 13): cannot split a dim of 3 into 2 equal "
                 "parts"));
}

TEST_CASE("Pad with axes and a constant value, Resize from scales or sizes, Max of three") {
  const Graph g = load("pad_resize_max");
  const Operator& pad = op_named(g, "pad");
  CHECK(pad.type == OpType::Pad);
  CHECK(pad.attrs.pads == std::vector<int64_t>{0, 0, 1, -1, 0, 0, 2, 0});
  CHECK(pad.attrs.pad_value == 0.5f);
  CHECK(out_shape(g, pad) == Shape{1, 2, 6, 3});
  const Operator& rs = op_named(g, "rs");
  CHECK(rs.attrs.resize_mode == tessera::graph::ResizeMode::Nearest);
  CHECK(rs.attrs.coordinate_mode == tessera::graph::CoordinateMode::Asymmetric);
  CHECK(rs.attrs.nearest_mode == tessera::graph::NearestMode::Floor);
  CHECK(rs.attrs.scales == std::vector<float>{1, 1, 2, 1.5f});
  CHECK(out_shape(g, rs) == Shape{1, 2, 12, 4});
  const Operator& rs2 = op_named(g, "rs2");
  CHECK(rs2.attrs.resize_mode == tessera::graph::ResizeMode::Linear);
  CHECK(out_shape(g, rs2) == Shape{1, 2, 5, 7});
  CHECK(rs2.attrs.scales[3] == doctest::Approx(7.0 / 4.0));
  // Max(r, r, r): two chained binary Max ops.
  int maxes = 0;
  for (const auto& op : g.ops) maxes += op.type == OpType::Max;
  CHECK(maxes == 2);
  CHECK(contains(import_error("pad_wrap"),
                 "node 'pad_wrap' (op 'Pad', opset 19): mode 'wrap' is not supported"));
}

TEST_CASE("Symbolic and unknown input dims: fixed by --batch / --shape, else refused") {
  using tessera::serialization::InputShapeOverrides;
  auto error_with = [](const InputShapeOverrides& o) -> std::string {
    try {
      import_onnx_file(path_of("symbolic_dims"), o);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "";
  };
  // The symbol `seq` and the batch: x is [N, seq, 4], z is [?, 1, 4].
  InputShapeOverrides o;
  o.batch = 3;
  o.shapes["seq"] = {5};
  const Graph g = import_onnx_file(path_of("symbolic_dims"), o);
  check_well_formed(g);
  CHECK(g.tensors[g.inputs[0]].shape == Shape{3, 5, 4});
  CHECK(g.tensors[g.inputs[1]].shape == Shape{3, 1, 4});
  // Whole shapes by input name (and a symbol by name wins over --batch).
  InputShapeOverrides by_name;
  by_name.shapes["x"] = {2, 7, 4};
  by_name.shapes["z"] = {2, 1, 4};
  const Graph h = import_onnx_file(path_of("symbolic_dims"), by_name);
  CHECK(h.tensors[h.outputs[0]].shape == Shape{2, 7, 4});
  // Missing values name the input and the dim.
  InputShapeOverrides no_seq;
  no_seq.batch = 3;
  CHECK(contains(error_with(no_seq), "input 'x' has symbolic dimension 'seq' at axis 1"));
  CHECK(contains(error_with({}), "input 'x' has symbolic dimension 'N' at axis 0"));
  InputShapeOverrides only_seq;
  only_seq.shapes["seq"] = {5};
  only_seq.shapes["N"] = {2};
  CHECK(contains(error_with(only_seq), "input 'z' has an unknown dimension at axis 0"));
  // Conflicts and typos are errors, not ignored.
  InputShapeOverrides conflict;
  conflict.shapes["x"] = {2, 7, 5};
  CHECK(
      contains(error_with(conflict), "disagrees with the model, whose input 'x' has 4 at axis 2"));
  InputShapeOverrides typo;
  typo.batch = 1;
  typo.shapes["sequence"] = {5};
  CHECK(contains(error_with(typo), "the model has no input or symbolic dim named 'sequence'"));
  InputShapeOverrides rank;
  rank.shapes["z"] = {1, 4};
  CHECK(contains(error_with(rank), "has 2 dims but input 'z' has rank 3"));
}
