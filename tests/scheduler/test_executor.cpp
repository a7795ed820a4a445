// Executor + DSE (ASPEN Algorithm 1) on thousands of random DAGs: every node
// runs exactly once and after all its parents, the parents' plain (non-atomic)
// writes are visible to the child, and on_complete runs exactly once after the
// last node. Also: concurrent submitters, draining destructor, idle CPU use.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "graph/error.hpp"
#include "scheduler/dse.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/ready_pool.hpp"
#include "test_support.hpp"

namespace {

using tessera::scheduler::Executor;
using tessera::scheduler::ExecutorOptions;
using tessera::scheduler::GraphView;
using tessera::scheduler::Request;

using tessera::test::scaled;
using tessera::test::seed_for;

std::vector<int32_t> allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  std::vector<int32_t> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  }
  return cpus;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  std::getline(file, text);
  return text;
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A DAG in the scheduler's CSR form plus parent lists for checking. Nodes are
// numbered topologically (the GraphView contract).
struct TestGraph {
  std::string description;
  int32_t node_count = 0;
  std::vector<int32_t> parent_counts, child_offsets, children, depths, sources;
  std::vector<int32_t> parent_offsets, parents;
  std::vector<uint64_t> expected_values;   // sequential evaluation of the dataflow
  std::vector<int32_t> main_parents;       // empty: no data affinity
  std::vector<uint8_t> walk_into;          // empty: walk into every node
  std::vector<uint8_t> shared_when_ready;  // empty: cache readied nodes while none is idle

  GraphView view() const {
    return GraphView{node_count,
                     parent_counts.data(),
                     child_offsets.data(),
                     children.data(),
                     depths.data(),
                     sources.data(),
                     static_cast<int32_t>(sources.size()),
                     main_parents.empty() ? nullptr : main_parents.data(),
                     walk_into.empty() ? nullptr : walk_into.data(),
                     shared_when_ready.empty() ? nullptr : shared_when_ready.data()};
  }
};

uint64_t node_value(int32_t node, uint64_t parents_sum) {
  return mix(static_cast<uint64_t>(node) * 0x100000001b3ull ^ mix(parents_sum));
}

TestGraph build_graph(std::string description, int32_t node_count,
                      std::vector<std::pair<int32_t, int32_t>> edges) {
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  TestGraph graph;
  graph.description = std::move(description);
  graph.node_count = node_count;
  const auto n = static_cast<size_t>(node_count);
  graph.parent_counts.assign(n, 0);
  graph.child_offsets.assign(n + 1, 0);
  graph.parent_offsets.assign(n + 1, 0);
  for (const auto& [parent, child] : edges) {
    REQUIRE(parent < child);  // topological numbering
    ++graph.parent_counts[static_cast<size_t>(child)];
    ++graph.child_offsets[static_cast<size_t>(parent) + 1];
    ++graph.parent_offsets[static_cast<size_t>(child) + 1];
  }
  for (size_t i = 0; i < n; ++i) {
    graph.child_offsets[i + 1] += graph.child_offsets[i];
    graph.parent_offsets[i + 1] += graph.parent_offsets[i];
  }
  graph.children.resize(edges.size());
  graph.parents.resize(edges.size());
  std::vector<int32_t> child_fill(graph.child_offsets.begin(), graph.child_offsets.end() - 1);
  std::vector<int32_t> parent_fill(graph.parent_offsets.begin(), graph.parent_offsets.end() - 1);
  for (const auto& [parent, child] : edges) {
    graph.children[static_cast<size_t>(child_fill[static_cast<size_t>(parent)]++)] = child;
    graph.parents[static_cast<size_t>(parent_fill[static_cast<size_t>(child)]++)] = parent;
  }
  graph.depths.assign(n, 0);
  graph.expected_values.assign(n, 0);
  for (int32_t node = 0; node < node_count; ++node) {
    const auto i = static_cast<size_t>(node);
    if (graph.parent_counts[i] == 0) graph.sources.push_back(node);
    uint64_t sum = 0;
    for (int32_t e = graph.parent_offsets[i]; e < graph.parent_offsets[i + 1]; ++e) {
      const auto p = static_cast<size_t>(graph.parents[static_cast<size_t>(e)]);
      graph.depths[i] = std::max(graph.depths[i], graph.depths[p] + 1);
      sum += graph.expected_values[p];
    }
    graph.expected_values[i] = node_value(node, sum);
  }
  return graph;
}

int32_t log_uniform(std::mt19937_64& rng, int32_t low, int32_t high) {
  const double value = std::exp(std::uniform_real_distribution<double>(
      std::log(static_cast<double>(low)), std::log(static_cast<double>(high) + 1.0))(rng));
  return std::clamp(static_cast<int32_t>(value), low, high);
}

TestGraph random_graph_structure(std::mt19937_64& rng) {
  using Edges = std::vector<std::pair<int32_t, int32_t>>;
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  Edges edges;
  switch (kind) {
    case 0:
    case 1: {  // random DAG: random fan-in from a window of earlier nodes
      const int32_t n = log_uniform(rng, 1, 1500);
      const int32_t max_fan_in = std::uniform_int_distribution<int32_t>(1, 8)(rng);
      const int32_t window = std::uniform_int_distribution<int32_t>(0, 2)(rng) == 0 ? n : 24;
      for (int32_t child = 1; child < n; ++child) {
        const int32_t fan_in = std::uniform_int_distribution<int32_t>(0, max_fan_in)(rng);
        const int32_t lowest = std::max(0, child - window);
        for (int32_t k = 0; k < fan_in; ++k) {
          edges.emplace_back(std::uniform_int_distribution<int32_t>(lowest, child - 1)(rng), child);
        }
      }
      return build_graph("random n=" + std::to_string(n), n, std::move(edges));
    }
    case 2:
    case 3: {  // layered (like tiles of consecutive operators), with skip edges
      const int32_t layers = log_uniform(rng, 1, 80);
      const int32_t width = log_uniform(rng, 1, 48);
      const int32_t max_fan_in = std::uniform_int_distribution<int32_t>(1, 5)(rng);
      const auto id = [width](int32_t layer, int32_t i) { return layer * width + i; };
      for (int32_t layer = 1; layer < layers; ++layer) {
        for (int32_t i = 0; i < width; ++i) {
          const int32_t fan_in = std::uniform_int_distribution<int32_t>(1, max_fan_in)(rng);
          for (int32_t k = 0; k < fan_in; ++k) {
            edges.emplace_back(
                id(layer - 1, std::uniform_int_distribution<int32_t>(0, width - 1)(rng)),
                id(layer, i));
          }
          if (layer >= 2 && std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
            edges.emplace_back(id(layer - 2, i), id(layer, i));
          }
        }
      }
      return build_graph("layered " + std::to_string(layers) + "x" + std::to_string(width),
                         layers * width, std::move(edges));
    }
    case 4: {  // long chain
      const int32_t n = log_uniform(rng, 1, 5000);
      for (int32_t i = 1; i < n; ++i) edges.emplace_back(i - 1, i);
      return build_graph("chain n=" + std::to_string(n), n, std::move(edges));
    }
    case 5: {  // wide fan-out then fan-in: 1 -> width -> 1
      const int32_t width = log_uniform(rng, 1, 4000);
      for (int32_t i = 1; i <= width; ++i) {
        edges.emplace_back(0, i);
        edges.emplace_back(i, width + 1);
      }
      return build_graph("fan width=" + std::to_string(width), width + 2, std::move(edges));
    }
    case 6: {  // many sources, no edges
      const int32_t n = log_uniform(rng, 1, 1000);
      return build_graph("independent n=" + std::to_string(n), n, {});
    }
    case 7: {  // wavefront grid: (r, c) after (r-1, c) and (r, c-1)
      const int32_t rows = log_uniform(rng, 1, 40);
      const int32_t cols = log_uniform(rng, 1, 40);
      for (int32_t r = 0; r < rows; ++r) {
        for (int32_t c = 0; c < cols; ++c) {
          if (r > 0) edges.emplace_back((r - 1) * cols + c, r * cols + c);
          if (c > 0) edges.emplace_back(r * cols + c - 1, r * cols + c);
        }
      }
      return build_graph("grid " + std::to_string(rows) + "x" + std::to_string(cols), rows * cols,
                         std::move(edges));
    }
    case 8:
      return build_graph("single node", 1, {});
    default:
      return build_graph("empty", 0, {});
  }
}

// Half the random graphs name a main parent per node (GraphView::main_parents),
// mark random nodes not to walk into (GraphView::walk_into) and a quarter of
// them to share at once (GraphView::shared_when_ready), so the stress tests
// also run the DSE's routing of children to the row of the worker that ran
// their main parent, its queueing instead of walking, and its sharing.
TestGraph random_graph(std::mt19937_64& rng) {
  TestGraph graph = random_graph_structure(rng);
  if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) return graph;
  graph.description += " with main parents and walk flags";
  graph.main_parents.assign(static_cast<size_t>(graph.node_count), -1);
  graph.walk_into.resize(static_cast<size_t>(graph.node_count));
  for (uint8_t& walk : graph.walk_into)
    walk = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 1)(rng));
  graph.shared_when_ready.resize(static_cast<size_t>(graph.node_count));
  for (uint8_t& shared : graph.shared_when_ready)
    shared = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 3)(rng) == 0);
  for (int32_t node = 0; node < graph.node_count; ++node) {
    const int32_t begin = graph.parent_offsets[static_cast<size_t>(node)];
    const int32_t end = graph.parent_offsets[static_cast<size_t>(node) + 1];
    if (begin == end) continue;
    graph.main_parents[static_cast<size_t>(node)] = graph.parents[static_cast<size_t>(
        std::uniform_int_distribution<int32_t>(begin, end - 1)(rng))];
  }
  return graph;
}

// Shared by all requests of a test; outlives them, so a request can report its
// completion here and be destroyed by the waiting thread right after.
struct Harness {
  std::atomic<int64_t> clock{0};
  std::atomic<int64_t> errors{0};
  std::mutex mutex;
  std::condition_variable completed_changed;
  int64_t completed = 0;

  void report_completed() {
    {
      std::lock_guard lock(mutex);
      ++completed;
    }
    completed_changed.notify_all();
  }

  // False on timeout (a lost or missing completion).
  bool wait_completed(int64_t target, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::unique_lock lock(mutex);
    return completed_changed.wait_for(lock, timeout, [&] { return completed >= target; });
  }
  int64_t completed_count() {
    std::lock_guard lock(mutex);
    return completed;
  }
};

class CheckingRequest : public Request {
 public:
  CheckingRequest(const TestGraph& graph, Harness& harness, bool delete_on_complete = false)
      : Request(graph.view()),
        graph_(graph),
        harness_(harness),
        delete_on_complete_(delete_on_complete),
        stamps_(static_cast<size_t>(graph.node_count)),
        values_(static_cast<size_t>(graph.node_count), 0) {}

  void execute_node(int32_t node) noexcept override {
    const auto i = static_cast<size_t>(node);
    uint64_t sum = 0;
    for (int32_t e = graph_.parent_offsets[i]; e < graph_.parent_offsets[i + 1]; ++e) {
      const auto parent = static_cast<size_t>(graph_.parents[static_cast<size_t>(e)]);
      if (stamps_[parent].load(std::memory_order_relaxed) == 0) errors_.fetch_add(1);
      sum += values_[parent];  // plain read: the scheduler must order it after the write
    }
    values_[i] = node_value(node, sum);
    const int64_t stamp = harness_.clock.fetch_add(1) + 1;
    if (stamps_[i].exchange(stamp) != 0) errors_.fetch_add(1);  // ran twice
  }

  void on_complete() noexcept override {
    completions_.fetch_add(1);
    completion_stamp_ = harness_.clock.fetch_add(1) + 1;
    int64_t local_errors = errors_.load();
    for (size_t i = 0; i < stamps_.size(); ++i) {
      const int64_t stamp = stamps_[i].load();
      if (stamp == 0 || stamp >= completion_stamp_) ++local_errors;
      if (values_[i] != graph_.expected_values[i]) ++local_errors;
    }
    verified_errors_ = local_errors;
    Harness& harness = harness_;  // `this` may be gone once report_completed() runs
    if (delete_on_complete_) {
      harness.errors.fetch_add(local_errors);
      delete this;
    }
    harness.report_completed();
  }

  // Valid once the executor is destroyed (no more calls can come).
  void check_final() const {
    CAPTURE(graph_.description);
    CHECK(completions_.load() == 1);
    CHECK(errors_.load() == 0);
    CHECK(verified_errors_ == 0);
    for (size_t i = 0; i < stamps_.size(); ++i) {
      if (stamps_[i].load() == 0) {
        FAIL_CHECK("node " << i << " never ran");
        break;
      }
    }
  }

 private:
  const TestGraph& graph_;
  Harness& harness_;
  bool delete_on_complete_;
  std::vector<std::atomic<int64_t>> stamps_;  // 0: not run yet; else global order of the run
  std::vector<uint64_t> values_;
  std::atomic<int64_t> errors_{0};
  std::atomic<int32_t> completions_{0};
  int64_t completion_stamp_ = 0;
  int64_t verified_errors_ = -1;
};

// Records the order its nodes ran in (single-threaded DSE tests).
struct OrderRequest final : Request {
  explicit OrderRequest(const TestGraph& g) : Request(g.view()) {}
  void execute_node(int32_t node) noexcept override { order.push_back(node); }
  void on_complete() noexcept override { ++completions; }
  std::vector<int32_t> order;
  int completions = 0;
};

}  // namespace

TEST_CASE("Dse follows Algorithm 1: first readied child next, the others pushed as one batch") {
  // 0 -> {1, 2, 3}, 1 -> 4, {2, 3} -> 5, 4 -> 6: on one DSE the path is
  // 0, 1 (first readied child), 4, 6 (dead end); then 2 and 3 from the pool
  // (FIFO, same depth); 3 readies 5 and runs it on its path.
  const TestGraph graph =
      build_graph("algorithm 1", 7, {{0, 1}, {0, 2}, {0, 3}, {1, 4}, {2, 5}, {3, 5}, {4, 6}});
  OrderRequest request(graph);
  tessera::scheduler::ReadyPool pool(1);
  std::vector<int32_t> pushed_batches;
  int completed_hook = 0;
  tessera::scheduler::Dse dse(
      pool, 0, {[&](int32_t count) { pushed_batches.push_back(count); }, [&] { ++completed_hook; }},
      tessera::scheduler::DseOptions{0});  // no local cache: Algorithm 1 as written
  CHECK_FALSE(dse.run_next_path());
  pool.push(0, {&request, 0});
  CHECK(dse.run_next_path());  // 0, 1, 4, 6
  CHECK(request.order == std::vector<int32_t>{0, 1, 4, 6});
  CHECK(pushed_batches == std::vector<int32_t>{2});  // children 2 and 3, one batch
  CHECK(request.completions == 0);
  CHECK(dse.run_next_path());  // 2 (5 not ready yet)
  CHECK(dse.run_next_path());  // 3, then 5 on the same path
  CHECK(request.order == std::vector<int32_t>{0, 1, 4, 6, 2, 3, 5});
  CHECK(request.completions == 1);
  CHECK(completed_hook == 1);
  CHECK_FALSE(dse.run_next_path());
  CHECK(pool.empty());
}

TEST_CASE("Dse data affinity: a child goes to the row of the worker that ran its main parent") {
  // 0 and 1 are sources, 2 a decoy source, 3 reads 0 and 1 with main parent
  // `main`. DSE 1 runs 0, DSE 0 runs 1 and so readies 3.
  for (const int32_t main : {0, 1}) {
    CAPTURE(main);
    TestGraph graph = build_graph("affinity", 4, {{0, 3}, {1, 3}});
    graph.main_parents = {-1, -1, -1, main};
    OrderRequest request(graph);
    tessera::scheduler::ReadyPool pool(2);
    int32_t pushed = 0;
    const tessera::scheduler::DseHooks hooks{[&](int32_t count) { pushed += count; }, {}};
    tessera::scheduler::Dse dse0(pool, 0, hooks, tessera::scheduler::DseOptions{0});
    tessera::scheduler::Dse dse1(pool, 1, hooks, tessera::scheduler::DseOptions{0});
    dse1.run_path({&request, 0});
    pool.push(0, {&request, 2});  // the decoy waits in row 0
    dse0.run_path({&request, 1});
    if (main == 1) {
      // Its main input is DSE 0's own: the path goes on to 3 (Algorithm 1).
      CHECK(request.order == std::vector<int32_t>{0, 1, 3});
      CHECK(pushed == 0);
    } else {
      // Node 0 ran on row 1: 3 is sent there. DSE 1 pops its own row first
      // and gets 3; had 3 gone to row 0, it would have stolen the decoy
      // (shallower) first.
      CHECK(request.order == std::vector<int32_t>{0, 1});
      CHECK(pushed == 1);
      CHECK(dse1.run_next_path());
      CHECK(request.order == std::vector<int32_t>{0, 1, 3});
    }
    CHECK(dse0.run_next_path());  // the decoy
    CHECK(request.order.back() == 2);
    CHECK(request.order.size() == 4);
    dse0.flush_completed();
    dse1.flush_completed();
    CHECK(request.completions == 1);
    CHECK(pool.empty());
  }
}

TEST_CASE("Dse walk_into: a child marked 0 is queued behind the others, not walked into") {
  // 0 -> {1, 2}: Algorithm 1 walks into 1 (the first readied child); with
  // walk_into[1] = 0 it walks into 2 and runs 1 from its local cache after
  // (going on from the cache in the same call: nothing else is waiting).
  for (const bool mark : {false, true}) {
    CAPTURE(mark);
    TestGraph graph = build_graph("walk", 3, {{0, 1}, {0, 2}});
    if (mark) graph.walk_into = {1, 0, 1};
    OrderRequest request(graph);
    tessera::scheduler::ReadyPool pool(1);
    tessera::scheduler::Dse dse(pool, 0);
    dse.run_path({&request, 0});
    CHECK(dse.cached() == 0);
    CHECK(request.order == (mark ? std::vector<int32_t>{0, 2, 1} : std::vector<int32_t>{0, 1, 2}));
    CHECK_FALSE(dse.run_next_path());
    CHECK(request.completions == 1);
  }
}

TEST_CASE("Dse shared_when_ready: a marked node it does not walk into goes to the pool at once") {
  // 0 -> {1, 2, 3}, no worker idle: the DSE walks into 1 and caches 2 and 3,
  // unless they are marked; then it pushes them to its pool row (one batch)
  // where another worker can take them while it is still on its path.
  for (const bool mark : {false, true}) {
    CAPTURE(mark);
    TestGraph graph = build_graph("fan-out", 4, {{0, 1}, {0, 2}, {0, 3}});
    if (mark) graph.shared_when_ready = {0, 0, 1, 1};
    OrderRequest request(graph);
    tessera::scheduler::ReadyPool pool(2);
    int32_t pushed = 0;
    const tessera::scheduler::DseHooks hooks{[&](int32_t count) { pushed += count; }, {}};
    std::atomic<int32_t> idle{0};
    std::atomic<bool> leave{true};  // stop after the walked path: 0, 1
    tessera::scheduler::DseOptions options;
    options.idle_workers = &idle;
    options.leave = &leave;
    tessera::scheduler::Dse owner(pool, 0, hooks, options);
    tessera::scheduler::Dse other(pool, 1, hooks, tessera::scheduler::DseOptions{});
    owner.run_path({&request, 0});
    CHECK(request.order == std::vector<int32_t>{0, 1});
    CHECK(owner.cached() == (mark ? 0 : 2));
    CHECK(pushed == (mark ? 2 : 0));
    CHECK(other.run_next_path() == mark);  // steals from row 0 only if shared
    leave.store(false);
    while (owner.run_next_path()) {
    }
    std::vector<int32_t> sorted = request.order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<int32_t>{0, 1, 2, 3});
    owner.flush_completed();
    other.flush_completed();
    CHECK(request.completions == 1);
    CHECK(pool.empty());
  }
}

TEST_CASE("Dse goes on from its cache only for the same request, with no leave or urgent work") {
  // 0 -> {1, 2} with 1 not walked into: after 0 and 2 the path may go on
  // with 1 from the cache. It must not when the worker is to leave, nor into
  // another request's cached node, nor while higher-priority work is queued.
  TestGraph fork = build_graph("fork", 3, {{0, 1}, {0, 2}});
  fork.walk_into = {1, 0, 1};
  const TestGraph single = build_graph("single", 1, {});
  tessera::scheduler::ReadyPool pool(1);
  std::atomic<bool> leave{true};
  tessera::scheduler::DseOptions options;
  options.leave = &leave;
  tessera::scheduler::Dse dse(pool, 0, {}, options);

  OrderRequest first(fork);
  dse.run_path({&first, 0});  // leave set: stops after the walked path
  CHECK(first.order == std::vector<int32_t>{0, 2});
  CHECK(dse.cached() == 1);
  leave.store(false);

  OrderRequest other(single);
  dse.run_path({&other, 0});  // the cached node is the first request's
  CHECK(other.order == std::vector<int32_t>{0});
  CHECK(dse.cached() == 1);

  struct UrgentRequest final : Request {
    explicit UrgentRequest(const TestGraph& g) : Request(g.view(), 3) {}
    void execute_node(int32_t) noexcept override {}
    void on_complete() noexcept override {}
  };
  UrgentRequest urgent(single);
  pool.push(0, {&urgent, 0});
  REQUIRE(pool.urgent_pending());
  OrderRequest third(single);
  dse.run_path({&third, 0});  // urgent work queued: back to the pool first
  CHECK(dse.cached() == 1);
  CHECK(pool.pop(0).has_value());  // the urgent entry
  CHECK(dse.run_next_path());      // the first request's node 1, from the cache
  CHECK(first.order == std::vector<int32_t>{0, 2, 1});
  CHECK(dse.cached() == 0);
  dse.flush_completed();
  CHECK(first.completions == 1);
  CHECK(other.completions == 1);
  CHECK(third.completions == 1);
}

TEST_CASE("random DAGs on 1..8 threads: every node once, after its parents") {
  const uint64_t seed = seed_for("random DAGs");
  std::mt19937_64 rng(seed);
  const int32_t dags_per_thread_count = scaled(1000);
  int64_t total_nodes = 0;
  for (int32_t threads = 1; threads <= 8; ++threads) {
    CAPTURE(threads);
    Harness harness;
    std::vector<TestGraph> graphs;
    std::vector<std::unique_ptr<CheckingRequest>> requests;
    {
      Executor executor(ExecutorOptions{threads});
      REQUIRE(executor.thread_count() == threads);
      for (int32_t d = 0; d < dags_per_thread_count; ++d) {
        graphs.push_back(random_graph(rng));
      }
      int64_t submitted = 0;
      for (size_t d = 0; d < graphs.size();) {
        // Up to three requests in flight at once, sometimes of the same graph.
        const int in_flight = std::uniform_int_distribution<int>(1, 3)(rng);
        for (int k = 0; k < in_flight && d < graphs.size(); ++k) {
          const TestGraph& graph =
              graphs[std::uniform_int_distribution<int>(0, 3)(rng) == 0 && d > 0 ? d - 1 : d++];
          requests.push_back(std::make_unique<CheckingRequest>(graph, harness));
          executor.submit(*requests.back());
          ++submitted;
          total_nodes += graph.node_count;
        }
        const bool all_done = harness.wait_completed(submitted);
        REQUIRE_MESSAGE(all_done, "requests did not complete; last graph: "
                                      << requests.back()->graph().node_count << " nodes");
      }
    }  // executor destroyed: no more callbacks can come
    CHECK(harness.completed_count() == static_cast<int64_t>(requests.size()));
    for (const auto& request : requests) request->check_final();
  }
  std::printf("random DAGs: %lld nodes run\n", static_cast<long long>(total_nodes));
}

TEST_CASE("many requests of shared and distinct graphs submitted from several threads") {
  const uint64_t seed = seed_for("concurrent submitters");
  std::mt19937_64 graph_rng(seed);
  std::vector<TestGraph> graphs;
  for (int i = 0; i < 24; ++i) graphs.push_back(random_graph(graph_rng));
  graphs.push_back(build_graph("empty", 0, {}));
  for (int32_t threads : {1, 3, 8}) {
    CAPTURE(threads);
    const int32_t submitters = 4;
    const int32_t per_submitter = scaled(300);
    Harness harness;
    std::vector<std::vector<std::unique_ptr<CheckingRequest>>> requests(submitters);
    {
      Executor executor(ExecutorOptions{threads});
      std::vector<std::thread> submitter_threads;
      for (int32_t s = 0; s < submitters; ++s) {
        submitter_threads.emplace_back([&, s] {
          std::mt19937_64 rng(seed + 7919 * static_cast<uint64_t>(s + 1));
          auto& mine = requests[static_cast<size_t>(s)];
          mine.reserve(static_cast<size_t>(per_submitter));
          for (int32_t r = 0; r < per_submitter; ++r) {
            const auto pick = std::uniform_int_distribution<size_t>(0, graphs.size() - 1)(rng);
            mine.push_back(std::make_unique<CheckingRequest>(graphs[pick], harness));
            executor.submit(*mine.back());
            if (r % 16 == 15) std::this_thread::yield();
          }
        });
      }
      for (std::thread& thread : submitter_threads) thread.join();
      REQUIRE(harness.wait_completed(int64_t{submitters} * per_submitter));
    }
    CHECK(harness.completed_count() == int64_t{submitters} * per_submitter);
    for (const auto& mine : requests) {
      for (const auto& request : mine) request->check_final();
    }
  }
}

TEST_CASE("destructor drains running requests; a request may delete itself on completion") {
  const uint64_t seed = seed_for("drain");
  std::mt19937_64 rng(seed);
  std::vector<TestGraph> graphs;
  for (int i = 0; i < 16; ++i) graphs.push_back(random_graph(rng));
  for (int32_t threads : {1, 2, 5}) {
    Harness harness;
    const int32_t count = scaled(400);
    {
      Executor executor(ExecutorOptions{threads});
      for (int32_t r = 0; r < count; ++r) {
        const auto pick = std::uniform_int_distribution<size_t>(0, graphs.size() - 1)(rng);
        executor.submit(*new CheckingRequest(graphs[pick], harness, /*delete_on_complete=*/true));
      }
    }  // no waiting: the destructor must let every request finish
    CHECK(harness.completed_count() == count);
    CHECK(harness.errors.load() == 0);
  }
}

TEST_CASE("no lost wake-ups: submits timed around the moment workers park") {
  // A worker that parks just as a request is submitted must still be woken:
  // sweep the submit time across the end of the workers' spin phase.
  const uint64_t seed = seed_for("lost wake-ups");
  std::mt19937_64 rng(seed);
  const TestGraph single = build_graph("single node", 1, {});
  const TestGraph pair = build_graph("two sources", 2, {});
  for (int32_t threads : {1, 2}) {
    CAPTURE(threads);
    Harness harness;
    std::vector<std::unique_ptr<CheckingRequest>> requests;
    const int32_t count = scaled(4000);
    requests.reserve(static_cast<size_t>(count));
    Executor executor(ExecutorOptions{threads});
    for (int32_t r = 0; r < count; ++r) {
      const auto delay =
          std::chrono::nanoseconds(std::uniform_int_distribution<int64_t>(0, 40000)(rng));
      const auto until = std::chrono::steady_clock::now() + delay;
      while (std::chrono::steady_clock::now() < until) {
      }
      requests.push_back(std::make_unique<CheckingRequest>(r % 2 ? pair : single, harness));
      executor.submit(*requests.back());
      const bool completed = harness.wait_completed(r + 1, std::chrono::seconds(10));
      REQUIRE_MESSAGE(completed, "request " << r << " was never run (lost wake-up)");
    }
  }
}

TEST_CASE("empty graph completes inside submit on the caller's thread") {
  struct EmptyRequest final : Request {
    EmptyRequest() : Request(GraphView{}) {}
    void execute_node(int32_t) noexcept override { ++executed; }
    void on_complete() noexcept override {
      ++completed;
      completer = std::this_thread::get_id();
    }
    int executed = 0;
    int completed = 0;
    std::thread::id completer;
  };
  Executor executor(ExecutorOptions{2});
  EmptyRequest request;
  executor.submit(request);
  CHECK(request.completed == 1);
  CHECK(request.executed == 0);
  CHECK(request.completer == std::this_thread::get_id());
}

TEST_CASE("wide fan-out and a long chain") {
  Harness harness;
  std::vector<std::pair<int32_t, int32_t>> fan_edges;
  const int32_t width = scaled(100000);
  for (int32_t i = 1; i <= width; ++i) {
    fan_edges.emplace_back(0, i);
    fan_edges.emplace_back(i, width + 1);
  }
  const TestGraph fan = build_graph("fan", width + 2, std::move(fan_edges));
  std::vector<std::pair<int32_t, int32_t>> chain_edges;
  const int32_t length = scaled(200000);
  for (int32_t i = 1; i < length; ++i) chain_edges.emplace_back(i - 1, i);
  const TestGraph chain = build_graph("chain", length, std::move(chain_edges));
  CheckingRequest fan_request(fan, harness);
  CheckingRequest chain_request(chain, harness);
  {
    Executor executor(ExecutorOptions{4});
    executor.submit(fan_request);
    executor.submit(chain_request);
    REQUIRE(harness.wait_completed(2));
  }
  fan_request.check_final();
  chain_request.check_final();
}

TEST_CASE("a graph with nodes but no sources is rejected before anything runs") {
  // Two nodes that are each other's parent: no sources, can never start.
  const std::vector<int32_t> parent_counts = {1, 1};
  const std::vector<int32_t> child_offsets = {0, 1, 2};
  const std::vector<int32_t> children = {1, 0};
  const std::vector<int32_t> depths = {0, 0};
  struct NeverRuns final : Request {
    using Request::Request;
    void execute_node(int32_t) noexcept override { ++calls; }
    void on_complete() noexcept override { ++calls; }
    std::atomic<int> calls{0};
  };
  NeverRuns request(GraphView{2, parent_counts.data(), child_offsets.data(), children.data(),
                              depths.data(), nullptr, 0});
  {
    Executor executor(ExecutorOptions{2});
    CHECK_THROWS_AS(executor.submit(request), tessera::Error);
  }
  CHECK(request.calls.load() == 0);
  CHECK_THROWS_AS(Executor(ExecutorOptions{-1}), tessera::Error);
}

TEST_CASE("threads = 0 means one worker per physical core this process may run on") {
  // Oracle independent of hwloc: sysfs's (package, core) ids of the allowed CPUs.
  const std::vector<int32_t> allowed = allowed_cpus();
  std::set<std::pair<std::string, std::string>> physical;
  for (const int32_t cpu : allowed) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const std::string package = read_text(base + "physical_package_id");
    const std::string core = read_text(base + "core_id");
    physical.emplace(package.empty() ? std::to_string(cpu) : package,
                     core.empty() ? std::to_string(cpu) : core);
  }
  Executor executor(ExecutorOptions{0});
  CHECK(executor.thread_count() == static_cast<int32_t>(physical.size()));
}

namespace {
std::chrono::microseconds process_cpu_time() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto to_us = [](const timeval& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
  };
  return to_us(usage.ru_utime) + to_us(usage.ru_stime);
}

std::chrono::microseconds idle_cpu_over(std::chrono::milliseconds window) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let workers park
  const auto before = process_cpu_time();
  std::this_thread::sleep_for(window);
  return process_cpu_time() - before;
}
}  // namespace

TEST_CASE("an idle executor uses no CPU (workers park, they do not poll)") {
  Harness harness;  // declared first: it must outlive the workers that report to it
  std::vector<TestGraph> graphs;
  std::vector<std::unique_ptr<CheckingRequest>> requests;
  Executor executor(ExecutorOptions{2});
  const auto fresh = idle_cpu_over(std::chrono::milliseconds(500));
  MESSAGE("idle CPU, fresh executor: " << fresh.count() << " us");
  CHECK(fresh < std::chrono::milliseconds(20));

  // After work, too: the workers went through spin and park again.
  std::mt19937_64 rng(seed_for("idle"));
  for (int i = 0; i < 20; ++i) graphs.push_back(random_graph(rng));
  for (const TestGraph& graph : graphs) {
    requests.push_back(std::make_unique<CheckingRequest>(graph, harness));
    executor.submit(*requests.back());
  }
  REQUIRE(harness.wait_completed(static_cast<int64_t>(requests.size())));
  const auto after_work = idle_cpu_over(std::chrono::milliseconds(500));
  MESSAGE("idle CPU after work: " << after_work.count() << " us");
  CHECK(after_work < std::chrono::milliseconds(20));
}

TEST_CASE("Dse local cache: extra children stay local until it is full or a worker is idle") {
  // 0 -> {1..10}: running 0 keeps 1 for its path and 9 extras; with a cache of
  // 4 the older half spills to the pool each time it is full.
  std::vector<std::pair<int32_t, int32_t>> edges;
  for (int32_t child = 1; child <= 10; ++child) edges.emplace_back(0, child);
  const TestGraph graph = build_graph("fan 10", 11, edges);
  Harness harness;
  CheckingRequest request(graph, harness);
  tessera::scheduler::ReadyPool pool(1);
  std::atomic<int32_t> idle{0};
  // Set: each call ends at its path's dead end instead of going on from the
  // cache, so the cache's contents can be checked between calls.
  std::atomic<bool> leave{true};
  std::vector<int32_t> pushed_batches;
  tessera::scheduler::Dse dse(pool, 0,
                              {[&](int32_t count) { pushed_batches.push_back(count); }, {}},
                              tessera::scheduler::DseOptions{4, &idle, nullptr, &leave});
  pool.push(0, {&request, 0});
  CHECK(dse.run_next_path());                        // 0, then 1
  CHECK(pushed_batches == std::vector<int32_t>{6});  // 2,3 + 4,5 + 6,7 spilled as one batch
  CHECK(pool.size() == 6);
  CHECK(dse.cached() == 3);    // 8, 9, 10
  idle.store(1);               // someone is idle: the next node shares everything it holds
  CHECK(dse.run_next_path());  // 8 from the cache
  CHECK(pushed_batches == std::vector<int32_t>{6, 2});
  CHECK(dse.cached() == 0);
  CHECK(pool.size() == 8);
  while (dse.run_next_path()) {
  }
  CHECK(harness.completed_count() == 1);
  CHECK(pool.empty());
  request.check_final();
}

TEST_CASE("workers added and removed while requests run: every node once, after its parents") {
  const uint64_t seed = seed_for("elastic");
  std::mt19937_64 rng(seed);
  std::vector<TestGraph> graphs;
  for (int i = 0; i < 60; ++i) graphs.push_back(random_graph(rng));
  for (const int32_t start_threads : {1, 3}) {
    CAPTURE(start_threads);
    constexpr int32_t kMaxThreads = 8;
    Harness harness;
    std::vector<std::unique_ptr<CheckingRequest>> requests;
    int64_t resizes = 0;
    {
      Executor executor(ExecutorOptions(start_threads, {}, true, kMaxThreads));
      CHECK(executor.max_thread_count() == kMaxThreads);
      std::atomic<bool> submitting{true};
      std::atomic<int64_t> bad_counts{0};
      std::thread resizer([&] {
        std::mt19937_64 resize_rng(seed + 17);
        while (submitting.load()) {
          const int32_t n = std::uniform_int_distribution<int32_t>(1, 3)(resize_rng);
          const int32_t count = std::uniform_int_distribution<int>(0, 1)(resize_rng)
                                    ? executor.add_workers(n)
                                    : executor.remove_workers(n);
          if (count < 1 || count > kMaxThreads || count != executor.thread_count()) {
            bad_counts.fetch_add(1);
          }
          ++resizes;
          std::this_thread::sleep_for(std::chrono::microseconds(
              std::uniform_int_distribution<int32_t>(0, 400)(resize_rng)));
        }
      });
      const int32_t total = scaled(1500);
      int64_t submitted = 0;
      while (submitted < total) {
        const int in_flight = std::uniform_int_distribution<int>(1, 4)(rng);
        for (int k = 0; k < in_flight && submitted < total; ++k) {
          const auto pick = std::uniform_int_distribution<size_t>(0, graphs.size() - 1)(rng);
          requests.push_back(std::make_unique<CheckingRequest>(graphs[pick], harness));
          executor.submit(*requests.back());
          ++submitted;
        }
        REQUIRE_MESSAGE(harness.wait_completed(submitted), "a request never completed");
      }
      submitting.store(false);
      resizer.join();
      CHECK(bad_counts.load() == 0);
      // Never below one, capped at max_threads.
      CHECK(executor.remove_workers(1000) == 1);
      CHECK(executor.add_workers(1000) == kMaxThreads);
    }
    MESSAGE("elastic: " << resizes << " resizes over " << requests.size() << " requests");
    CHECK(resizes > 0);
    for (const auto& request : requests) request->check_final();
  }
}

TEST_CASE("remove_workers from inside a kernel is refused (it would join itself)") {
  const TestGraph graph = build_graph("single node", 1, {});
  struct RemovingRequest final : Request {
    RemovingRequest(const TestGraph& g, Executor& e) : Request(g.view()), executor(e) {}
    void execute_node(int32_t) noexcept override {
      try {
        executor.remove_workers(1);
      } catch (const tessera::Error&) {
        threw = true;
      }
    }
    void on_complete() noexcept override {
      done.store(true);
      done.notify_all();
    }
    Executor& executor;
    bool threw = false;
    std::atomic<bool> done{false};
  };
  Executor executor(ExecutorOptions{2});
  RemovingRequest request(graph, executor);
  executor.submit(request);
  while (!request.done.load()) request.done.wait(false);
  CHECK(request.threw);
  CHECK(executor.thread_count() == 2);
}

namespace {

// Records (request id, node) in execution order; one worker makes it a total order.
struct ExecutionLog {
  std::mutex mutex;
  std::vector<std::pair<int32_t, int32_t>> order;
};

class LoggingRequest : public Request {
 public:
  LoggingRequest(const TestGraph& graph, int32_t priority, int32_t id, ExecutionLog& log,
                 Harness& harness)
      : Request(graph.view(), priority), id_(id), log_(log), harness_(harness) {}
  void execute_node(int32_t node) noexcept override {
    std::lock_guard lock(log_.mutex);
    log_.order.emplace_back(id_, node);
  }
  void on_complete() noexcept override { harness_.report_completed(); }

 private:
  int32_t id_;
  ExecutionLog& log_;
  Harness& harness_;
};

// One node that holds its worker until released, so the pool can fill up.
class BlockingRequest final : public Request {
 public:
  explicit BlockingRequest(const TestGraph& graph, Harness& harness)
      : Request(graph.view()), harness_(harness) {}
  void execute_node(int32_t) noexcept override {
    started.store(true);
    while (!released.load()) std::this_thread::yield();
  }
  void on_complete() noexcept override { harness_.report_completed(); }
  std::atomic<bool> started{false};
  std::atomic<bool> released{false};

 private:
  Harness& harness_;
};

}  // namespace

TEST_CASE("priority: with the pool saturated, higher-priority nodes run before queued lower ones") {
  const uint64_t seed = seed_for("priority");
  std::mt19937_64 rng(seed);
  const TestGraph blocker_graph = build_graph("blocker", 1, {});
  for (int round = 0; round < 20; ++round) {
    // Low: independent nodes (all queued at once); high: a random DAG.
    const int32_t low_count = std::uniform_int_distribution<int32_t>(1, 300)(rng);
    const TestGraph low = build_graph("independent", low_count, {});
    TestGraph high = random_graph(rng);
    if (high.node_count == 0) high = build_graph("single node", 1, {});
    CAPTURE(high.description);
    Harness harness;
    ExecutionLog log;
    Executor executor(ExecutorOptions{1});
    BlockingRequest blocker(blocker_graph, harness);
    executor.submit(blocker);
    while (!blocker.started.load()) std::this_thread::yield();
    // Queued while the only worker is busy: background (-1), default (0), high (2).
    LoggingRequest background(low, -1, 0, log, harness);
    LoggingRequest normal(low, 0, 1, log, harness);
    LoggingRequest urgent(high, 2, 2, log, harness);
    executor.submit(background);
    executor.submit(normal);
    executor.submit(urgent);
    blocker.released.store(true);
    REQUIRE(harness.wait_completed(4));
    std::lock_guard lock(log.mutex);
    REQUIRE(log.order.size() == static_cast<size_t>(2 * low_count + high.node_count));
    // Execution order is by priority: every urgent node, then normal, then background.
    std::vector<int32_t> ids;
    for (const auto& entry : log.order) ids.push_back(entry.first);
    CHECK(std::is_sorted(ids.begin(), ids.end(), std::greater<>()));
  }
}

TEST_CASE(
    "priority: a running low-priority path gives way to a newly queued high-priority request") {
  const int32_t length = std::max(5000, scaled(200000));
  std::vector<std::pair<int32_t, int32_t>> chain_edges;
  for (int32_t i = 1; i < length; ++i) chain_edges.emplace_back(i - 1, i);
  const TestGraph chain = build_graph("chain", length, std::move(chain_edges));
  const TestGraph burst = build_graph("independent", 50, {});
  struct ChainRequest final : Request {
    ChainRequest(const TestGraph& g, Harness& h) : Request(g.view(), 0), harness(h) {}
    void execute_node(int32_t node) noexcept override {
      progress.store(node);
      // Hold the path at node 1000 until the burst is queued, so that the
      // test does not depend on how fast the chain runs.
      if (node == 1000) {
        while (!burst_submitted.load()) std::this_thread::yield();
      }
    }
    void on_complete() noexcept override { harness.report_completed(); }
    Harness& harness;
    std::atomic<int32_t> progress{-1};
    std::atomic<bool> burst_submitted{false};
  };
  struct BurstRequest final : Request {
    BurstRequest(const TestGraph& g, const ChainRequest& c, Harness& h)
        : Request(g.view(), 3), chain(c), harness(h) {}
    void execute_node(int32_t) noexcept override {
      chain_at_first.store(std::max(chain_at_first.load(), chain.progress.load()));
    }
    void on_complete() noexcept override { harness.report_completed(); }
    const ChainRequest& chain;
    Harness& harness;
    std::atomic<int32_t> chain_at_first{-1};
  };
  Harness harness;
  ChainRequest low(chain, harness);
  BurstRequest high(burst, low, harness);
  Executor executor(ExecutorOptions{1});
  executor.submit(low);
  while (low.progress.load() < 1000) std::this_thread::yield();
  executor.submit(high);
  low.burst_submitted.store(true);
  REQUIRE(harness.wait_completed(2));
  MESSAGE("chain node when the burst ran: " << high.chain_at_first.load() << " of " << length);
  // The chain is one path on one worker: without yielding, the burst would
  // only run after the chain's last node; with it, right after node 1000.
  CHECK(high.chain_at_first.load() < 1010);
}

namespace {

std::vector<int32_t> parse_cpu_list(const std::string& text) {  // "0-3,8,10-11"
  std::vector<int32_t> cpus;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (part.empty()) continue;
    const size_t dash = part.find('-');
    const int32_t first = std::stoi(part.substr(0, dash));
    const int32_t last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int32_t cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

// The CPUs of `cpu`'s physical core (sysfs), or {cpu} when sysfs cannot tell.
std::vector<int32_t> core_siblings(int32_t cpu) {
  const std::string text = read_text("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                                     "/topology/thread_siblings_list");
  std::vector<int32_t> cpus = text.empty() ? std::vector<int32_t>{cpu} : parse_cpu_list(text);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::vector<int32_t> intersect(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Records each executing thread's affinity mask.
class AffinityRequest final : public Request {
 public:
  AffinityRequest(const TestGraph& graph, Harness& harness)
      : Request(graph.view()), harness_(harness) {}
  void execute_node(int32_t) noexcept override {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    std::vector<int32_t> cpus;
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
      }
    }
    // Slow enough that every worker gets some nodes.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (std::chrono::steady_clock::now() < until) {
    }
    std::lock_guard lock(mutex);
    masks[std::this_thread::get_id()] = std::move(cpus);
  }
  void on_complete() noexcept override { harness_.report_completed(); }
  std::mutex mutex;
  std::map<std::thread::id, std::vector<int32_t>> masks;

 private:
  Harness& harness_;
};

}  // namespace

TEST_CASE("pinning: each worker is confined to one physical core of the configured set") {
  const std::vector<int32_t> allowed = allowed_cpus();
  const TestGraph graph = build_graph("independent", 400, {});
  // The configured set: every allowed CPU, and (when there are two or more)
  // only the last ones, to see that the set is honoured.
  std::vector<std::vector<int32_t>> sets = {allowed};
  if (allowed.size() >= 2) sets.push_back({allowed.end() - 2, allowed.end()});
  if (allowed.size() >= 3) sets.push_back({allowed.back()});
  for (const auto& cores : sets) {
    CAPTURE(cores.size());
    for (const bool pin : {true, false}) {
      CAPTURE(pin);
      Harness harness;
      AffinityRequest request(graph, harness);
      {
        Executor executor(ExecutorOptions(0, cores, pin));
        executor.submit(request);
        REQUIRE(harness.wait_completed(1));
      }
      std::set<std::vector<int32_t>> distinct;
      for (const auto& [thread, mask] : request.masks) {
        distinct.insert(mask);
        if (mask.empty()) {
          MESSAGE("sched_getaffinity failed on a worker; skipping");
          continue;
        }
        if (pin) {
          if (mask.size() > core_siblings(mask.front()).size() && mask == allowed) {
            MESSAGE("the OS refused to pin workers here; skipping the pin check");
            continue;
          }
          // Exactly one physical core, restricted to the configured set.
          CHECK(mask == intersect(core_siblings(mask.front()), cores));
        } else if (cores != allowed) {
          CHECK(mask == cores);  // confined to the set, not pinned
        }
      }
      // Pinned workers of one-per-core executors sit on distinct cores.
      if (pin) CHECK(distinct.size() == request.masks.size());
    }
  }
  // A CPU the process may not run on is an error, not a silent fallback.
  CHECK_THROWS_AS(Executor(ExecutorOptions(1, {CPU_SETSIZE + 5})), tessera::Error);
}
