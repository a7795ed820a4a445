// Dispatch overhead of the dataflow scheduler, in ns per node, on a layered
// DAG of empty kernels (default 1,000 layers x 100 nodes; every node of layer
// l > 0 depends on 2 distinct random nodes of layer l - 1), side by side with
// oneTBB on the same DAG:
//   tessera      Executor (DSEs over the ReadyPool, local cache on)
//   tessera-c0   Executor with dse_cache_capacity = 0 (Algorithm 1 as written)
//   tbb-flow     tbb::flow::graph of continue_nodes, one per DAG node
//   tbb-barrier  one tbb::parallel_for per layer (the operator-barrier way)
// Each cell is the median of --reps runs of the whole DAG.
//
// At 2+ threads most of a node's cost is moving cache lines between cores:
// a child's executed-parents counter is counted by both its parents, so it
// crosses cores whenever they ran on different workers. On a shared VM that
// cost drifts with where the host places the vCPUs, so each row also shows
// the one-way cache-line transfer time between the first two CPUs, measured
// by ping-pong just before the row ("line ns").
//
//   bench_dispatch_overhead [--layers N] [--width N] [--reps N] [--threads 1,2]
//                           [--only tessera|tessera-c0|tbb-flow|tbb-barrier]  (for profiling)
//                           [--cache N]  (dse_cache_capacity of the "tessera" column)
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/executor.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using tessera::scheduler::Executor;
using tessera::scheduler::ExecutorOptions;
using tessera::scheduler::GraphView;
using tessera::scheduler::Request;

struct LayeredDag {
  int32_t layers = 0, width = 0;
  std::vector<int32_t> parent_counts, child_offsets, children, depths, sources;
  std::vector<std::array<int32_t, 2>> parents;  // per node (layer > 0)

  int32_t node_count() const { return layers * width; }
  GraphView view() const {
    return GraphView{node_count(),
                     parent_counts.data(),
                     child_offsets.data(),
                     children.data(),
                     depths.data(),
                     sources.data(),
                     static_cast<int32_t>(sources.size())};
  }
};

LayeredDag make_dag(int32_t layers, int32_t width, uint64_t seed) {
  LayeredDag dag;
  dag.layers = layers;
  dag.width = width;
  const int32_t n = dag.node_count();
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int32_t, int32_t>> edges;  // (parent, child)
  dag.parents.resize(static_cast<size_t>(n));
  for (int32_t layer = 1; layer < layers; ++layer) {
    for (int32_t i = 0; i < width; ++i) {
      const int32_t child = layer * width + i;
      std::uniform_int_distribution<int32_t> pick(0, width - 1);
      const int32_t a = pick(rng);
      int32_t b = pick(rng);
      while (width > 1 && b == a) b = pick(rng);
      const int32_t base = (layer - 1) * width;
      dag.parents[static_cast<size_t>(child)] = {base + a, base + b};
      edges.emplace_back(base + a, child);
      if (b != a) edges.emplace_back(base + b, child);
    }
  }
  std::sort(edges.begin(), edges.end());
  dag.parent_counts.assign(static_cast<size_t>(n), 0);
  dag.child_offsets.assign(static_cast<size_t>(n) + 1, 0);
  for (const auto& [parent, child] : edges) {
    ++dag.parent_counts[static_cast<size_t>(child)];
    ++dag.child_offsets[static_cast<size_t>(parent) + 1];
  }
  for (int32_t i = 0; i < n; ++i) dag.child_offsets[i + 1] += dag.child_offsets[i];
  for (const auto& edge : edges) dag.children.push_back(edge.second);
  dag.depths.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) dag.depths[static_cast<size_t>(i)] = i / width;
  for (int32_t i = 0; i < width; ++i) dag.sources.push_back(i);
  return dag;
}

// Empty kernel; completion wakes the timing thread.
class EmptyRequest final : public Request {
 public:
  explicit EmptyRequest(const GraphView& view) : Request(view) {}
  void execute_node(int32_t) noexcept override {}
  void on_complete() noexcept override {
    done.store(1, std::memory_order_release);
    done.notify_one();
  }
  void wait() {
    while (done.load(std::memory_order_acquire) == 0) done.wait(0, std::memory_order_acquire);
  }
  std::atomic<int32_t> done{0};
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ns per node, median over reps.
double run_tessera(const LayeredDag& dag, int32_t threads, int32_t reps, int32_t cache) {
  ExecutorOptions options(threads);
  options.dse_cache_capacity = cache;
  Executor executor(options);
  std::vector<double> ns;
  for (int32_t rep = 0; rep < reps + 1; ++rep) {
    auto request = std::make_unique<EmptyRequest>(dag.view());  // allocation not timed
    const auto start = Clock::now();
    executor.submit(*request);
    request->wait();
    const double elapsed = seconds_since(start);
    if (rep > 0) ns.push_back(elapsed * 1e9 / dag.node_count());  // rep 0 warms up
  }
  return median(ns);
}

double run_tbb_flow(const LayeredDag& dag, int32_t threads, int32_t reps) {
  namespace flow = oneapi::tbb::flow;
  oneapi::tbb::task_arena arena(threads);
  std::vector<double> ns;
  arena.execute([&] {
    flow::graph graph;
    std::vector<std::unique_ptr<flow::continue_node<flow::continue_msg>>> nodes;
    nodes.reserve(static_cast<size_t>(dag.node_count()));
    for (int32_t i = 0; i < dag.node_count(); ++i) {
      nodes.push_back(std::make_unique<flow::continue_node<flow::continue_msg>>(
          graph, [](const flow::continue_msg&) {}));
    }
    for (int32_t parent = 0; parent < dag.node_count(); ++parent) {
      for (int32_t e = dag.child_offsets[parent]; e < dag.child_offsets[parent + 1]; ++e) {
        flow::make_edge(*nodes[static_cast<size_t>(parent)],
                        *nodes[static_cast<size_t>(dag.children[static_cast<size_t>(e)])]);
      }
    }
    for (int32_t rep = 0; rep < reps + 1; ++rep) {
      const auto start = Clock::now();
      for (const int32_t source : dag.sources) {
        nodes[static_cast<size_t>(source)]->try_put(flow::continue_msg());
      }
      graph.wait_for_all();
      const double elapsed = seconds_since(start);
      if (rep > 0) ns.push_back(elapsed * 1e9 / dag.node_count());
    }
  });
  return median(ns);
}

double run_tbb_barrier(const LayeredDag& dag, int32_t threads, int32_t reps) {
  oneapi::tbb::task_arena arena(threads);
  std::vector<double> ns;
  std::atomic<int64_t> sink{0};
  arena.execute([&] {
    for (int32_t rep = 0; rep < reps + 1; ++rep) {
      const auto start = Clock::now();
      for (int32_t layer = 0; layer < dag.layers; ++layer) {
        oneapi::tbb::parallel_for(0, dag.width, [&](int32_t i) {
          // Empty kernel; the compiler must not drop the loop body entirely.
          if (i < 0) sink.fetch_add(1, std::memory_order_relaxed);
        });
      }
      const double elapsed = seconds_since(start);
      if (rep > 0) ns.push_back(elapsed * 1e9 / dag.node_count());
    }
  });
  return median(ns);
}

// One-way cache-line transfer between two CPUs (ns): two threads pinned to
// them hand a counter back and forth; median of a few rounds. NaN if the
// process may not run on two CPUs.
double line_transfer_ns() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return std::nan("");
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (cpus.size() < 2) return std::nan("");
  const auto pin = [](int cpu) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    CPU_SET(cpu, &mask);
    pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
  };
  constexpr int64_t kHandOffs = 200000;
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    alignas(64) std::atomic<int64_t> turn{0};
    double ns = 0;
    std::thread left([&] {
      pin(cpus[0]);
      const auto start = Clock::now();
      for (int64_t i = 0; i < kHandOffs; i += 2) {
        while (turn.load(std::memory_order_acquire) != i) {
        }
        turn.store(i + 1, std::memory_order_release);
      }
      while (turn.load(std::memory_order_acquire) != kHandOffs) {
      }
      ns = seconds_since(start) * 1e9 / kHandOffs;
    });
    std::thread right([&] {
      pin(cpus[1]);
      for (int64_t i = 1; i < kHandOffs; i += 2) {
        while (turn.load(std::memory_order_acquire) != i) {
        }
        turn.store(i + 1, std::memory_order_release);
      }
    });
    left.join();
    right.join();
    rounds.push_back(ns);
  }
  return median(rounds);
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::vector<int32_t> parse_list(const char* text) {
  std::vector<int32_t> values;
  for (const char* p = text; *p;) {
    values.push_back(static_cast<int32_t>(std::strtol(p, const_cast<char**>(&p), 10)));
    if (*p == ',') ++p;
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  int32_t layers = 1000, width = 100, reps = 11;
  std::vector<int32_t> thread_counts = {1, 2};
  std::string only;
  int32_t cache = 32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers")
      layers = std::atoi(argv[i + 1]);
    else if (flag == "--width")
      width = std::atoi(argv[i + 1]);
    else if (flag == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (flag == "--threads")
      thread_counts = parse_list(argv[i + 1]);
    else if (flag == "--only")
      only = argv[i + 1];
    else if (flag == "--cache")
      cache = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const uint64_t seed = 20240601;
  const LayeredDag dag = make_dag(layers, width, seed);
  std::printf("dispatch overhead: %s, %u CPUs online\n", cpu_model().c_str(),
              std::thread::hardware_concurrency());
  std::printf(
      "DAG: %d layers x %d nodes = %d nodes, %zu edges (2 random parents in the previous "
      "layer, seed %llu), empty kernels; median of %d runs\n",
      layers, width, dag.node_count(), dag.children.size(), static_cast<unsigned long long>(seed),
      reps);
  std::printf("%8s %12s %12s %12s %12s %14s %14s %10s\n", "threads", "tessera", "tessera-c0",
              "tbb-flow", "tbb-barrier", "flow/tessera", "barrier/tessera", "line ns");
  for (const int32_t threads : thread_counts) {
    const auto wanted = [&](const char* name) { return only.empty() || only == name; };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double line = threads > 1 ? line_transfer_ns() : nan;
    const double tessera = wanted("tessera") ? run_tessera(dag, threads, reps, cache) : nan;
    const double tessera_c0 = wanted("tessera-c0") ? run_tessera(dag, threads, reps, 0) : nan;
    const double flow = wanted("tbb-flow") ? run_tbb_flow(dag, threads, reps) : nan;
    const double barrier = wanted("tbb-barrier") ? run_tbb_barrier(dag, threads, reps) : nan;
    std::printf("%8d %9.1f ns %9.1f ns %9.1f ns %9.1f ns %13.2fx %13.2fx %10.1f\n", threads,
                tessera, tessera_c0, flow, barrier, flow / tessera, barrier / tessera, line);
  }
  return 0;
}
