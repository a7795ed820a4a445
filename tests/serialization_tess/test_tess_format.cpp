// The .tess format: round trip, zero-copy weights, and a reader that turns
// every truncated, corrupt or inconsistent file into a one-line tessera::Error.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "graph/tile_graph.hpp"
#include "serialization/tess/tess_format.hpp"
#include "serialization/tess/tess_generated.h"
#include "serialization/tess/tess_reader.hpp"
#include "serialization/tess/tess_writer.hpp"

namespace {

using namespace tessera;
using graph::CompiledTensor;
using graph::OpType;
using graph::Region;
using graph::TensorStorage;
using graph::TileGraph;
using graph::TileNode;
using serialization::read_tess_bytes;
using serialization::read_tess_file;
using serialization::serialize_tess;
using serialization::write_tess_file;

constexpr char kOrigin[] = "model.tess";

uint64_t test_seed() {
  if (const char* s = std::getenv("TESSERA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// A directory of its own for this process's files, removed at exit.
struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tessera_tess_test_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};
const TempDir& temp_dir() {
  static TempDir dir;
  return dir;
}

// The hand-built test model: Conv(X, W, B) -> Y; Relu(Y) -> R; Add(R, Y) -> Z,
// each cut into 3 row tiles of H = 5: rows [0,2), [2,4), [4,5).
// Edges, worked out by hand: Relu tile i reads Conv tile i's rows only; Add
// tile i reads Relu tile i and Conv tile i. Nodes: conv 0-2, relu 3-5, add 6-8.
struct TestModel {
  std::vector<float> conv_weight;  // [4,2,3,3]
  std::vector<float> conv_bias;    // [4]
  TileGraph graph;
};

TestModel make_test_model(uint64_t seed) {
  TestModel m;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  m.conv_weight.resize(4 * 2 * 3 * 3);
  m.conv_bias.resize(4);
  for (float& v : m.conv_weight) v = value(rng);
  for (float& v : m.conv_bias) v = value(rng);

  TileGraph& g = m.graph;
  auto arena = [](std::string name, graph::Shape shape, uint64_t offset) {
    CompiledTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.arena_offset = offset;
    return t;
  };
  auto weight = [](std::string name, graph::Shape shape, const std::vector<float>& data) {
    CompiledTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.storage = TensorStorage::Weight;
    t.weight = data;
    return t;
  };
  // Arena: X 240 bytes at 0, Y/R/Z 480 bytes each at the next 64-byte boundaries.
  g.tensors = {arena("X", {1, 2, 5, 6}, 0),   weight("W", {4, 2, 3, 3}, m.conv_weight),
               weight("B", {4}, m.conv_bias), arena("Y", {1, 4, 5, 6}, 256),
               arena("R", {1, 4, 5, 6}, 768), arena("Z", {1, 4, 5, 6}, 1280)};
  g.arena_bytes = 1280 + 480;

  graph::Operator conv;
  conv.name = "conv1";
  conv.type = OpType::Conv;
  conv.attrs.kernel_shape = {3, 3};
  conv.attrs.strides = {1, 1};
  conv.attrs.pads = {1, 1, 1, 1};
  conv.attrs.dilations = {1, 1};
  conv.inputs = {0, 1, 2};
  conv.outputs = {3};
  conv.kernel = "reference";

  // Relu ignores its attributes; giving every field a non-default value makes
  // the round trip check every attribute field of the schema.
  graph::Operator relu;
  relu.name = "relu1";
  relu.type = OpType::Relu;
  relu.attrs.kernel_shape = {7};
  relu.attrs.strides = {2, 3};
  relu.attrs.pads = {0, 1, 2, 3};
  relu.attrs.dilations = {5};
  relu.attrs.group = 3;
  relu.attrs.axis = 2;
  relu.attrs.alpha = 0.25f;
  relu.attrs.beta = -1.5f;
  relu.attrs.trans_a = true;
  relu.attrs.trans_b = true;
  relu.attrs.clip_min = -6.0f;
  relu.attrs.clip_max = 6.0f;
  relu.attrs.count_include_pad = true;
  relu.attrs.ceil_mode = true;
  relu.attrs.softmax_coerce_2d = true;
  relu.attrs.epsilon = 1e-3f;
  relu.attrs.new_shape = {1, 120};
  relu.attrs.perm = {3, 0, 2, 1};
  relu.attrs.indices = {-4, 0, 9};
  relu.attrs.indices_shape = {3, 1};
  relu.attrs.starts = {5, 0};
  relu.attrs.steps = {-2, 7};
  relu.attrs.axes = {0, 2};
  relu.attrs.keepdims = false;
  relu.attrs.gelu_tanh = true;
  relu.attrs.pad_mode = graph::PadMode::Reflect;
  relu.attrs.pad_value = -2.5f;
  relu.attrs.resize_mode = graph::ResizeMode::Linear;
  relu.attrs.coordinate_mode = graph::CoordinateMode::AlignCorners;
  relu.attrs.nearest_mode = graph::NearestMode::Ceil;
  relu.attrs.scales = {1.0f, 2.5f};
  relu.attrs.leaky_relu_alpha = 0.3f;
  relu.attrs.cast_to_bool = true;
  relu.attrs.nan_probabilities_to_zero = true;
  relu.inputs = {3};
  relu.outputs = {4};
  relu.kernel = "xsimd_avx2";

  graph::Operator add;
  add.name = "add1";
  add.type = OpType::Add;
  add.inputs = {4, 3};
  add.outputs = {5};
  add.kernel = "reference";
  g.ops = {conv, relu, add};

  const int64_t row_begin[3] = {0, 2, 4}, row_end[3] = {2, 4, 5};
  g.nodes.resize(9);
  for (int32_t op = 0; op < 3; ++op)
    for (int32_t i = 0; i < 3; ++i) {
      TileNode& n = g.nodes[op * 3 + i];
      n.op = op;
      n.region = Region{{0, 0, row_begin[i], 0}, {1, 4, row_end[i], 6}};
    }
  for (int32_t i = 0; i < 3; ++i) {
    g.nodes[i].children = {3 + i, 6 + i};
    g.nodes[i].parent_count = 0;
    g.nodes[i].depth = 0;
    g.nodes[3 + i].children = {6 + i};
    g.nodes[3 + i].parent_count = 1;
    g.nodes[3 + i].depth = 1;
    g.nodes[6 + i].parent_count = 2;
    g.nodes[6 + i].depth = 2;
  }
  g.inputs = {0};
  g.outputs = {5};
  g.options = {.tiles = 3, .threads = 7, .target = "x86_64 avx2"};
  return m;
}

// Appends a float32 tensor (a weight of 0.25s, or an activation) to g.
int32_t add_tensor(graph::Graph& g, std::string name, graph::Shape shape, bool weight) {
  graph::TensorInfo info{std::move(name), std::move(shape), graph::DType::Float32, weight, {}};
  if (weight) info.weight.assign(static_cast<size_t>(graph::shape_numel(info.shape)), 0.25f);
  g.tensors.push_back(std::move(info));
  return static_cast<int32_t>(g.tensors.size() - 1);
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Floats compared bitwise: a corrupted file may carry NaN attributes, which
// must survive a round trip too.
bool same_attributes(const graph::OpAttributes& a, const graph::OpAttributes& b) {
  return a.kernel_shape == b.kernel_shape && a.strides == b.strides && a.pads == b.pads &&
         a.dilations == b.dilations && a.group == b.group && a.axis == b.axis &&
         same_bits(a.alpha, b.alpha) && same_bits(a.beta, b.beta) && a.trans_a == b.trans_a &&
         a.trans_b == b.trans_b && same_bits(a.clip_min, b.clip_min) &&
         same_bits(a.clip_max, b.clip_max) && a.count_include_pad == b.count_include_pad &&
         a.ceil_mode == b.ceil_mode && a.softmax_coerce_2d == b.softmax_coerce_2d &&
         same_bits(a.epsilon, b.epsilon) && a.new_shape == b.new_shape && a.perm == b.perm &&
         a.indices == b.indices && a.indices_shape == b.indices_shape && a.starts == b.starts &&
         a.steps == b.steps && a.axes == b.axes && a.keepdims == b.keepdims &&
         a.gelu_tanh == b.gelu_tanh && a.activation == b.activation &&
         a.fused_residual == b.fused_residual && a.fused_input_scale == b.fused_input_scale &&
         a.fused_expand == b.fused_expand && a.expand_activation == b.expand_activation &&
         same_bits(a.expand_clip_min, b.expand_clip_min) &&
         same_bits(a.expand_clip_max, b.expand_clip_max) &&
         same_bits(a.leaky_relu_alpha, b.leaky_relu_alpha) && a.cast_to_bool == b.cast_to_bool &&
         a.nan_probabilities_to_zero == b.nan_probabilities_to_zero && a.pad_mode == b.pad_mode &&
         same_bits(a.pad_value, b.pad_value) && a.resize_mode == b.resize_mode &&
         a.coordinate_mode == b.coordinate_mode && a.nearest_mode == b.nearest_mode &&
         a.scales.size() == b.scales.size() &&
         std::equal(a.scales.begin(), a.scales.end(), b.scales.begin(), same_bits);
}

void check_same_graph(const TileGraph& a, const TileGraph& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    CAPTURE(i);
    const CompiledTensor& x = a.tensors[i];
    const CompiledTensor& y = b.tensors[i];
    CHECK(x.name == y.name);
    CHECK(x.shape == y.shape);
    CHECK(x.dtype == y.dtype);
    CHECK(x.storage == y.storage);
    CHECK(x.layout == y.layout);
    if (x.storage == TensorStorage::Arena) CHECK(x.arena_offset == y.arena_offset);
    REQUIRE(x.weight.size() == y.weight.size());
    CHECK(std::equal(x.weight.begin(), x.weight.end(), y.weight.begin(), same_bits));
  }
  REQUIRE(a.ops.size() == b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    CAPTURE(i);
    CHECK(a.ops[i].name == b.ops[i].name);
    CHECK(a.ops[i].type == b.ops[i].type);
    CHECK(same_attributes(a.ops[i].attrs, b.ops[i].attrs));
    CHECK(a.ops[i].inputs == b.ops[i].inputs);
    CHECK(a.ops[i].outputs == b.ops[i].outputs);
    CHECK(a.ops[i].kernel == b.ops[i].kernel);
  }
  REQUIRE(a.nodes.size() == b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    CAPTURE(i);
    CHECK(a.nodes[i].op == b.nodes[i].op);
    CHECK(a.nodes[i].region == b.nodes[i].region);
    CHECK(a.nodes[i].children == b.nodes[i].children);
    CHECK(a.nodes[i].parent_count == b.nodes[i].parent_count);
    CHECK(a.nodes[i].depth == b.nodes[i].depth);
  }
  CHECK(a.inputs == b.inputs);
  CHECK(a.outputs == b.outputs);
  CHECK(a.arena_bytes == b.arena_bytes);
  CHECK(a.options.tiles == b.options.tiles);
  CHECK(a.options.threads == b.options.threads);
  CHECK(a.options.target == b.options.target);
}

// Reads bytes held in an allocation of exactly their size, so that any read
// past the end is a sanitizer report.
TileGraph read_exact_copy(const std::vector<uint8_t>& bytes, size_t length) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.begin() + length);
  const uint8_t* data = copy->data();
  return read_tess_bytes(copy, data, length, kOrigin);
}

std::string read_error(const std::vector<uint8_t>& bytes) {
  try {
    read_exact_copy(bytes, bytes.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Serialises the test model after `corrupt` has changed it and checks that the
// reader rejects it with a one-line message naming the file and every key word.
void check_rejected(const std::function<void(TileGraph&)>& corrupt,
                    const std::vector<std::string>& key_words) {
  TestModel m = make_test_model(1);
  corrupt(m.graph);
  std::string message = read_error(serialize_tess(m.graph));
  CAPTURE(message);
  REQUIRE(!message.empty());
  CHECK(message.rfind(std::string(kOrigin) + ": ", 0) == 0);
  CHECK(message.find('\n') == std::string::npos);
  for (const std::string& word : key_words) {
    CAPTURE(word);
    CHECK(message.find(word) != std::string::npos);
  }
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::string file_error(const std::string& path) {
  try {
    read_tess_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the hand-built model is accepted as it is") {
  TestModel m = make_test_model(1);
  CHECK(read_error(serialize_tess(m.graph)) == "");
}

TEST_CASE("round trip through a file keeps every field and maps weights in place") {
  uint64_t seed = test_seed();
  MESSAGE("seed ", seed, " (TESSERA_TEST_SEED replays it)");
  TestModel m = make_test_model(seed);
  std::string path = temp_dir().file("round_trip.tess");
  write_tess_file(m.graph, path);
  TileGraph back = read_tess_file(path);
  check_same_graph(m.graph, back);

  // Weights must be bitwise equal to the originals and point into the mapping
  // (storage is the mapped image when nothing had to be copied).
  auto file_size = std::filesystem::file_size(path);
  const auto* image = static_cast<const uint8_t*>(back.storage.get());
  REQUIRE(image != nullptr);
  for (int t : {1, 2}) {
    CAPTURE(t);
    const auto* p = reinterpret_cast<const uint8_t*>(back.tensors[t].weight.data());
    CHECK(p >= image);
    CHECK(p + back.tensors[t].weight.size_bytes() <= image + file_size);
    CHECK(reinterpret_cast<uintptr_t>(p) % serialization::kTessWeightAlignment == 0);
  }
  CHECK(std::memcmp(back.tensors[1].weight.data(), m.conv_weight.data(),
                    m.conv_weight.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(back.tensors[2].weight.data(), m.conv_bias.data(),
                    m.conv_bias.size() * sizeof(float)) == 0);

  // The weights outlive every other handle on the file.
  std::vector<float> expected(back.tensors[1].weight.begin(), back.tensors[1].weight.end());
  std::shared_ptr<const void> keep = back.storage;
  std::span<const float> w = back.tensors[1].weight;
  back = TileGraph{};
  std::filesystem::remove(path);
  CHECK(std::equal(w.begin(), w.end(), expected.begin()));
}

TEST_CASE("NHWC layouts survive a round trip; the reader refuses them where kernels cannot") {
  TestModel m = make_test_model(3);
  m.graph.tensors[3].layout = graph::Layout::NHWC;  // between conv1 and relu1/add1
  m.graph.tensors[4].layout = graph::Layout::NHWC;
  const std::vector<uint8_t> bytes = serialize_tess(m.graph);
  const TileGraph back = read_exact_copy(bytes, bytes.size());
  check_same_graph(m.graph, back);
  CHECK(back.tensors[3].layout == graph::Layout::NHWC);
  CHECK(back.tensors[0].layout == graph::Layout::NCHW);
  SUBCASE("NHWC weight") {
    check_rejected([](TileGraph& g) { g.tensors[1].layout = graph::Layout::NHWC; },
                   {"tensor 1", "NHWC", "only rank-4 arena tensors"});
  }
  SUBCASE("NHWC model input") {
    check_rejected([](TileGraph& g) { g.tensors[0].layout = graph::Layout::NHWC; },
                   {"model input 0", "NHWC", "must be NCHW"});
  }
  SUBCASE("NHWC model output") {
    check_rejected([](TileGraph& g) { g.tensors[5].layout = graph::Layout::NHWC; },
                   {"model output 0", "NHWC", "must be NCHW"});
  }
}

TEST_CASE("a MatMul with a fused bias and GELU epilogue survives a round trip") {
  // MatMul(x, W) + b, then Gelu: the compiler fuses both into the MatMul.
  for (bool tanh : {false, true}) {
    CAPTURE(tanh);
    graph::Graph g;
    auto tensor = [&](std::string name, graph::Shape shape, bool weight) {
      return add_tensor(g, std::move(name), std::move(shape), weight);
    };
    const int32_t x = tensor("x", {2, 3, 5}, false), w = tensor("w", {5, 4}, true);
    const int32_t b = tensor("b", {1, 4}, true), y = tensor("y", {2, 3, 4}, false);
    const int32_t z = tensor("z", {2, 3, 4}, false), out = tensor("out", {2, 3, 4}, false);
    auto op = [&](OpType type, std::vector<int32_t> in, int32_t result) {
      graph::Operator o;
      o.name = std::string(graph::op_type_name(type));
      o.type = type;
      o.attrs.gelu_tanh = type == OpType::Gelu && tanh;
      o.inputs = std::move(in);
      o.outputs = {result};
      g.ops.push_back(std::move(o));
    };
    op(OpType::MatMul, {x, w}, y);
    op(OpType::Add, {b, y}, z);
    op(OpType::Gelu, {z}, out);
    g.inputs = {x};
    g.outputs = {out};
    const TileGraph tg =
        graph::compile_graph(g, graph::CompileOptions{.tiles = 2, .target = "test"}, nullptr);
    REQUIRE(tg.ops.size() == 1);
    const std::vector<uint8_t> bytes = serialize_tess(tg);
    const TileGraph back = read_exact_copy(bytes, bytes.size());
    check_same_graph(tg, back);
    REQUIRE(back.ops[0].inputs.size() == 3);
    CHECK(back.tensors[static_cast<size_t>(back.ops[0].inputs[2])].shape == graph::Shape{4});
    CHECK(back.ops[0].attrs.activation ==
          (tanh ? graph::Activation::GeluTanh : graph::Activation::Gelu));
  }
}

TEST_CASE("a depthwise conv with a fused 1x1 expansion survives a round trip") {
  // Conv 1x1 (4 -> 64, Clip) then a depthwise 3x3 over a 64×64 map: 1 MiB
  // expanded, so the compiler fuses the pair (graph/fuse_expand_depthwise.hpp).
  graph::Graph g;
  auto tensor = [&](std::string name, graph::Shape shape, bool weight) {
    return add_tensor(g, std::move(name), std::move(shape), weight);
  };
  const int32_t in = tensor("in", {1, 4, 64, 64}, false);
  const int32_t x = tensor("x", {1, 4, 64, 64}, false), ew = tensor("ew", {64, 4, 1, 1}, true);
  const int32_t e = tensor("e", {1, 64, 64, 64}, false), w = tensor("w", {64, 1, 3, 3}, true);
  const int32_t y = tensor("y", {1, 64, 64, 64}, false);
  auto conv = [&](std::string name, std::vector<int32_t> in, int32_t out, int64_t k,
                  int64_t group) {
    graph::Operator o;
    o.name = std::move(name);
    o.type = OpType::Conv;
    o.attrs.kernel_shape = {k, k};
    o.attrs.strides = {1, 1};
    o.attrs.dilations = {1, 1};
    o.attrs.pads = {k / 2, k / 2, k / 2, k / 2};
    o.attrs.group = group;
    o.attrs.activation = graph::Activation::Clip;
    o.attrs.clip_min = 0.0f;
    o.attrs.clip_max = 6.0f;
    o.inputs = std::move(in);
    o.outputs = {out};
    g.ops.push_back(std::move(o));
  };
  const int32_t out = tensor("out", {1, 64, 64, 64}, false);
  // Relu before and after: model inputs and outputs stay NCHW, and the
  // fused kernel is NHWC only, so the pass leaves a pair touching them.
  auto relu = [&](int32_t from, int32_t to) {
    graph::Operator o;
    o.name = "relu" + std::to_string(from);
    o.type = OpType::Relu;
    o.inputs = {from};
    o.outputs = {to};
    g.ops.push_back(std::move(o));
  };
  relu(in, x);
  conv("expand", {x, ew}, e, 1, 1);
  conv("dw", {e, w}, y, 3, 64);
  relu(y, out);
  g.inputs = {in};
  g.outputs = {out};
  const TileGraph tg =
      graph::compile_graph(g, graph::CompileOptions{.tiles = 2, .target = "test"}, nullptr);
  REQUIRE(tg.ops.size() == 3);
  REQUIRE(tg.ops[1].attrs.fused_expand);
  const std::vector<uint8_t> bytes = serialize_tess(tg);
  const TileGraph back = read_exact_copy(bytes, bytes.size());
  check_same_graph(tg, back);
  CHECK(back.ops[1].attrs.fused_expand);
  CHECK(back.ops[1].attrs.expand_activation == graph::Activation::Clip);
  CHECK(back.ops[1].attrs.expand_clip_max == 6.0f);
  REQUIRE(back.ops[1].inputs.size() == 5);
  CHECK(back.tensors[static_cast<size_t>(back.ops[1].inputs[3])].shape ==
        graph::Shape{64, 4, 1, 1});
}

TEST_CASE("serialize_tess places weight data on 64-byte boundaries of the image") {
  TestModel m = make_test_model(2);
  std::vector<uint8_t> bytes = serialize_tess(m.graph);
  auto image = std::make_shared<std::vector<uint8_t>>(bytes);
  const uint8_t* base = image->data();
  TileGraph back = read_tess_bytes(image, base, image->size(), kOrigin);
  for (int t : {1, 2}) {
    CAPTURE(t);
    CHECK(back.storage == image);  // in place: the caller's bytes are what is kept
    auto offset = reinterpret_cast<const uint8_t*>(back.tensors[t].weight.data()) - base;
    CHECK(offset > 0);
    CHECK(static_cast<size_t>(offset) < bytes.size());
    CHECK(offset % 64 == 0);
  }
}

TEST_CASE("bytes that are not 8-byte aligned are read through a copy") {
  TestModel m = make_test_model(3);
  std::vector<uint8_t> bytes = serialize_tess(m.graph);
  for (size_t shift : {1, 3, 4}) {
    CAPTURE(shift);
    auto buffer = std::make_shared<std::vector<uint8_t>>(bytes.size() + shift);
    std::memcpy(buffer->data() + shift, bytes.data(), bytes.size());
    TileGraph back = read_tess_bytes(buffer, buffer->data() + shift, bytes.size(), kOrigin);
    check_same_graph(m.graph, back);
    buffer.reset();  // the result must not depend on the caller's bytes
    CHECK(back.tensors[1].weight[5] == m.conv_weight[5]);
  }
}

TEST_CASE("every truncation of a file is an error") {
  TestModel m = make_test_model(4);
  std::vector<uint8_t> bytes = serialize_tess(m.graph);
  MESSAGE("file of ", bytes.size(), " bytes");
  for (size_t length = 0; length < bytes.size(); ++length) {
    CAPTURE(length);
    CHECK_THROWS_AS(read_exact_copy(bytes, length), Error);
  }
  // The same through files and mmap, at a few lengths.
  for (size_t length : {size_t{1}, size_t{7}, size_t{8}, bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(length);
    std::string path = temp_dir().file("truncated.tess");
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + length));
    std::string message = file_error(path);
    CHECK(message.rfind(path + ": ", 0) == 0);
  }
}

TEST_CASE("random single-byte flips give an error or a graph that passed every check") {
  uint64_t seed = test_seed();
  MESSAGE("seed ", seed, " (TESSERA_TEST_SEED replays it)");
  TestModel m = make_test_model(seed);
  const std::vector<uint8_t> bytes = serialize_tess(m.graph);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> position(0, bytes.size() - 1);
  std::uniform_int_distribution<int> flip(1, 255);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::vector<uint8_t> corrupt = bytes;
    size_t at = position(rng);
    corrupt[at] ^= static_cast<uint8_t>(flip(rng));
    CAPTURE(trial);
    CAPTURE(at);
    try {
      TileGraph g = read_exact_copy(corrupt, corrupt.size());
      ++accepted;
      // What the reader accepted must survive another trip unchanged.
      std::vector<uint8_t> again = serialize_tess(g);
      TileGraph g2 = read_exact_copy(again, again.size());
      check_same_graph(g, g2);
    } catch (const Error& e) {
      ++rejected;
      std::string message = e.what();
      CHECK(message.find('\n') == std::string::npos);
      CHECK(message.rfind(std::string(kOrigin) + ": ", 0) == 0);
    }
  }
  MESSAGE(rejected, " flips rejected, ", accepted, " accepted");
  CHECK(rejected > 0);
}

TEST_CASE("random 32-bit overwrites (offsets, counts, indices) never crash") {
  uint64_t seed = test_seed();
  MESSAGE("seed ", seed, " (TESSERA_TEST_SEED replays it)");
  TestModel m = make_test_model(seed);
  const std::vector<uint8_t> bytes = serialize_tess(m.graph);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> word(0, bytes.size() / 4 - 1);
  // Small values and values near the int32 limits reach the most checks.
  const uint32_t interesting[] = {0, 1, 2, 3, 4, 8, 9, 63, 64, 0x7fffffff, 0x80000000, 0xffffffff};
  int rejected = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::vector<uint8_t> corrupt = bytes;
    size_t at = word(rng) * 4;
    uint32_t value = trial % 2 ? static_cast<uint32_t>(rng()) : interesting[rng() % 12];
    std::memcpy(corrupt.data() + at, &value, 4);
    CAPTURE(trial);
    CAPTURE(at);
    try {
      read_exact_copy(corrupt, corrupt.size());
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
}

TEST_CASE("targeted corruptions give their specific messages") {
  SUBCASE("child index out of range") {
    check_rejected([](TileGraph& g) { g.nodes[4].children = {99999}; },
                   {"node 4 lists child 99999 but the graph has 9 nodes"});
  }
  SUBCASE("cycle: a child before its parent") {
    check_rejected([](TileGraph& g) { g.nodes[6].children = {0}; }, {"node 6", "child 0", "cycle"});
  }
  SUBCASE("self loop") {
    check_rejected([](TileGraph& g) { g.nodes[5].children.push_back(5); },
                   {"node 5", "child 5", "cycle"});
  }
  SUBCASE("duplicate child") {
    check_rejected(
        [](TileGraph& g) {
          g.nodes[0].children = {3, 6, 3};
        },
        {"node 0", "child 3", "twice"});
  }
  SUBCASE("wrong parent_count") {
    check_rejected([](TileGraph& g) { g.nodes[7].parent_count = 3; },
                   {"node 7", "parent_count 3", "2 nodes list it"});
  }
  SUBCASE("missing edge leaves parent_count too high") {
    check_rejected([](TileGraph& g) { g.nodes[4].children.clear(); },
                   {"node 7", "parent_count 2", "1 nodes list it"});
  }
  SUBCASE("an edge the dependency functions require is missing, counts made consistent") {
    check_rejected(
        [](TileGraph& g) {
          g.nodes[4].children.clear();
          g.nodes[7].parent_count = 1;
          g.nodes[7].depth = 1;
          g.nodes[8].depth = 2;
        },
        {"node 7", "reads what node 4 writes", "no edge"});
  }
  SUBCASE("an op reading an int64 tensor as float data") {
    check_rejected([](TileGraph& g) { g.tensors[0].dtype = graph::DType::Int64; },
                   {"op 0", "Conv", "input 0 is int64 but must be float32"});
  }
  SUBCASE("a model output that is not float32") {
    check_rejected(
        [](TileGraph& g) {
          g.tensors[5].dtype = graph::DType::Int64;
          g.arena_bytes = 1280 + 960;  // room for the wider elements
        },
        {"model output 0", "'Z'", "int64", "must be float32"});
  }
  SUBCASE("a model input of a type the runtime cannot take") {
    check_rejected([](TileGraph& g) { g.tensors[0].dtype = graph::DType::Int8; },
                   {"model input 0", "'X'", "int8", "float32 or int64"});
  }
  SUBCASE("Gather indices that are not int64") {
    check_rejected(
        [](TileGraph& g) {
          // Add(R, Y) becomes Gather(R, Y): Y is float32, indices must be int64.
          g.ops[2].type = OpType::Gather;
        },
        {"op 2", "Gather", "input 1 is float32 but must be int64"});
  }
  SUBCASE("wrong depth") {
    check_rejected([](TileGraph& g) { g.nodes[8].depth = 1; }, {"node 8", "depth 1", "2"});
  }
  SUBCASE("region outside its tensor") {
    check_rejected([](TileGraph& g) { g.nodes[2].region.end[2] = 6; },
                   {"node 2", "outside", "'Y'", "[1,4,5,6]"});
  }
  SUBCASE("region of the wrong rank") {
    check_rejected(
        [](TileGraph& g) {
          g.nodes[1].region = Region{{0, 2}, {4, 4}};
        },
        {"node 1", "rank"});
  }
  SUBCASE("tiles that do not cover the output") {
    check_rejected([](TileGraph& g) { g.nodes[4].region.end[2] = 3; },
                   {"op 1", "relu1", "covering 96 elements of its 120-element output"});
  }
  SUBCASE("overlapping tiles") {
    check_rejected(
        [](TileGraph& g) {
          g.nodes[6].region.end[2] = 3;  // rows [0,3): 72 elements
          g.nodes[7].region.end[3] = 3;  // rows [2,4) x cols [0,3): 24 elements
        },
        {"op 2", "overlapping tiles", "node 6", "node 7"});
  }
  SUBCASE("arena overflow") {
    check_rejected([](TileGraph& g) { g.arena_bytes = 1700; },
                   {"'Z'", "1280", "overflows the arena of 1700 bytes"});
  }
  SUBCASE("misaligned arena offset") {
    check_rejected([](TileGraph& g) { g.tensors[4].arena_offset = 770; },
                   {"'R'", "770", "aligned to 64"});
  }
  SUBCASE("unknown op type") {
    check_rejected([](TileGraph& g) { g.ops[1].type = static_cast<OpType>(999); },
                   {"op 1", "unknown op type 999"});
  }
  SUBCASE("wrong output shape") {
    check_rejected(
        [](TileGraph& g) {
          g.tensors[3].shape = {1, 4, 5, 5};
        },
        {"op 0", "conv1", "computes shape [1,4,5,6]", "[1,4,5,5]"});
  }
  SUBCASE("shape function rejects the op") {
    check_rejected([](TileGraph& g) { g.ops[0].attrs.group = 3; }, {"op 0: ", "conv1"});
  }
  SUBCASE("op input out of range") {
    check_rejected([](TileGraph& g) { g.ops[2].inputs[1] = 6; },
                   {"op 2", "input 1 is tensor 6 but the graph has 6 tensors"});
  }
  SUBCASE("too many inputs for the op type") {
    check_rejected(
        [](TileGraph& g) {
          g.ops[1].inputs = {3, 3};
        },
        {"op 1", "2 inputs", "Relu takes 1"});
  }
  SUBCASE("empty kernel name") {
    check_rejected([](TileGraph& g) { g.ops[2].kernel.clear(); }, {"op 2", "no kernel name"});
  }
  SUBCASE("op reads a tensor nothing wrote yet") {
    check_rejected([](TileGraph& g) { std::swap(g.ops[1], g.ops[2]); },
                   {"op 1", "add1", "no earlier op writes"});
  }
  SUBCASE("op writes a weight") {
    check_rejected([](TileGraph& g) { g.ops[2].outputs = {1}; }, {"op 2", "writes weight", "'W'"});
  }
  SUBCASE("model input is a weight") {
    check_rejected([](TileGraph& g) { g.inputs = {2}; }, {"model input 0", "weight", "'B'"});
  }
  SUBCASE("model output out of range") {
    check_rejected([](TileGraph& g) { g.outputs = {-1}; }, {"model output 0", "tensor -1"});
  }
  SUBCASE("model output that no op writes") {
    check_rejected(
        [](TileGraph& g) {
          CompiledTensor unwritten;
          unwritten.name = "T";
          unwritten.shape = {2};
          g.tensors.push_back(unwritten);
          g.outputs = {5, 0, 6};  // an op output, a model input, then T
        },
        {"model output 2", "'T'", "no op writes"});
  }
  SUBCASE("weight data of the wrong size") {
    static const std::vector<float> short_bias(3, 0.5f);
    check_rejected([](TileGraph& g) { g.tensors[2].weight = short_bias; },
                   {"'B'", "12 bytes of weight data", "needs 16"});
  }
  SUBCASE("unknown dtype") {
    check_rejected([](TileGraph& g) { g.tensors[5].dtype = static_cast<graph::DType>(42); },
                   {"'Z'", "unknown dtype 42"});
  }
  SUBCASE("negative dimension") {
    check_rejected([](TileGraph& g) { g.tensors[0].shape[1] = -2; },
                   {"'X'", "negative dimension -2"});
  }
  SUBCASE("too many elements") {
    check_rejected(
        [](TileGraph& g) {
          g.tensors[0].shape = {1 << 20, 1 << 20, 2};
        },
        {"'X'", "more than 2^40 elements"});
  }
  SUBCASE("too many elements before a zero dimension") {
    check_rejected(
        [](TileGraph& g) {
          g.tensors[0].shape = {int64_t{1} << 32, int64_t{1} << 32, 0};
        },
        {"'X'", "more than 2^40 elements"});
  }
  SUBCASE("node of a missing op") {
    check_rejected([](TileGraph& g) { g.nodes[8].op = 3; }, {"node 8", "op 3", "3 ops"});
  }
}

TEST_CASE("files written by a newer or unknown Tessera are refused") {
  auto message_for = [](const std::function<void(flatbuffers::FlatBufferBuilder&)>& build) {
    flatbuffers::FlatBufferBuilder fbb;
    build(fbb);
    return read_error(
        std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
  };
  std::string newer = message_for([](flatbuffers::FlatBufferBuilder& fbb) {
    tessera::tess::SchemaVersion v(2, 0);
    tessera::tess::FinishModelBuffer(fbb, tessera::tess::CreateModel(fbb, &v));
  });
  CHECK(newer ==
        "model.tess: schema version 2.0 is newer than this Tessera (1.x); "
        "update Tessera or recompile the model");
  std::string no_version = message_for([](flatbuffers::FlatBufferBuilder& fbb) {
    tessera::tess::FinishModelBuffer(fbb, tessera::tess::CreateModel(fbb));
  });
  CHECK(no_version.find("no schema version") != std::string::npos);
  // A newer minor version of the same major is readable.
  std::string newer_minor = message_for([](flatbuffers::FlatBufferBuilder& fbb) {
    tessera::tess::SchemaVersion v(1, 7);
    tessera::tess::FinishModelBuffer(fbb, tessera::tess::CreateModel(fbb, &v));
  });
  CHECK(newer_minor == "");
  // An op of a later version than this Tessera implements, and one whose
  // version is not that of its attributes (version 2 is a FusedAttention
  // that zeroes NaN probabilities).
  auto relu_of_version = [&](uint32_t version) {
    return message_for([version](flatbuffers::FlatBufferBuilder& fbb) {
      tessera::tess::SchemaVersion v(1, 0);
      auto op = tessera::tess::CreateOperator(fbb, static_cast<uint16_t>(OpType::Relu),
                                              fbb.CreateString("r"), fbb.CreateString("reference"),
                                              0, 0, version);
      std::vector<flatbuffers::Offset<tessera::tess::Operator>> ops{op};
      tessera::tess::FinishModelBuffer(
          fbb, tessera::tess::CreateModel(fbb, &v, 0, 0, 0, fbb.CreateVector(ops)));
    });
  };
  CHECK(relu_of_version(3).find("op version 3; this Tessera handles versions 1 to 2") !=
        std::string::npos);
  CHECK(relu_of_version(2).find("op version 2 but its attributes are those of version 1") !=
        std::string::npos);
  // Many tables sharing one long string: copying it for each would take far
  // more memory than the file holds, which no Tessera writer produces.
  std::string shared = message_for([](flatbuffers::FlatBufferBuilder& fbb) {
    tessera::tess::SchemaVersion v(1, 0);
    // Shape [0]: an empty arena tensor, valid on its own.
    auto tensor = tessera::tess::CreateTensor(fbb, fbb.CreateString(std::string(10000, 'n')),
                                              fbb.CreateVector(std::vector<int64_t>{0}));
    std::vector<flatbuffers::Offset<tessera::tess::Tensor>> tensors(1000, tensor);
    tessera::tess::FinishModelBuffer(
        fbb, tessera::tess::CreateModel(fbb, &v, 0, fbb.CreateVector(tensors)));
  });
  CAPTURE(shared);
  CHECK(shared.find("share more data") != std::string::npos);
}

TEST_CASE("bad identifier, missing, empty and random files") {
  TestModel m = make_test_model(5);
  std::vector<uint8_t> bytes = serialize_tess(m.graph);
  std::memcpy(bytes.data() + 4, "ONNX", 4);
  CHECK(read_error(bytes) == "model.tess: not a Tessera graph file (bad identifier)");

  std::string missing = temp_dir().file("does_not_exist.tess");
  CHECK(file_error(missing) == missing + ": cannot open the file (No such file or directory)");

  std::string empty = temp_dir().file("empty.tess");
  write_bytes(empty, {});
  CHECK(file_error(empty) == empty + ": file is empty");

  CHECK(file_error(temp_dir().path.string()).find("not a regular file") != std::string::npos);

  uint64_t seed = test_seed();
  MESSAGE("seed ", seed, " (TESSERA_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  std::string noise = temp_dir().file("noise.tess");
  for (size_t size : {size_t{3}, size_t{8}, size_t{64}, size_t{4099}, size_t{65536}}) {
    std::vector<uint8_t> random(size);
    for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
    CAPTURE(size);
    write_bytes(noise, random);
    CHECK(file_error(noise).rfind(noise + ": not a Tessera graph file", 0) == 0);
    // With the right identifier, the verifier has to catch it.
    if (size >= 8) {
      std::memcpy(random.data() + 4, "TESS", 4);
      write_bytes(noise, random);
      CHECK(file_error(noise).rfind(noise + ": ", 0) == 0);
    }
  }
}

TEST_CASE("write_tess_file reports I/O failures and replaces files whole") {
  TestModel m = make_test_model(6);
  std::string bad = temp_dir().file("no_such_dir/model.tess");
  std::string expected = bad + ": cannot write the file";
  CHECK_THROWS_WITH_AS(write_tess_file(m.graph, bad), doctest::Contains(expected.c_str()), Error);

  std::string path = temp_dir().file("replaced.tess");
  write_bytes(path, std::vector<uint8_t>(100000, 0xab));
  write_tess_file(m.graph, path);
  CHECK(std::filesystem::file_size(path) == serialize_tess(m.graph).size());
  check_same_graph(m.graph, read_tess_file(path));
  // No temporary file is left beside it.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(temp_dir().path))
    entries += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(entries == 0);
}
