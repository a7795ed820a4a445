// The two executors behind the same API: the barrier-free dataflow executor
// and the operator-with-barriers baseline (scheduler/barrier_executor.hpp).
// Both must compute the same bits; the baseline must keep its barriers and
// its priority order; run options and engine options fail as values.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "graph/graph.hpp"
#include "scheduler/barrier_executor.hpp"
#include "serialization/tess/tess_writer.hpp"
#include "tessera/tessera.hpp"
#include "test_models.hpp"

namespace {

namespace g = tessera::graph;
using tessera::test::add_tensor;
using tessera::test::random_values;
using tessera::test::temp_dir;
namespace s = tessera::scheduler;
using tessera::ExecutorKind;

g::Operator conv_op(std::string name, int64_t k, std::vector<int32_t> inputs, int32_t output) {
  g::Operator op;
  op.name = std::move(name);
  op.type = g::OpType::Conv;
  op.attrs.kernel_shape = {k, k};
  op.attrs.strides = {1, 1};
  op.attrs.dilations = {1, 1};
  op.attrs.pads = {k / 2, k / 2, k / 2, k / 2};
  op.inputs = std::move(inputs);
  op.outputs = {output};
  return op;
}

g::Operator simple_op(std::string name, g::OpType type, std::vector<int32_t> inputs,
                      int32_t output) {
  g::Operator op;
  op.name = std::move(name);
  op.type = type;
  op.inputs = std::move(inputs);
  op.outputs = {output};
  return op;
}

// Naive NCHW conv, stride 1, "same" padding k/2.
std::vector<float> naive_conv(const std::vector<float>& in, int64_t cin, int64_t h, int64_t w,
                              const std::vector<float>& weight, const std::vector<float>& bias,
                              int64_t cout, int64_t k) {
  std::vector<float> out(static_cast<size_t>(cout * h * w));
  const int64_t pad = k / 2;
  for (int64_t oc = 0; oc < cout; ++oc)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        float acc = bias[static_cast<size_t>(oc)];
        for (int64_t ic = 0; ic < cin; ++ic)
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx) {
              const int64_t iy = y + ky - pad, ix = x + kx - pad;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              acc += in[static_cast<size_t>((ic * h + iy) * w + ix)] *
                     weight[static_cast<size_t>(((oc * cin + ic) * k + ky) * k + kx)];
            }
        out[static_cast<size_t>((oc * h + y) * w + x)] = acc;
      }
  return out;
}

// x -> relu(conv3x3) and conv1x1 side by side -> add -> conv3x3 (c -> c2) -> y:
// two branches, so the tile graph has paths across ops that the dataflow
// executor interleaves and the barrier executor does not.
struct BranchModel {
  int64_t c, c2, h, w;
  std::vector<float> wa, ba, wb, bb, wc, bc;
  std::string path;

  BranchModel(const std::filesystem::path& dir, uint32_t seed, int tiles) {
    std::mt19937 rng(seed);
    c = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    c2 = std::uniform_int_distribution<int64_t>(1, 5)(rng);
    h = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    w = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    wa = random_values(static_cast<size_t>(c * c * 9), seed + 1);
    ba = random_values(static_cast<size_t>(c), seed + 2);
    wb = random_values(static_cast<size_t>(c * c), seed + 3);
    bb = random_values(static_cast<size_t>(c), seed + 4);
    wc = random_values(static_cast<size_t>(c2 * c * 9), seed + 5);
    bc = random_values(static_cast<size_t>(c2), seed + 6);
    g::Graph graph;
    graph.opset = 13;
    const int32_t x = add_tensor(graph, "x", {1, c, h, w});
    const int32_t ta = add_tensor(graph, "a", {1, c, h, w});
    const int32_t tar = add_tensor(graph, "a_relu", {1, c, h, w});
    const int32_t tb = add_tensor(graph, "b", {1, c, h, w});
    const int32_t tsum = add_tensor(graph, "sum", {1, c, h, w});
    const int32_t y = add_tensor(graph, "y", {1, c2, h, w});
    const int32_t wa_t = add_tensor(graph, "wa", {c, c, 3, 3}, wa);
    const int32_t ba_t = add_tensor(graph, "ba", {c}, ba);
    const int32_t wb_t = add_tensor(graph, "wb", {c, c, 1, 1}, wb);
    const int32_t bb_t = add_tensor(graph, "bb", {c}, bb);
    const int32_t wc_t = add_tensor(graph, "wc", {c2, c, 3, 3}, wc);
    const int32_t bc_t = add_tensor(graph, "bc", {c2}, bc);
    graph.ops = {conv_op("conv_a", 3, {x, wa_t, ba_t}, ta),
                 simple_op("relu_a", g::OpType::Relu, {ta}, tar),
                 conv_op("conv_b", 1, {x, wb_t, bb_t}, tb),
                 simple_op("add", g::OpType::Add, {tar, tb}, tsum),
                 conv_op("conv_c", 3, {tsum, wc_t, bc_t}, y)};
    graph.inputs = {x};
    graph.outputs = {y};
    g::CompileOptions options;
    options.tiles = tiles;
    const g::TileGraph tile_graph = g::compile_graph(std::move(graph), options, nullptr);
    path =
        (dir / ("branch_" + std::to_string(seed) + "_" + std::to_string(tiles) + ".tess")).string();
    tessera::serialization::write_tess_file(tile_graph, path);
  }

  size_t input_size() const { return static_cast<size_t>(c * h * w); }
  tessera::Inputs inputs(const std::vector<float>& x) const {
    return {{"x", {x.data(), {1, c, h, w}}}};
  }

  std::vector<float> expected(const std::vector<float>& x) const {
    auto a = naive_conv(x, c, h, w, wa, ba, c, 3);
    const auto b = naive_conv(x, c, h, w, wb, bb, c, 1);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], 0.0f) + b[i];
    return naive_conv(a, c, h, w, wc, bc, c2, 3);
  }
};

void check_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-4f * (1 + std::fabs(want[i])));
}

const char* kind_name(ExecutorKind kind) {
  return kind == ExecutorKind::Barrier ? "barrier" : "dataflow";
}

// A request over a CSR graph that records, per node, that it ran once, after
// all its parents, and (for the barrier executor) after every node of every
// earlier stage.
class RecordingRequest final : public s::Request {
 public:
  RecordingRequest(const s::GraphView& graph, std::span<const int32_t> stages,
                   const std::vector<std::vector<int32_t>>& parents, int32_t priority = 0)
      : s::Request(graph, priority),
        stages_(stages),
        parents_(parents),
        runs_(static_cast<size_t>(graph.node_count)),
        stage_done_(stages.size()) {}

  void execute_node(int32_t node) noexcept override {
    for (int32_t p : parents_[static_cast<size_t>(node)])
      if (runs_[static_cast<size_t>(p)].load() != 1) errors.fetch_add(1);
    const size_t stage = stage_of(node);
    if (stage > 0 && stage_done_[stage - 1].load() != stages_[stage] - stages_[stage - 1])
      barrier_violations.fetch_add(1);
    runs_[static_cast<size_t>(node)].fetch_add(1);
    stage_done_[stage].fetch_add(1);
  }
  void on_complete() noexcept override {
    std::lock_guard lock(mutex);
    completed = true;
    done.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return completed; });
  }
  bool every_node_once() const {
    return std::all_of(runs_.begin(), runs_.end(), [](const auto& r) { return r.load() == 1; });
  }

  std::atomic<int32_t> errors{0}, barrier_violations{0};

 private:
  size_t stage_of(int32_t node) const {
    return static_cast<size_t>(std::upper_bound(stages_.begin(), stages_.end(), node) -
                               stages_.begin() - 1);
  }
  std::span<const int32_t> stages_;
  const std::vector<std::vector<int32_t>>& parents_;
  std::vector<std::atomic<int32_t>> runs_;
  std::vector<std::atomic<int32_t>> stage_done_;
  std::mutex mutex;
  std::condition_variable done;
  bool completed = false;
};

// A layered random DAG in CSR form: `stages` layers, edges only from a layer
// to later ones, like a tile graph numbered op by op.
struct LayeredDag {
  std::vector<int32_t> parent_counts, child_offsets, children, depths, sources, stages;
  std::vector<std::vector<int32_t>> parents;
  s::GraphView view;

  explicit LayeredDag(uint32_t seed) {
    std::mt19937 rng(seed);
    const int layers = std::uniform_int_distribution<int>(1, 8)(rng);
    stages.push_back(0);
    for (int l = 0; l < layers; ++l)
      stages.push_back(stages.back() + std::uniform_int_distribution<int>(0, 9)(rng));
    const int32_t count = stages.back();
    std::vector<std::vector<int32_t>> kids(static_cast<size_t>(count));
    parents.resize(static_cast<size_t>(count));
    for (size_t l = 1; l + 1 < stages.size(); ++l)
      for (int32_t n = stages[l]; n < stages[l + 1]; ++n)
        for (int32_t p = 0; p < stages[l]; ++p)
          if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
            kids[static_cast<size_t>(p)].push_back(n);
            parents[static_cast<size_t>(n)].push_back(p);
          }
    child_offsets.push_back(0);
    depths.assign(static_cast<size_t>(count), 0);
    for (int32_t n = 0; n < count; ++n) {
      parent_counts.push_back(static_cast<int32_t>(parents[static_cast<size_t>(n)].size()));
      for (int32_t p : parents[static_cast<size_t>(n)])
        depths[static_cast<size_t>(n)] =
            std::max(depths[static_cast<size_t>(n)], depths[static_cast<size_t>(p)] + 1);
      if (parents[static_cast<size_t>(n)].empty()) sources.push_back(n);
      children.insert(children.end(), kids[static_cast<size_t>(n)].begin(),
                      kids[static_cast<size_t>(n)].end());
      child_offsets.push_back(static_cast<int32_t>(children.size()));
    }
    view = s::GraphView{count,
                        parent_counts.data(),
                        child_offsets.data(),
                        children.data(),
                        depths.data(),
                        sources.data(),
                        static_cast<int32_t>(sources.size())};
  }
};

}  // namespace

TEST_CASE("barrier executor: random layered DAGs, every node once, after its whole stage") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    LayeredDag dag(seed);
    REQUIRE_FALSE(s::check_barrier_stages(dag.view, dag.stages).has_value());
    for (int32_t threads : {1, 2, 3}) {
      CAPTURE(threads);
      s::BarrierExecutor executor({.threads = threads});
      CHECK(executor.thread_count() == threads);
      RecordingRequest request(dag.view, dag.stages, dag.parents);
      executor.submit(request, dag.stages);
      request.wait();
      CHECK(request.every_node_once());
      CHECK(request.errors.load() == 0);
      CHECK(request.barrier_violations.load() == 0);
    }
  }
}

TEST_CASE("barrier stage bounds that would break a dependency are refused") {
  LayeredDag dag(7);
  std::vector<int32_t> one_stage{0, dag.view.node_count};
  if (!dag.children.empty()) {
    const auto error = s::check_barrier_stages(dag.view, one_stage);
    REQUIRE(error.has_value());
    CHECK(error->find("same or an earlier stage") != std::string::npos);
  }
  std::vector<int32_t> short_bounds{0};
  if (dag.view.node_count > 0) CHECK(s::check_barrier_stages(dag.view, short_bounds).has_value());
  std::vector<int32_t> decreasing = dag.stages;
  decreasing.insert(decreasing.begin() + 1, dag.view.node_count + 1);
  CHECK(s::check_barrier_stages(dag.view, decreasing).has_value());
}

TEST_CASE("barrier executor runs queued requests by priority, then in submission order") {
  // One node per request; the first request holds the dispatcher until the
  // others are queued, so their order is the executor's choice alone.
  std::vector<int32_t> parent_counts{0}, child_offsets{0, 0}, children, depths{0}, sources{0};
  s::GraphView view{
      1, parent_counts.data(), child_offsets.data(), children.data(), depths.data(), sources.data(),
      1};
  const std::vector<int32_t> stages{0, 1};

  struct OrderedRequest final : s::Request {
    OrderedRequest(const s::GraphView& v, int32_t priority, int32_t id, std::mutex& m,
                   std::vector<int32_t>& order, std::atomic<int32_t>& finished)
        : s::Request(v, priority), id(id), m(m), order(order), finished(finished) {}
    void execute_node(int32_t) noexcept override {
      if (gate) gate->wait(false);
      std::lock_guard lock(m);
      order.push_back(id);
    }
    void on_complete() noexcept override {
      // The test may destroy this request once the count moves: no member
      // access after fetch_add.
      std::atomic<int32_t>& count = finished;
      count.fetch_add(1);
      count.notify_all();
    }
    int32_t id;
    std::mutex& m;
    std::vector<int32_t>& order;
    std::atomic<int32_t>& finished;
    std::atomic<bool>* gate = nullptr;
  };

  std::mutex m;
  std::vector<int32_t> order;
  std::atomic<int32_t> finished{0};
  std::atomic<bool> open{false};
  s::BarrierExecutor executor({.threads = 2});
  OrderedRequest blocker(view, 0, 0, m, order, finished);
  blocker.gate = &open;
  executor.submit(blocker, stages);
  // Wait until the dispatcher has taken the blocker off the queue.
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard lock(m);
    if (order.empty()) break;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::vector<std::pair<int32_t, int32_t>> queued{{1, 0}, {2, 5}, {3, 0}, {4, -2}, {5, 5}};
  std::vector<std::unique_ptr<OrderedRequest>> requests;
  for (auto [id, priority] : queued) {
    requests.push_back(std::make_unique<OrderedRequest>(view, priority, id, m, order, finished));
    executor.submit(*requests.back(), stages);
  }
  open.store(true);
  open.notify_all();
  for (int32_t f = finished.load(); f < 6; f = finished.load()) finished.wait(f);
  CHECK(order == std::vector<int32_t>{0, 2, 5, 1, 3, 4});
}

TEST_CASE("both executors compute the same bits as each other and as a naive computation") {
  const auto dir = temp_dir("tessera_executors_test_");
  for (uint32_t seed = 100; seed < 106; ++seed) {
    for (int tiles : {1, 3, 7}) {
      BranchModel m(dir, seed, tiles);
      CAPTURE(seed);
      CAPTURE(tiles);
      INFO("c=" << m.c << " c2=" << m.c2 << " h=" << m.h << " w=" << m.w);
      const auto input = random_values(m.input_size(), seed * 7);
      const auto want = m.expected(input);
      std::vector<float> first;
      for (ExecutorKind kind : {ExecutorKind::Dataflow, ExecutorKind::Barrier}) {
        for (int32_t threads : {1, 2, 4}) {
          CAPTURE(kind_name(kind));
          CAPTURE(threads);
          tessera::Engine engine({.threads = threads, .executor = kind});
          REQUIRE(engine.status().ok());
          CHECK(engine.executor() == kind);
          CHECK(engine.threads() == threads);
          auto model = engine.load(m.path);
          REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error()));
          auto session = model->session();
          auto out = session.run(m.inputs(input));
          REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.error()));
          const tessera::Tensor* y = out->find("y");
          REQUIRE(y != nullptr);
          check_close(y->data, want);
          if (first.empty()) first = y->data;
          CHECK(y->data == first);  // bitwise, across executors and thread counts
        }
      }
    }
  }
}

TEST_CASE("many concurrent async requests of two models on the barrier executor all complete") {
  const auto dir = temp_dir("tessera_executors_test_");
  BranchModel a(dir, 201, 4), b(dir, 202, 5);
  tessera::Engine engine({.threads = 2, .executor = ExecutorKind::Barrier});
  auto ma = engine.load(a.path);
  auto mb = engine.load(b.path);
  REQUIRE(ma.ok());
  REQUIRE(mb.ok());
  constexpr int kSubmitters = 3, kPerSubmitter = 30;
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < kSubmitters * kPerSubmitter; ++i)
    inputs.push_back(random_values((i % 2 ? b : a).input_size(), 500 + i));
  std::vector<tessera::RunHandle> handles(inputs.size());
  std::atomic<int> callbacks{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < kSubmitters; ++t)
    submitters.emplace_back([&, t] {
      auto sa = ma->session(), sb = mb->session();
      for (int k = 0; k < kPerSubmitter; ++k) {
        const int i = t * kPerSubmitter + k;
        const BranchModel& m = i % 2 ? b : a;
        handles[static_cast<size_t>(i)] =
            (i % 2 ? sb : sa)
                .run_async(m.inputs(inputs[static_cast<size_t>(i)]), {.priority = k % 3},
                           [&](const tessera::Result<tessera::Outputs>& r) {
                             if (r.ok()) callbacks.fetch_add(1);
                           });
      }
    });
  for (auto& t : submitters) t.join();
  for (size_t i = 0; i < handles.size(); ++i) {
    auto r = handles[i].wait();
    REQUIRE(r.ok());
    check_close(r->tensors.at(0).data, (i % 2 ? b : a).expected(inputs[i]));
  }
  for (int spin = 0; spin < 1000 && callbacks.load() < static_cast<int>(handles.size()); ++spin)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(callbacks.load() == static_cast<int>(handles.size()));
}

TEST_CASE("run options: a priority is accepted by both executors and changes no result") {
  const auto dir = temp_dir("tessera_executors_test_");
  BranchModel m(dir, 301, 3);
  const auto input = random_values(m.input_size(), 17);
  const auto want = m.expected(input);
  for (ExecutorKind kind : {ExecutorKind::Dataflow, ExecutorKind::Barrier}) {
    CAPTURE(kind_name(kind));
    tessera::Engine engine({.threads = 2, .executor = kind});
    auto model = engine.load(m.path);
    REQUIRE(model.ok());
    auto session = model->session();
    for (int32_t priority : {-5, 0, 9}) {
      auto out = session.run(m.inputs(input), {.priority = priority});
      REQUIRE(out.ok());
      check_close(out->tensors.at(0).data, want);
    }
    auto handle = session.run_async(m.inputs(input), tessera::RunOptions{.priority = 3});
    auto later = handle.wait();
    REQUIRE(later.ok());
    check_close(later->tensors.at(0).data, want);
  }
}

// Outputs::trace of a BranchModel run that was also profiled and took
// `wall_us`: every tile once, in node order, with its CPU and times.
static void check_trace(const tessera::Outputs& out, double wall_us) {
  // One event per tile node, in node order, named after its operator.
  int32_t tiles = 0;
  for (const tessera::OpProfile& op : out.profile) tiles += op.tiles;
  REQUIRE(static_cast<int32_t>(out.trace.size()) == tiles);
  for (size_t i = 0; i < out.trace.size(); ++i) {
    const tessera::TileEvent& e = out.trace[i];
    CAPTURE(i);
    CHECK(e.node == static_cast<int32_t>(i));
    CHECK(e.cpu >= 0);
    CHECK(e.start_us >= 0);
    CHECK(e.duration_us >= 0);
    CHECK(e.start_us + e.duration_us <= wall_us);
    int32_t of_op = 0;
    for (const tessera::TileEvent& other : out.trace) of_op += other.op == e.op;
    const auto op = std::find_if(out.profile.begin(), out.profile.end(),
                                 [&](const tessera::OpProfile& p) { return p.name == e.op; });
    REQUIRE(op != out.profile.end());
    CHECK(of_op == op->tiles);
  }
  // Every conv_c tile reads some conv_a tile's output (through the Add),
  // so the first conv_a tile to end ends before any conv_c tile starts.
  double first_conv_a_end = 1e300, first_conv_c_start = 1e300;
  for (const tessera::TileEvent& e : out.trace) {
    if (e.op == "conv_a") first_conv_a_end = std::min(first_conv_a_end, e.start_us + e.duration_us);
    if (e.op == "conv_c") first_conv_c_start = std::min(first_conv_c_start, e.start_us);
  }
  CHECK(first_conv_a_end <= first_conv_c_start);
}

TEST_CASE("run options: profile and trace time every tile on both executors") {
  const auto dir = temp_dir("tessera_executors_test_");
  for (int tiles : {1, 3}) {
    BranchModel m(dir, 303 + tiles, tiles);
    const auto input = random_values(m.input_size(), 19);
    const auto want = m.expected(input);
    for (ExecutorKind kind : {ExecutorKind::Dataflow, ExecutorKind::Barrier}) {
      CAPTURE(kind_name(kind));
      CAPTURE(tiles);
      tessera::Engine engine({.threads = 2, .executor = kind});
      auto model = engine.load(m.path);
      REQUIRE(model.ok());
      auto session = model->session();
      auto plain = session.run(m.inputs(input));
      REQUIRE(plain.ok());
      CHECK(plain->profile.empty());
      CHECK(plain->trace.empty());
      const auto start = std::chrono::steady_clock::now();
      auto out = session.run(m.inputs(input), {.profile = true, .trace = true});
      const double wall_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      REQUIRE(out.ok());
      check_trace(*out, wall_us);
      check_close(out->tensors.at(0).data, want);
      // One entry per operator left after the compiler's fusions (Relu and
      // the residual Add may fold into a conv), in the model's order, each
      // with its tiles (the tiler may give a tiny op fewer than asked).
      REQUIRE(out->profile.size() >= 3);
      REQUIRE(out->profile.size() <= 5);
      std::vector<std::string> convs;
      double total = 0;
      for (const tessera::OpProfile& op : out->profile) {
        CAPTURE(op.name);
        if (op.type == "Conv") convs.push_back(op.name);
        CHECK(op.tiles >= 1);
        CHECK(op.tiles <= tiles);
        CHECK(!op.kernel.empty());
        CHECK(op.kernel_ms >= 0);
        total += op.kernel_ms;
      }
      CHECK(convs == std::vector<std::string>{"conv_a", "conv_b", "conv_c"});
      CHECK(total > 0);
    }
  }
}

TEST_CASE("engine and run errors stay values on both executors") {
  const auto dir = temp_dir("tessera_executors_test_");
  BranchModel m(dir, 401, 2);
  const auto input = random_values(m.input_size(), 3);

  SUBCASE("bad inputs on the barrier executor name the input, and the session keeps serving") {
    tessera::Engine engine({.threads = 2, .executor = ExecutorKind::Barrier});
    auto model = engine.load(m.path);
    REQUIRE(model.ok());
    auto session = model->session();
    auto missing = session.run({}, {.priority = 1});
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().find("missing input 'x'") != std::string::npos);
    auto shape = session.run({{"x", {input.data(), {1, m.c, m.h, m.w + 1}}}});
    REQUIRE_FALSE(shape.ok());
    CHECK(shape.error().find("input 'x' has shape") != std::string::npos);
    auto good = session.run(m.inputs(input));
    REQUIRE(good.ok());
    check_close(good->tensors.at(0).data, m.expected(input));
  }

  SUBCASE("a core the process may not use fails the engine, not the process") {
    tessera::Engine dataflow({.threads = 1, .cores = {100000}});
    REQUIRE_FALSE(dataflow.status().ok());
    CHECK(dataflow.status().error().find("100000") != std::string::npos);
    CHECK_FALSE(dataflow.load(m.path).ok());
    tessera::Engine engine({.threads = 1, .executor = ExecutorKind::Barrier, .cores = {100000}});
    REQUIRE_FALSE(engine.status().ok());
    CHECK(engine.status().error().find("core 100000") != std::string::npos);
    CHECK(engine.threads() == 0);
    auto model = engine.load(m.path);
    REQUIRE_FALSE(model.ok());
    CHECK(model.error().find("core 100000") != std::string::npos);
    CHECK_FALSE(engine.add_threads(1).ok());
  }

  SUBCASE("confining either executor to the first allowed core still runs") {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
    int32_t core = 0;
    while (!CPU_ISSET(core, &mask)) ++core;
    for (ExecutorKind kind : {ExecutorKind::Dataflow, ExecutorKind::Barrier}) {
      CAPTURE(kind_name(kind));
      tessera::Engine engine({.threads = 2, .executor = kind, .cores = {core}});
      REQUIRE_MESSAGE(engine.status().ok(), (engine.status().ok() ? "" : engine.status().error()));
      auto model = engine.load(m.path);
      REQUIRE(model.ok());
      auto out = model->session().run(m.inputs(input));
      REQUIRE(out.ok());
      check_close(out->tensors.at(0).data, m.expected(input));
    }
  }

  SUBCASE("adding and removing threads: dataflow only, within limits, errors as values") {
    tessera::Engine barrier({.threads = 2, .executor = ExecutorKind::Barrier});
    auto add = barrier.add_threads(1);
    REQUIRE_FALSE(add.ok());
    CHECK(add.error().find("barrier executor") != std::string::npos);
    CHECK_FALSE(barrier.remove_threads(1).ok());
    CHECK(barrier.threads() == 2);

    tessera::Engine dataflow({.threads = 2});
    CHECK_FALSE(dataflow.add_threads(-1).ok());
    CHECK_FALSE(dataflow.remove_threads(-1).ok());
    REQUIRE(dataflow.add_threads(1).ok());
    CHECK(dataflow.threads() == 3);
    auto model = dataflow.load(m.path);
    REQUIRE(model.ok());
    auto session = model->session();
    // Runs in flight while the workers change.
    std::vector<tessera::RunHandle> pending;
    for (int i = 0; i < 20; ++i) pending.push_back(session.run_async(m.inputs(input)));
    REQUIRE(dataflow.remove_threads(2).ok());
    CHECK(dataflow.threads() == 1);
    auto floor = dataflow.remove_threads(1);
    REQUIRE_FALSE(floor.ok());
    CHECK(floor.error().find("one always stays") != std::string::npos);
    CHECK(dataflow.threads() == 1);
    for (auto& h : pending) {
      auto out = h.wait();
      REQUIRE(out.ok());
      check_close(out->tensors.at(0).data, m.expected(input));
    }
  }
}

TEST_CASE("a file whose nodes are not grouped by op runs on the dataflow executor only") {
  // Renumber a compiled graph's nodes depth-first (a valid topological order
  // that interleaves ops) and write it back.
  const auto dir = temp_dir("tessera_executors_test_");
  const uint32_t seed = 601;
  g::Graph graph;
  graph.opset = 13;
  const int32_t x = add_tensor(graph, "x", {1, 2, 6, 6});
  const int32_t t1 = add_tensor(graph, "t1", {1, 2, 6, 6});
  const int32_t y = add_tensor(graph, "y", {1, 2, 6, 6});
  graph.ops = {simple_op("relu1", g::OpType::Relu, {x}, t1),
               simple_op("relu2", g::OpType::Relu, {t1}, y)};
  graph.inputs = {x};
  graph.outputs = {y};
  g::CompileOptions options;
  options.tiles = 3;
  // No ordering edges for reuse: they would tie relu2's tiles to all of
  // relu1's, and the depth-first order below would then be grouped by op.
  options.reuse_distance = 0;
  g::TileGraph tg = g::compile_graph(std::move(graph), options, nullptr);
  const auto count = static_cast<int32_t>(tg.nodes.size());
  REQUIRE(count >= 2);
  // Depth-first Kahn order: a stack, so a node's child follows it at once.
  std::vector<int32_t> remaining(static_cast<size_t>(count)), order, stack;
  for (int32_t n = 0; n < count; ++n) {
    remaining[static_cast<size_t>(n)] = tg.nodes[static_cast<size_t>(n)].parent_count;
    if (remaining[static_cast<size_t>(n)] == 0) stack.push_back(n);
  }
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (int32_t c : tg.nodes[static_cast<size_t>(n)].children)
      if (--remaining[static_cast<size_t>(c)] == 0) stack.push_back(c);
  }
  REQUIRE(order.size() == static_cast<size_t>(count));
  std::vector<int32_t> new_index(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i)
    new_index[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  std::vector<g::TileNode> permuted;
  for (int32_t old : order) {
    g::TileNode node = tg.nodes[static_cast<size_t>(old)];
    for (int32_t& c : node.children) c = new_index[static_cast<size_t>(c)];
    std::sort(node.children.begin(), node.children.end());
    permuted.push_back(std::move(node));
  }
  tg.nodes = std::move(permuted);
  bool grouped = true;
  for (int32_t n = 1; n < count; ++n)
    grouped =
        grouped && tg.nodes[static_cast<size_t>(n)].op >= tg.nodes[static_cast<size_t>(n - 1)].op;
  REQUIRE_FALSE(grouped);  // the test needs an interleaved order
  const std::string path = (dir / "interleaved.tess").string();
  tessera::serialization::write_tess_file(tg, path);

  std::vector<float> input = random_values(72, seed);
  std::vector<float> want(input);
  for (float& v : want) v = std::max(v, 0.0f);
  tessera::Engine dataflow({.threads = 2});
  auto ok_model = dataflow.load(path);
  REQUIRE_MESSAGE(ok_model.ok(), (ok_model.ok() ? "" : ok_model.error()));
  auto out = ok_model->session().run({{"x", {input.data(), {1, 2, 6, 6}}}});
  REQUIRE(out.ok());
  CHECK(out->tensors.at(0).data == want);

  tessera::Engine barrier({.threads = 2, .executor = ExecutorKind::Barrier});
  auto refused = barrier.load(path);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().find("grouped op by op") != std::string::npos);
}
