// The public API end to end on models built in C++ (no ONNX): loading,
// input checking, sync and async runs, co-execution, engine lifetime.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "graph/compiler.hpp"
#include "graph/graph.hpp"
#include "serialization/tess/tess_writer.hpp"
#include "tessera/tessera.hpp"
#include "test_models.hpp"

namespace {

namespace g = tessera::graph;
using tessera::test::add_tensor;
using tessera::test::random_values;
using tessera::test::temp_dir;

// x [1,C,H,W] -> conv 3x3 pad 1 (C->C) -> relu -> add x -> out; a residual
// block whose result we can also compute naively here.
struct ResidualModel {
  int64_t c = 4, h = 9, w = 7;
  std::vector<float> weight, bias;
  std::string path;

  ResidualModel(const std::filesystem::path& dir, int tiles, uint32_t seed) {
    weight = random_values(static_cast<size_t>(c * c * 9), seed);
    bias = random_values(static_cast<size_t>(c), seed + 1);
    g::Graph graph;
    graph.opset = 13;
    const int32_t x = add_tensor(graph, "x", {1, c, h, w});
    const int32_t wt = add_tensor(graph, "w", {c, c, 3, 3}, weight);
    const int32_t bt = add_tensor(graph, "b", {c}, bias);
    const int32_t conv_out = add_tensor(graph, "conv_out", {1, c, h, w});
    const int32_t relu_out = add_tensor(graph, "relu_out", {1, c, h, w});
    const int32_t y = add_tensor(graph, "y", {1, c, h, w});
    g::Operator conv;
    conv.name = "conv";
    conv.type = g::OpType::Conv;
    conv.attrs.kernel_shape = {3, 3};
    conv.attrs.strides = {1, 1};
    conv.attrs.dilations = {1, 1};
    conv.attrs.pads = {1, 1, 1, 1};
    conv.inputs = {x, wt, bt};
    conv.outputs = {conv_out};
    g::Operator relu;
    relu.name = "relu";
    relu.type = g::OpType::Relu;
    relu.inputs = {conv_out};
    relu.outputs = {relu_out};
    g::Operator add;
    add.name = "add";
    add.type = g::OpType::Add;
    add.inputs = {relu_out, x};
    add.outputs = {y};
    graph.ops = {conv, relu, add};
    graph.inputs = {x};
    graph.outputs = {y};
    g::CompileOptions options;
    options.tiles = tiles;
    options.threads = 2;
    g::CompileReport report;
    const g::TileGraph tiles_graph = g::compile_graph(std::move(graph), options, &report);
    path = (dir / ("residual_" + std::to_string(tiles) + "_" + std::to_string(seed) + ".tess"))
               .string();
    tessera::serialization::write_tess_file(tiles_graph, path);
  }

  std::vector<float> expected(const std::vector<float>& in) const {
    std::vector<float> out(in.size());
    for (int64_t oc = 0; oc < c; ++oc)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          float acc = 0;
          for (int64_t ic = 0; ic < c; ++ic)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y + ky - 1, ix = x + kx - 1;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                acc += in[static_cast<size_t>((ic * h + iy) * w + ix)] *
                       weight[static_cast<size_t>(((oc * c + ic) * 3 + ky) * 3 + kx)];
              }
          acc += bias[static_cast<size_t>(oc)];
          const size_t i = static_cast<size_t>((oc * h + y) * w + x);
          out[i] = std::max(acc, 0.0f) + in[i];
        }
    return out;
  }
};

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-4f * (1 + std::fabs(want[i])));
}

}  // namespace

TEST_CASE("a model runs and matches a naive computation, for every thread and tile count") {
  const auto dir = temp_dir("tessera_runtime_test_");
  for (int tiles : {1, 2, 5}) {
    ResidualModel m(dir, tiles, 11);
    const auto input = random_values(static_cast<size_t>(m.c * m.h * m.w), 3);
    const auto want = m.expected(input);
    std::vector<float> first;
    for (int threads : {1, 2, 4}) {
      tessera::Engine engine({.threads = threads});
      auto model = engine.load(m.path);
      REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error()));
      CHECK(model->inputs().at(0).name == "x");
      CHECK(model->outputs().at(0).name == "y");
      auto session = model->session();
      auto out = session.run({{"x", {input.data(), {1, m.c, m.h, m.w}}}});
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error()));
      const tessera::Tensor* y = out->find("y");
      REQUIRE(y != nullptr);
      CHECK(y->shape == std::vector<int64_t>{1, m.c, m.h, m.w});
      check_close(y->data, want);
      if (first.empty()) first = y->data;
      CHECK(y->data == first);  // bitwise identical across thread counts
    }
  }
}

TEST_CASE("reuse_outputs: a run writes its outputs into an earlier run's storage") {
  const auto dir = temp_dir("tessera_runtime_test_");
  ResidualModel m(dir, 2, 12);
  const auto input_a = random_values(static_cast<size_t>(m.c * m.h * m.w), 5);
  const auto input_b = random_values(static_cast<size_t>(m.c * m.h * m.w), 6);
  const std::vector<int64_t> shape{1, m.c, m.h, m.w};
  tessera::Engine engine({.threads = 2});
  auto model = engine.load(m.path);
  REQUIRE(model.ok());
  auto session = model->session();

  auto first = session.run({{"x", {input_a.data(), shape}}});
  REQUIRE(first.ok());
  tessera::Outputs previous = std::move(first).value();
  const float* storage = previous.tensors.at(0).data.data();
  auto second = session.run({{"x", {input_b.data(), shape}}},
                            tessera::RunOptions{.reuse_outputs = &previous});
  REQUIRE(second.ok());
  CHECK(previous.tensors.empty());  // taken over
  const tessera::Tensor* y = second->find("y");
  REQUIRE(y != nullptr);
  CHECK(y->shape == shape);
  CHECK(y->data.data() == storage);  // written in place, not reallocated
  check_close(y->data, m.expected(input_b));

  // Storage too small for the output (or no tensor at that position) is
  // not used: the run allocates, and the result is the same.
  tessera::Outputs small;
  small.tensors.push_back({"y", {1}, std::vector<float>(1, 42.0f)});
  small.profile.push_back({});
  auto third =
      session.run({{"x", {input_a.data(), shape}}}, tessera::RunOptions{.reuse_outputs = &small});
  REQUIRE(third.ok());
  CHECK(small.tensors.empty());
  CHECK(small.profile.empty());
  check_close(third->find("y")->data, m.expected(input_a));
  tessera::Outputs none;
  auto fourth =
      session.run({{"x", {input_b.data(), shape}}}, tessera::RunOptions{.reuse_outputs = &none});
  REQUIRE(fourth.ok());
  check_close(fourth->find("y")->data, m.expected(input_b));
}

TEST_CASE("inputs are read in place where they can be, and are never written") {
  // x -> conv/relu/add (ResidualModel) reads x in place; the caller's data
  // must come back unchanged from every thread count, also when it is not
  // float-aligned (then copied) and when the tiles of the conv and the Add
  // read x from different cores.
  const auto dir = temp_dir("tessera_runtime_test_");
  ResidualModel m(dir, 5, 21);
  const auto input = random_values(static_cast<size_t>(m.c * m.h * m.w), 8);
  const std::vector<int64_t> shape{1, m.c, m.h, m.w};
  const auto want = m.expected(input);
  std::vector<unsigned char> shifted(input.size() * sizeof(float) + 2);
  std::memcpy(shifted.data() + 2, input.data(), input.size() * sizeof(float));
  for (int threads : {1, 2, 4}) {
    tessera::Engine engine({.threads = threads});
    auto model = engine.load(m.path);
    REQUIRE(model.ok());
    auto session = model->session();
    std::vector<float> data = input;
    for (const void* x :
         {static_cast<const void*>(data.data()), static_cast<const void*>(shifted.data() + 2)}) {
      auto out = session.run({{"x", {x, shape}}});
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error()));
      check_close(out->find("y")->data, want);
    }
    CHECK(data == input);
    CHECK(std::memcmp(shifted.data() + 2, input.data(), input.size() * sizeof(float)) == 0);
  }

  // An input read through a Reshape, which the memory plan aliases to it
  // (the Reshape then copies it into the arena); and an input that is also
  // a model output (copied out of the arena at the end, so it is copied in).
  for (const bool input_is_output : {false, true}) {
    CAPTURE(input_is_output);
    g::Graph graph;
    graph.opset = 13;
    const int32_t x = add_tensor(graph, "x", {2, 6});
    const int32_t flat = add_tensor(graph, "flat", {12});
    const int32_t relu_out = add_tensor(graph, "relu_out", {12});
    const int32_t y = add_tensor(graph, "y", {12});
    g::Operator reshape;
    reshape.name = "reshape";
    reshape.type = g::OpType::Reshape;
    reshape.attrs.new_shape = {12};
    reshape.inputs = {x};
    reshape.outputs = {flat};
    g::Operator relu;
    relu.name = "relu";
    relu.type = g::OpType::Relu;
    relu.inputs = {flat};
    relu.outputs = {relu_out};
    g::Operator add;
    add.name = "add";
    add.type = g::OpType::Add;
    add.inputs = {relu_out, flat};
    add.outputs = {y};
    graph.ops = {reshape, relu, add};
    graph.inputs = {x};
    graph.outputs = {y};
    if (input_is_output) {
      // No Reshape: nothing else would bring x into the arena.
      graph.tensors[static_cast<size_t>(relu_out)].shape = {2, 6};
      graph.tensors[static_cast<size_t>(y)].shape = {2, 6};
      relu.inputs = {x};
      add.inputs = {relu_out, x};
      graph.ops = {relu, add};
      graph.outputs.push_back(x);
    }
    g::CompileOptions options;
    options.threads = 2;
    g::CompileReport report;
    const std::string path =
        (dir / ("input_" + std::to_string(input_is_output) + ".tess")).string();
    tessera::serialization::write_tess_file(g::compile_graph(std::move(graph), options, &report),
                                            path);
    if (!input_is_output) CHECK(report.ops.at(0).note.find("alias") != std::string::npos);
    tessera::Engine engine({.threads = 2});
    auto model = engine.load(path);
    REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error()));
    const std::vector<float> values = random_values(12, 9);
    auto out = model->session().run({{"x", {values.data(), {2, 6}}}});
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error()));
    if (input_is_output) CHECK(out->find("x")->data == values);
    for (size_t i = 0; i < values.size(); ++i)
      CHECK(out->find("y")->data[i] == std::max(values[i], 0.0f) + values[i]);
  }
}

TEST_CASE("bad inputs are errors naming the input, and the session keeps serving") {
  const auto dir = temp_dir("tessera_runtime_test_");
  ResidualModel m(dir, 2, 5);
  tessera::Engine engine({.threads = 2});
  auto model = engine.load(m.path);
  REQUIRE(model.ok());
  auto session = model->session();
  const auto input = random_values(static_cast<size_t>(m.c * m.h * m.w), 9);

  auto missing = session.run({});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().find("missing input 'x'") != std::string::npos);

  auto unknown = session.run({{"z", {input.data(), {1, m.c, m.h, m.w}}}});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().find("unknown input 'z'") != std::string::npos);

  auto shape = session.run({{"x", {input.data(), {1, m.c, m.h, m.w + 1}}}});
  REQUIRE_FALSE(shape.ok());
  CHECK(shape.error().find("input 'x' has shape") != std::string::npos);

  auto twice = session.run(
      {{"x", {input.data(), {1, m.c, m.h, m.w}}}, {"x", {input.data(), {1, m.c, m.h, m.w}}}});
  REQUIRE_FALSE(twice.ok());

  auto null_data = session.run({{"x", {nullptr, {1, m.c, m.h, m.w}}}});
  REQUIRE_FALSE(null_data.ok());

  auto good = session.run({{"x", {input.data(), {1, m.c, m.h, m.w}}}});
  REQUIRE(good.ok());
  check_close(good->tensors.at(0).data, m.expected(input));
}

TEST_CASE("loading a missing or corrupt file is an error, not a crash") {
  const auto dir = temp_dir("tessera_runtime_test_");
  tessera::Engine engine({.threads = 1});
  auto missing = engine.load((dir / "does_not_exist.tess").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().find("does_not_exist.tess") != std::string::npos);
  const auto junk = dir / "junk.tess";
  { std::ofstream(junk) << "this is not a tile graph"; }
  auto bad = engine.load(junk.string());
  REQUIRE_FALSE(bad.ok());
}

TEST_CASE("concurrent async requests of two models co-execute and all complete") {
  const auto dir = temp_dir("tessera_runtime_test_");
  ResidualModel a(dir, 3, 21), b(dir, 4, 22);
  tessera::Engine engine({.threads = 2});
  auto ma = engine.load(a.path);
  auto mb = engine.load(b.path);
  REQUIRE(ma.ok());
  REQUIRE(mb.ok());
  const size_t n = static_cast<size_t>(a.c * a.h * a.w);
  constexpr int kRequests = 40;
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < kRequests; ++i) inputs.push_back(random_values(n, 100 + i));
  std::atomic<int> callbacks{0};
  std::vector<tessera::RunHandle> handles;
  auto sa = ma->session(), sb = mb->session();
  for (int i = 0; i < kRequests; ++i) {
    auto& s = i % 2 ? sb : sa;
    handles.push_back(s.run_async({{"x", {inputs[i].data(), {1, a.c, a.h, a.w}}}},
                                  [&](const tessera::Result<tessera::Outputs>& r) {
                                    if (r.ok()) callbacks.fetch_add(1);
                                  }));
  }
  for (int i = 0; i < kRequests; ++i) {
    auto r = handles[i].wait();
    REQUIRE(r.ok());
    CHECK(handles[i].ready());
    check_close(r->tensors.at(0).data, (i % 2 ? b : a).expected(inputs[i]));
  }
  // Callbacks run right after the result is published; give the last ones a moment.
  for (int spin = 0; spin < 1000 && callbacks.load() < kRequests; ++spin)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(callbacks.load() == kRequests);
}

TEST_CASE("a model outliving its engine reports an error instead of crashing") {
  const auto dir = temp_dir("tessera_runtime_test_");
  ResidualModel m(dir, 2, 31);
  std::optional<tessera::Session> session;
  {
    tessera::Engine engine({.threads = 2});
    auto model = engine.load(m.path);
    REQUIRE(model.ok());
    session = model->session();
  }
  const auto input = random_values(static_cast<size_t>(m.c * m.h * m.w), 1);
  auto r = session->run({{"x", {input.data(), {1, m.c, m.h, m.w}}}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().find("engine") != std::string::npos);
}

TEST_CASE("int64 inputs: an embedding Gather looks up the rows the ids name") {
  const auto dir = temp_dir("tessera_runtime_int64_");
  const int64_t vocab = 7, hidden = 5, tokens = 6;
  const std::vector<float> table = random_values(static_cast<size_t>(vocab * hidden), 77);
  g::Graph graph;
  graph.opset = 13;
  const int32_t ids = add_tensor(graph, "ids", {1, tokens});
  graph.tensors[static_cast<size_t>(ids)].dtype = g::DType::Int64;
  const int32_t w = add_tensor(graph, "table", {vocab, hidden}, table);
  const int32_t y = add_tensor(graph, "y", {1, tokens, hidden});
  g::Operator gather;
  gather.name = "embed";
  gather.type = g::OpType::Gather;
  gather.inputs = {w, ids};
  gather.outputs = {y};
  graph.ops = {gather};
  graph.inputs = {ids};
  graph.outputs = {y};
  g::CompileOptions options;
  options.tiles = 3;
  const std::string path = (dir / "embedding.tess").string();
  tessera::serialization::write_tess_file(g::compile_graph(std::move(graph), options, nullptr),
                                          path);

  tessera::Engine engine({.threads = 2});
  auto model = engine.load(path);
  REQUIRE(model);
  REQUIRE(model->inputs().size() == 1);
  CHECK(model->inputs()[0].dtype == "int64");
  auto session = model->session();
  const std::vector<int64_t> token_ids = {3, 0, 6, -1, 3, 1};  // -1: the last row
  auto out = session.run({{"ids", {token_ids.data(), {1, tokens}, "int64"}}});
  REQUIRE(out);
  const std::vector<float>& got = out->tensors.at(0).data;
  REQUIRE(got.size() == static_cast<size_t>(tokens * hidden));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = token_ids[static_cast<size_t>(t)] < 0 ? vocab - 1 : token_ids[t];
    for (int64_t h = 0; h < hidden; ++h)
      CHECK(got[static_cast<size_t>(t * hidden + h)] ==
            table[static_cast<size_t>(row * hidden + h)]);
  }
  // float data for an int64 input is refused, not reinterpreted.
  const std::vector<float> wrong(static_cast<size_t>(tokens), 0.0f);
  auto mismatch = session.run({{"ids", {wrong.data(), {1, tokens}}}});
  REQUIRE(!mismatch);
  CHECK(mismatch.error().find("input 'ids' is float32 but the model expects int64") !=
        std::string::npos);
  // An id past the table fails the run with a message, and the session keeps serving.
  const std::vector<int64_t> bad_ids = {0, 1, 2, 7, 0, 0};
  auto bad = session.run({{"ids", {bad_ids.data(), {1, tokens}, "int64"}}});
  REQUIRE(!bad);
  CHECK(bad.error().find("index 7 is out of range for axis 0 of size 7") != std::string::npos);
  CHECK(session.run({{"ids", {token_ids.data(), {1, tokens}, "int64"}}}));
  std::filesystem::remove_all(dir);
}
