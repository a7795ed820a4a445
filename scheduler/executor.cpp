#include "scheduler/executor.hpp"

#include <hwloc.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
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

// Cap of the spin's back-off: on current x86 cores a pause is ~40-140 cycles,
// so an idle worker sees new work within about a microsecond.
constexpr int32_t kMaxPausesBetweenPolls = 16;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

using CpuList = std::vector<int32_t>;

// OS CPU ids of each physical core of the machine (hwloc), in topology order.
// Loaded once per process: topology discovery reads sysfs and takes
// milliseconds. Empty when hwloc cannot tell.
const std::vector<CpuList>& machine_cores() {
  static const std::vector<CpuList> cores = [] {
    std::vector<CpuList> result;
    hwloc_topology_t topology;
    if (hwloc_topology_init(&topology) != 0) return result;
    if (hwloc_topology_load(topology) == 0) {
      const int count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
      for (int i = 0; i < count; ++i) {
        const hwloc_obj_t core = hwloc_get_obj_by_type(topology, HWLOC_OBJ_CORE, i);
        if (core == nullptr || core->cpuset == nullptr) continue;
        CpuList cpus;
        for (int cpu = hwloc_bitmap_first(core->cpuset); cpu >= 0;
             cpu = hwloc_bitmap_next(core->cpuset, cpu)) {
          cpus.push_back(cpu);
        }
        if (!cpus.empty()) result.push_back(std::move(cpus));
      }
    }
    hwloc_topology_destroy(topology);
    return result;
  }();
  return cores;
}

CpuList allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  CpuList cpus;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {  // cannot tell: assume 0..n-1
    const auto count = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    for (int32_t cpu = 0; cpu < count; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

// The physical cores the executor may use: each machine core's CPUs that are
// both allowed to the process and in `wanted` (all allowed when empty).
std::vector<CpuList> usable_cores(const CpuList& wanted) {
  const CpuList allowed = allowed_cpus();
  for (const int32_t cpu : wanted) {
    if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
      std::string list;
      for (const int32_t a : allowed) {
        if (!list.empty()) list += ',';
        list += std::to_string(a);
      }
      throw Error("ExecutorOptions::cores lists CPU " + std::to_string(cpu) +
                  ", which this process may not run on (allowed: " + list + ")");
    }
  }
  CpuList usable = wanted.empty() ? allowed : wanted;
  std::sort(usable.begin(), usable.end());
  usable.erase(std::unique(usable.begin(), usable.end()), usable.end());
  std::vector<CpuList> cores;
  CpuList placed;
  for (const CpuList& core : machine_cores()) {
    CpuList mine;
    for (const int32_t cpu : core) {
      if (std::binary_search(usable.begin(), usable.end(), cpu)) mine.push_back(cpu);
    }
    placed.insert(placed.end(), mine.begin(), mine.end());
    if (!mine.empty()) cores.push_back(std::move(mine));
  }
  // CPUs hwloc did not place in a core (or no topology): one core each.
  std::sort(placed.begin(), placed.end());
  for (const int32_t cpu : usable) {
    if (!std::binary_search(placed.begin(), placed.end(), cpu)) cores.push_back({cpu});
  }
  return cores;
}

// Confines the calling thread to `cpus`; false when the OS refuses.
bool set_thread_affinity(const CpuList& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (const int32_t cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask) == 0;
}

}  // namespace

struct Executor::Impl {
  struct Worker {
    Worker(Impl& impl, int32_t slot, CpuList affinity_cpus)
        : dse(impl.pool, slot,
              DseHooks{[&impl](int32_t count) { impl.wake(count); },
                       [&impl] { impl.finish_request(); }},
              DseOptions{impl.dse_cache_capacity, &impl.idle_workers, &impl.exclusive, &retire}),
          affinity(std::move(affinity_cpus)) {}
    Dse dse;
    CpuList affinity;  // empty: leave the thread's affinity alone
    std::thread thread;
    // Set by remove_workers; read at path boundaries and before parking.
    alignas(64) std::atomic<bool> retire{false};
  };

  // The worker running on this thread, if any (remove_workers must not join itself).
  static thread_local const Impl* current_executor;

  Impl(const ExecutorOptions& options, std::vector<CpuList> usable, int32_t threads,
       int32_t max_threads)
      : cores(std::move(usable)),
        pin(options.pin),
        dse_cache_capacity(options.dse_cache_capacity),
        spin_before_park(options.spin_before_park),
        confine(!options.cores.empty()),
        pool(threads, ReadyPool::kDefaultColumns, ReadyPool::kDefaultBands, max_threads),
        workers(static_cast<size_t>(max_threads)) {
    // Before any worker starts: a single worker counts parents without RMWs.
    exclusive.store(threads == 1, std::memory_order_relaxed);
    try {
      for (int32_t slot = 0; slot < threads; ++slot) start_worker(slot);
      active_workers.store(threads, std::memory_order_release);
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

  CpuList affinity_for(int32_t slot) const {
    if (pin) return cores[static_cast<size_t>(slot) % cores.size()];
    if (!confine) return {};
    CpuList all;
    for (const CpuList& core : cores) all.insert(all.end(), core.begin(), core.end());
    return all;
  }

  void start_worker(int32_t slot) {
    if (slot >= pool.rows()) pool.add_rows(slot + 1);
    auto& worker = workers[static_cast<size_t>(slot)];
    worker = std::make_unique<Worker>(*this, slot, affinity_for(slot));
    worker->thread = std::thread([this, slot] { work(slot); });
  }

  void stop_and_join() {
    stop.store(true, std::memory_order_seq_cst);
    wake_all();
    for (auto& worker : workers) {
      if (worker && worker->thread.joinable()) worker->thread.join();
    }
  }

  void wake_all() {
    wake_epoch.fetch_add(1, std::memory_order_seq_cst);
    wake_epoch.notify_all();
  }

  // Wakes at most one parked worker per pushed entry, counting wake-ups
  // already on their way: a woken worker needs tens of microseconds to leave
  // its wait, and without `waking` every push meanwhile (hundreds, with short
  // nodes) would bump the epoch and make a futex call for the same sleepers.
  //
  // Parking handshake (no lost wake-up): a pusher publishes its entries (a
  // seq_cst tail CAS and bitmap read in the pool) and then reads `parked` and
  // `waking`; a worker increments `parked`, zeroes `waking`, reads
  // `wake_epoch`, then re-checks the pool with seq_cst reads. In the single
  // total order of these operations either the pusher sees the worker as
  // parked with no wake-up pending and bumps the epoch (so the worker's wait
  // returns at once or is notified), or the pusher's reads come before the
  // worker's zeroing and so its entries before the worker's re-check, which
  // sees them (ready_pool.cpp explains why a cleared bitmap bit cannot hide
  // them). `waking` may also read low (a woken worker zeroes it while another
  // is still on its way): that only costs a spare wake-up.
  void wake(int32_t count) {
    const int32_t parked_now = parked.load(std::memory_order_seq_cst);
    if (parked_now <= 0) return;
    const int32_t wanted = std::min(count, parked_now);
    const int32_t more = wanted - waking.load(std::memory_order_seq_cst);
    if (more <= 0) return;
    waking.fetch_add(more, std::memory_order_seq_cst);
    wake_epoch.fetch_add(1, std::memory_order_seq_cst);
    if (wanted >= parked_now) {
      wake_epoch.notify_all();
    } else {
      for (int32_t i = 0; i < more; ++i) wake_epoch.notify_one();
    }
  }

  void finish_request() {
    if (active_requests.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      active_requests.notify_all();  // the destructor may be waiting
    }
  }

  bool should_exit(const Worker& worker) const {
    // relaxed: a late sight of either flag only delays the exit by one path;
    // park() re-reads them in the seq_cst handshake before sleeping.
    return worker.retire.load(std::memory_order_relaxed) || stop.load(std::memory_order_relaxed);
  }

  // Polls for spin_before_park; true if there may be work (or a reason to exit).
  // Polls only the rows' bitmaps, with a growing pause between polls: every
  // poll pulls lines the busy workers write when they push, and each such
  // read costs the next pusher a cache-line transfer.
  bool spin_for_work(const Worker& worker) const {
    const auto deadline = std::chrono::steady_clock::now() + spin_before_park;
    int32_t pauses = 1;
    do {
      for (int i = 0; i < 8; ++i) {
        if (pool.maybe_nonempty() || should_exit(worker)) return true;
        for (int32_t p = 0; p < pauses; ++p) cpu_relax();
        pauses = std::min(pauses * 2, kMaxPausesBetweenPolls);
      }
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

  // Returns once there may be work. A woken worker that still sees entries
  // queued passes the wake-up on (pushes skipped while it was on its way).
  void park(const Worker& worker) {
    parked.fetch_add(1, std::memory_order_seq_cst);
    // Any wake-up counted before this worker parked was for others, who have
    // left or are leaving their wait: it must not stop pushers waking this one.
    waking.store(0, std::memory_order_seq_cst);
    const uint32_t epoch = wake_epoch.load(std::memory_order_seq_cst);
    const bool exiting =
        worker.retire.load(std::memory_order_seq_cst) || stop.load(std::memory_order_seq_cst);
    if (!exiting && pool.empty()) wake_epoch.wait(epoch, std::memory_order_seq_cst);
    parked.fetch_sub(1, std::memory_order_seq_cst);
    waking.store(0, std::memory_order_seq_cst);
    if (!pool.empty()) wake(1);
  }

  void work(int32_t slot) {
    current_executor = this;
    Worker& worker = *workers[static_cast<size_t>(slot)];
    if (!worker.affinity.empty()) set_thread_affinity(worker.affinity);  // best effort
    Dse& dse = worker.dse;
    while (!should_exit(worker)) {
      if (dse.run_next_path()) continue;
      // relaxed: idle_workers is a hint for DSEs deciding to share work.
      idle_workers.fetch_add(1, std::memory_order_relaxed);
      if (!spin_for_work(worker)) park(worker);
      idle_workers.fetch_sub(1, std::memory_order_relaxed);
    }
    // Retiring (ASPEN §5): the current path is done; hand the cached ready
    // nodes to the pool and report the nodes run. A submit's wake-up may have
    // picked this worker just before it left: pass it on to all parked ones.
    dse.spill();
    wake(std::numeric_limits<int32_t>::max());
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
    // Spread the sources evenly over the active workers' rows (ASPEN §3.3),
    // starting at a round-robin row so that small requests do not all land on
    // row 0. A row whose worker retires meanwhile is drained by stealing.
    const int32_t rows = std::max(1, active_workers.load(std::memory_order_acquire));
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

  int32_t add_workers(int32_t n) {
    std::lock_guard lock(control);
    const int32_t count = active_workers.load(std::memory_order_relaxed);
    const int32_t target =
        static_cast<int32_t>(std::min<int64_t>(pool.max_rows(), int64_t{count} + std::max(0, n)));
    if (target > count && exclusive.load(std::memory_order_relaxed)) {
      // Leave single-worker mode before a second worker can touch a counter:
      // clear the flag, then wait out a path that started exclusive (see
      // Dse::in_exclusive_path for the handshake).
      exclusive.store(false, std::memory_order_seq_cst);
      while (workers[0]->dse.in_exclusive_path()) std::this_thread::yield();
    }
    for (int32_t slot = count; slot < target; ++slot) {
      start_worker(slot);
      active_workers.store(slot + 1, std::memory_order_release);
    }
    return active_workers.load(std::memory_order_relaxed);
  }

  int32_t remove_workers(int32_t n) {
    if (current_executor == this) {
      throw Error("Executor::remove_workers cannot be called from one of its own workers");
    }
    std::lock_guard lock(control);
    const int32_t count = active_workers.load(std::memory_order_relaxed);
    const int32_t target = std::max(1, count - std::max(0, n));
    if (target == count) return count;
    // Publish the smaller count first so that submit() stops choosing these rows.
    active_workers.store(target, std::memory_order_release);
    for (int32_t slot = target; slot < count; ++slot) {
      // seq_cst: pairs with park()'s re-check after its epoch read.
      workers[static_cast<size_t>(slot)]->retire.store(true, std::memory_order_seq_cst);
    }
    wake_all();
    for (int32_t slot = target; slot < count; ++slot) {
      workers[static_cast<size_t>(slot)]->thread.join();
      workers[static_cast<size_t>(slot)].reset();
    }
    // release: the joined workers' counter updates precede the remaining
    // worker's exclusive paths (it reads the flag with acquire semantics via
    // the seq_cst load in Dse::run_path).
    if (target == 1) exclusive.store(true, std::memory_order_seq_cst);
    return target;
  }

  const std::vector<CpuList> cores;  // usable physical cores, each a CPU list
  const bool pin;
  const int32_t dse_cache_capacity;
  const std::chrono::microseconds spin_before_park;
  const bool confine;
  ReadyPool pool;
  std::vector<std::unique_ptr<Worker>> workers;  // [max threads]; [0, active) running
  std::mutex control;                            // add_workers / remove_workers
  std::atomic<int32_t> active_workers{0};
  std::atomic<bool> stop{false};
  // Written on every idle/busy transition and read by busy DSEs: own line.
  alignas(64) std::atomic<int32_t> idle_workers{0};
  // True while exactly one worker runs (read at every path start: own line).
  alignas(64) std::atomic<bool> exclusive{false};
  alignas(64) std::atomic<uint32_t> wake_epoch{0};
  std::atomic<int32_t> parked{0};
  std::atomic<int32_t> waking{0};  // wake-ups issued, not yet taken (see wake())
  alignas(64) std::atomic<int64_t> active_requests{0};
  std::atomic<uint32_t> next_submit_row{0};
};

thread_local const Executor::Impl* Executor::Impl::current_executor = nullptr;

Executor::Executor(const ExecutorOptions& options) {
  if (options.spin_before_park.count() < 0) {
    throw Error("ExecutorOptions::spin_before_park must be >= 0, got " +
                std::to_string(options.spin_before_park.count()) + " us");
  }
  if (options.threads < 0 || options.max_threads < 0) {
    throw Error(
        "ExecutorOptions::threads and max_threads must be >= 0 (0 picks the default), got " +
        std::to_string(options.threads) + " and " + std::to_string(options.max_threads));
  }
  std::vector<CpuList> cores = usable_cores(options.cores);
  const int32_t threads = options.threads == 0
                              ? static_cast<int32_t>(std::max<size_t>(1, cores.size()))
                              : options.threads;
  const int32_t max_threads =
      options.max_threads == 0 ? std::max(threads, kDefaultMaxThreads) : options.max_threads;
  if (max_threads < threads) {
    throw Error("ExecutorOptions::max_threads (" + std::to_string(max_threads) +
                ") is below threads (" + std::to_string(threads) + ")");
  }
  impl_ = std::make_unique<Impl>(options, std::move(cores), threads, max_threads);
}

Executor::~Executor() = default;

void Executor::submit(Request& request) {
  impl_->submit(request);
}

int32_t Executor::thread_count() const {
  return impl_->active_workers.load(std::memory_order_acquire);
}

int32_t Executor::max_thread_count() const {
  return impl_->pool.max_rows();
}

int32_t Executor::add_workers(int32_t n) {
  return impl_->add_workers(n);
}

int32_t Executor::remove_workers(int32_t n) {
  return impl_->remove_workers(n);
}

}  // namespace tessera::scheduler
