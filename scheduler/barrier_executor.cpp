#include "scheduler/barrier_executor.hpp"

#include <pthread.h>
#include <sched.h>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <queue>
#include <thread>

#include "graph/error.hpp"

namespace tessera::scheduler {

namespace {

cpu_set_t process_affinity() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    for (int cpu = 0; cpu < static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
         ++cpu)
      CPU_SET(cpu, &mask);
  }
  return mask;
}

int32_t resolve_thread_count(const BarrierExecutorOptions& options) {
  if (options.threads > 0) return options.threads;
  if (!options.cores.empty()) return static_cast<int32_t>(options.cores.size());
  const cpu_set_t mask = process_affinity();
  return std::max(1, CPU_COUNT(&mask));
}

// oneTBB serves every arena from one pool of default_concurrency() - 1
// workers. An executor asking for more threads than that (or several alive at
// once) raises the pool's limit for as long as it lives; it never lowers it.
// An application's own, smaller global_control still wins (oneTBB takes the
// smallest max_allowed_parallelism alive).
class WorkerPoolReservation {
 public:
  explicit WorkerPoolReservation(int32_t threads) : workers_(threads - 1) { adjust(workers_); }
  ~WorkerPoolReservation() { adjust(-workers_); }
  WorkerPoolReservation(const WorkerPoolReservation&) = delete;
  WorkerPoolReservation& operator=(const WorkerPoolReservation&) = delete;

 private:
  static void adjust(int64_t delta) {
    static std::mutex mutex;
    static int64_t reserved_workers = 0;
    static std::unique_ptr<oneapi::tbb::global_control> control;
    std::lock_guard lock(mutex);
    reserved_workers += delta;
    const auto wanted = static_cast<size_t>(reserved_workers + 1);
    if (wanted <= static_cast<size_t>(oneapi::tbb::info::default_concurrency())) {
      control.reset();
      return;
    }
    // Made before the old one goes, so the limit never drops in between.
    auto next = std::make_unique<oneapi::tbb::global_control>(
        oneapi::tbb::global_control::max_allowed_parallelism, wanted);
    control = std::move(next);
  }

  int64_t workers_;
};

// Confines every thread that enters the arena to the chosen CPUs, and gives
// it back the process's mask when it leaves: oneTBB's workers are shared with
// any other arena in the process.
class CorePinning final : public oneapi::tbb::task_scheduler_observer {
 public:
  CorePinning(oneapi::tbb::task_arena& arena, const cpu_set_t& cores)
      : oneapi::tbb::task_scheduler_observer(arena),
        cores_(cores),
        everywhere_(process_affinity()) {
    observe(true);
  }
  ~CorePinning() override { observe(false); }

  void on_scheduler_entry(bool) override {
    pthread_setaffinity_np(pthread_self(), sizeof(cores_), &cores_);
  }
  void on_scheduler_exit(bool) override {
    pthread_setaffinity_np(pthread_self(), sizeof(everywhere_), &everywhere_);
  }

 private:
  cpu_set_t cores_;
  cpu_set_t everywhere_;
};

cpu_set_t core_mask(const std::vector<int32_t>& cores) {
  const cpu_set_t allowed = process_affinity();
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int32_t core : cores) {
    if (core < 0 || core >= CPU_SETSIZE || !CPU_ISSET(core, &allowed))
      throw Error("core " + std::to_string(core) + " is not one this process may run on");
    CPU_SET(core, &mask);
  }
  return mask;
}

struct Queued {
  Request* request;
  std::span<const int32_t> stages;
  uint64_t sequence;
};

// Highest priority first; among equals, first submitted first.
struct RunsBefore {
  bool operator()(const Queued& a, const Queued& b) const {
    if (a.request->priority() != b.request->priority())
      return a.request->priority() < b.request->priority();
    return a.sequence > b.sequence;
  }
};

}  // namespace

std::optional<std::string> check_barrier_stages(const GraphView& graph,
                                                std::span<const int32_t> stage_first_node) {
  if (stage_first_node.empty() || stage_first_node.front() != 0 ||
      stage_first_node.back() != graph.node_count)
    return "stage bounds must run from 0 to the node count " + std::to_string(graph.node_count);
  for (size_t s = 0; s + 1 < stage_first_node.size(); ++s)
    if (stage_first_node[s + 1] < stage_first_node[s])
      return "stage bounds decrease at stage " + std::to_string(s);
  // Bounds now lie in [0, node_count]: safe to walk each stage's nodes.
  for (size_t s = 0; s + 1 < stage_first_node.size(); ++s) {
    const int32_t first = stage_first_node[s], last = stage_first_node[s + 1];
    for (int32_t n = first; n < last; ++n)
      for (int32_t e = graph.child_offsets[n]; e < graph.child_offsets[n + 1]; ++e)
        if (graph.children[e] < last)
          return "node " + std::to_string(n) + " of stage " + std::to_string(s) + " has child " +
                 std::to_string(graph.children[e]) + " in the same or an earlier stage";
  }
  return std::nullopt;
}

struct BarrierExecutor::Impl {
  explicit Impl(const BarrierExecutorOptions& options)
      : threads(resolve_thread_count(options)),
        reservation(threads),
        // One slot is kept for the dispatcher, which joins the arena and
        // works in every parallel_for; oneTBB's workers fill the rest.
        arena(threads, 1) {
    arena.initialize();
    if (!options.cores.empty())
      pinning = std::make_unique<CorePinning>(arena, core_mask(options.cores));
    dispatcher = std::thread([this] { dispatch(); });
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_all();
    dispatcher.join();
    pinning.reset();
  }

  void submit(Request& request, std::span<const int32_t> stages) {
    {
      std::lock_guard lock(mutex);
      queue.push(Queued{&request, stages, next_sequence++});
    }
    wake.notify_one();
  }

  void dispatch() {
    for (;;) {
      Queued next;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and every submitted request has run
        next = queue.top();
        queue.pop();
      }
      arena.execute([&] {
        for (size_t s = 0; s + 1 < next.stages.size(); ++s)
          run_stage(*next.request, next.stages[s], next.stages[s + 1]);
      });
      next.request->on_complete();
    }
  }

  // One operator: its tiles in parallel, then the barrier (parallel_for's end,
  // which also makes their writes visible to the next stage).
  static void run_stage(Request& request, int32_t first, int32_t last) {
    if (last - first == 1) {
      request.execute_node(first);
      return;
    }
    // Which nodes ran, in case oneTBB fails to start its tasks part way
    // (out of memory): it rethrows only after the tasks in flight finished.
    std::vector<uint8_t> executed;
    try {
      executed.assign(static_cast<size_t>(last - first), 0);
      // One task per tile (grain 1, simple_partitioner): tiles are coarse, and
      // this balances uneven tiles as well as the dataflow executor does.
      oneapi::tbb::parallel_for(
          oneapi::tbb::blocked_range<int32_t>(first, last, 1),
          [&](const oneapi::tbb::blocked_range<int32_t>& range) {
            for (int32_t n = range.begin(); n != range.end(); ++n) {
              request.execute_node(n);
              executed[static_cast<size_t>(n - first)] = 1;
            }
          },
          oneapi::tbb::simple_partitioner());
      return;
    } catch (...) {
    }
    for (int32_t n = first; n < last; ++n)
      if (executed.empty() || !executed[static_cast<size_t>(n - first)]) request.execute_node(n);
  }

  const int32_t threads;
  WorkerPoolReservation reservation;
  oneapi::tbb::task_arena arena;
  std::unique_ptr<CorePinning> pinning;

  std::mutex mutex;
  std::condition_variable wake;
  std::priority_queue<Queued, std::vector<Queued>, RunsBefore> queue;
  uint64_t next_sequence = 0;
  bool stop = false;
  std::thread dispatcher;
};

BarrierExecutor::BarrierExecutor(const BarrierExecutorOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

BarrierExecutor::~BarrierExecutor() = default;

void BarrierExecutor::submit(Request& request, std::span<const int32_t> stage_first_node) {
  impl_->submit(request, stage_first_node);
}

int32_t BarrierExecutor::thread_count() const {
  return impl_->threads;
}

}  // namespace tessera::scheduler
