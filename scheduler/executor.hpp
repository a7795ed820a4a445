#pragma once
// The dataflow executor: one DSE (ASPEN Algorithm 1) per worker thread over a
// shared ReadyPool. Any number of requests, of any models, run at once
// (ASPEN §5, co-execution), ordered by Request::priority() (ready_pool.hpp).
//
// Workers. By default one per physical core the process may run on (hwloc
// topology), each pinned to its core. Idle workers spin briefly, then park;
// a push wakes only as many parked workers as it pushed entries, so an idle
// executor uses no CPU. Workers can be added and removed while requests run
// (ASPEN §5, "resources dynamically added or removed").
//
//   Executor executor(ExecutorOptions(/*threads=*/4, /*cores=*/{0, 1, 2, 3}));
//   executor.submit(request);      // returns at once; request.on_complete() says when done
//   executor.remove_workers(2);    // e.g. lend two cores to something else
//   executor.add_workers(2);
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "scheduler/request.hpp"

namespace tessera::scheduler {

struct ExecutorOptions {
  // A constructor rather than an aggregate so that ExecutorOptions{n} stays
  // warning-free (-Wmissing-field-initializers) as members are added.
  ExecutorOptions(int32_t threads_ = 0, std::vector<int32_t> cores_ = {}, bool pin_ = true,
                  int32_t max_threads_ = 0)
      : threads(threads_), cores(std::move(cores_)), pin(pin_), max_threads(max_threads_) {}

  int32_t threads = 0;  // 0: one per physical core available (see `cores`)
  // OS CPU ids to confine the executor to; empty: every CPU the process may
  // run on. A CPU the process may not run on is an error.
  std::vector<int32_t> cores;
  // Pin each worker to one physical core (its hyper-threads among `cores`);
  // workers beyond the number of cores wrap around. Off: workers may run on
  // any CPU of `cores`. Pinning that the OS refuses is skipped silently.
  bool pin = true;
  // Upper bound for add_workers(); 0: max(threads, kDefaultMaxThreads).
  int32_t max_threads = 0;
  // Ready children each DSE keeps locally before sharing them through the
  // pool (dse.hpp); 0 is Algorithm 1 as written (for ablations).
  int32_t dse_cache_capacity = 32;
  // How long an idle worker polls the pool before it parks. Waking a parked
  // worker goes through the OS (and, in a virtual machine, the host): on
  // the 2-vCPU KVM guests we develop on, 85-100 us at the median and several
  // ms at the 99th percentile, so a worker that parks at every short lull
  // inside a run (a single-tile op, a join) leaves its core idle for longer
  // than the lull. Spinning about as long as a wake-up costs bounds that
  // loss (the classic spin-then-block rule) and still lets an idle engine
  // drop to zero CPU within a millisecond.
  std::chrono::microseconds spin_before_park{1000};
};

class Executor {
 public:
  static constexpr int32_t kDefaultMaxThreads = 256;

  explicit Executor(const ExecutorOptions& options);
  ~Executor();  // waits for running requests' nodes to drain, then joins the workers
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Starts a request: pushes its source nodes to the ready pool. Returns at
  // once; the request's on_complete() says when it is done. The request must
  // stay alive until then.
  void submit(Request& request);

  // Number of running workers.
  int32_t thread_count() const;
  int32_t max_thread_count() const;

  // Starts up to `n` more workers (capped at max_threads); returns the new
  // worker count. Safe while requests run.
  int32_t add_workers(int32_t n);
  // Stops `n` workers, never going below one; returns the new worker count.
  // Each removed worker finishes its current path, hands its cached ready
  // nodes to the pool and exits; nodes already in its pool row are stolen by
  // the others, so no node is lost or run twice. Blocks until they exited;
  // must not be called from a request's execute_node()/on_complete() (throws).
  int32_t remove_workers(int32_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::scheduler
