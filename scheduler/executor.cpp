#include "scheduler/executor.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "graph/error.hpp"
#include "scheduler/dse.hpp"
#include "scheduler/ready_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::scheduler {

namespace {

// How long an idle worker keeps polling the pool before it parks: long enough
// to catch work pushed by a DSE a few nodes later, short enough that an idle
// engine drops to zero CPU almost at once.
constexpr auto kSpinBeforePark = std::chrono::microseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

int32_t default_thread_count() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    const int count = CPU_COUNT(&mask);
    if (count > 0) return count;
  }
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

struct Executor::Impl {
  explicit Impl(int32_t threads) : pool(threads) {
    dses.reserve(static_cast<size_t>(threads));
    for (int32_t row = 0; row < threads; ++row) {
      dses.emplace_back(
          pool, row,
          DseHooks{[this](int32_t count) { wake(count); }, [this] { finish_request(); }});
    }
    workers.reserve(static_cast<size_t>(threads));
    try {
      for (int32_t row = 0; row < threads; ++row) {
        workers.emplace_back([this, row] { work(row); });
      }
    } catch (...) {
      stop_and_join();  // the destructor does not run when the constructor throws
      throw;
    }
  }

  ~Impl() {
    // Drain: requests still running keep their nodes in the pool or on a DSE.
    for (int64_t active = active_requests.load(std::memory_order_acquire); active != 0;
         active = active_requests.load(std::memory_order_acquire)) {
      active_requests.wait(active, std::memory_order_acquire);
    }
    stop_and_join();
  }

  void stop_and_join() {
    stop.store(true, std::memory_order_seq_cst);
    wake_epoch.fetch_add(1, std::memory_order_seq_cst);
    wake_epoch.notify_all();
    for (std::thread& worker : workers) worker.join();
  }

  // Wakes at most one parked worker per pushed entry.
  //
  // Parking handshake (no lost wake-up): a pusher makes its entries visible
  // (seq_cst row-count increment) and then reads `parked`; a worker increments
  // `parked`, reads `wake_epoch`, then re-checks the pool. In the single total
  // order of these seq_cst operations either the pusher sees the worker as
  // parked and bumps the epoch (so the worker's wait returns at once or is
  // notified), or the worker's re-check sees the entries.
  void wake(int32_t count) {
    const int32_t parked_now = parked.load(std::memory_order_seq_cst);
    if (parked_now <= 0) return;
    wake_epoch.fetch_add(1, std::memory_order_seq_cst);
    if (count >= parked_now) {
      wake_epoch.notify_all();
    } else {
      for (int32_t i = 0; i < count; ++i) wake_epoch.notify_one();
    }
  }

  void finish_request() {
    if (active_requests.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      active_requests.notify_all();  // the destructor may be waiting
    }
  }

  // Polls the pool for kSpinBeforePark; true if it ran a path meanwhile.
  bool spin_for_work(Dse& dse) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinBeforePark;
    do {
      for (int i = 0; i < 32; ++i) {
        if (dse.run_next_path()) return true;
        cpu_relax();
      }
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  void work(int32_t row) {
    Dse& dse = dses[static_cast<size_t>(row)];
    while (true) {
      if (dse.run_next_path()) continue;
      if (spin_for_work(dse)) continue;
      parked.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t epoch = wake_epoch.load(std::memory_order_seq_cst);
      if (stop.load(std::memory_order_seq_cst)) {
        parked.fetch_sub(1, std::memory_order_seq_cst);
        return;
      }
      if (pool.empty()) wake_epoch.wait(epoch, std::memory_order_seq_cst);
      parked.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  void submit(Request& request) {
    const GraphView& graph = request.graph();
    if (graph.node_count == 0) {
      request.on_complete();
      return;
    }
    if (graph.source_count <= 0) {
      throw Error("cannot run a graph of " + std::to_string(graph.node_count) +
                  " nodes with no source node (every node has a parent, so the graph has a "
                  "cycle or its sources list is missing)");
    }
    active_requests.fetch_add(1, std::memory_order_acq_rel);
    // Spread the sources evenly over the rows (ASPEN §3.3), starting at a
    // round-robin row so that small requests do not all land on row 0.
    const int32_t rows = pool.rows();
    const int32_t first_row = static_cast<int32_t>(
        next_submit_row.fetch_add(1, std::memory_order_relaxed) % static_cast<uint32_t>(rows));
    const int32_t chunks = std::min(rows, graph.source_count);
    std::vector<ReadyEntry> batch;
    // Reading the request between pushes is safe: it cannot complete before
    // its last chunk of sources is pushed and run.
    for (int32_t chunk = 0; chunk < chunks; ++chunk) {
      const int32_t begin = static_cast<int32_t>(int64_t{graph.source_count} * chunk / chunks);
      const int32_t end = static_cast<int32_t>(int64_t{graph.source_count} * (chunk + 1) / chunks);
      batch.clear();
      for (int32_t i = begin; i < end; ++i) batch.push_back({&request, graph.sources[i]});
      pool.push_batch((first_row + chunk) % rows, batch);
      wake(end - begin);
    }
  }

  ReadyPool pool;
  std::vector<Dse> dses;
  std::vector<std::thread> workers;
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> wake_epoch{0};
  std::atomic<int32_t> parked{0};
  std::atomic<int64_t> active_requests{0};
  std::atomic<uint32_t> next_submit_row{0};
};

Executor::Executor(const ExecutorOptions& options) {
  if (options.threads < 0) {
    throw Error("ExecutorOptions::threads must be >= 0 (0 picks one per available core), got " +
                std::to_string(options.threads));
  }
  impl_ = std::make_unique<Impl>(options.threads == 0 ? default_thread_count() : options.threads);
}

Executor::~Executor() = default;

void Executor::submit(Request& request) {
  impl_->submit(request);
}

int32_t Executor::thread_count() const {
  return impl_->pool.rows();
}

}  // namespace tessera::scheduler
