#pragma once
// The operator-with-barriers baseline (DESIGN.md, Scheduler; ASPEN §1, Fig. 1c):
// runs a tile graph one operator at a time, the tiles of an operator spread
// over the threads by a oneTBB parallel_for, and the end of that parallel_for
// is the barrier before the next operator. It takes the same Request as the
// dataflow Executor, so both run the same kernels on the same graph and can be
// compared (ASPEN §4.2).
//
// Requests run one after the other, highest priority first and in submission
// order among equal priorities: like an operator-based framework, every thread
// works on one operator of one request at a time. (Submitting from several
// threads at once is safe; co-execution is what the dataflow executor adds.)
//
//   BarrierExecutor executor({.threads = 4});
//   executor.submit(request, op_first_node);  // returns at once
//   // request.on_complete() runs on the executor's dispatcher thread
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "scheduler/request.hpp"

namespace tessera::scheduler {

struct BarrierExecutorOptions {
  int32_t threads = 0;  // 0: one per core the process may run on (or per entry of `cores`)
  std::vector<int32_t> cores = {};  // when not empty, every thread is confined to these CPUs
};

class BarrierExecutor {
 public:
  // Throws tessera::Error for a core the process may not run on.
  explicit BarrierExecutor(const BarrierExecutorOptions& options);
  ~BarrierExecutor();  // runs the requests already submitted, then stops
  BarrierExecutor(const BarrierExecutor&) = delete;
  BarrierExecutor& operator=(const BarrierExecutor&) = delete;

  // Queues a request and returns at once. `stage_first_node` (stages + 1
  // entries, from 0 to node_count, non-decreasing) splits the nodes into
  // stages run in order with a barrier after each; nodes of one stage must not
  // depend on each other (one stage per op: check_barrier_stages). Both the
  // request and the span must stay alive until request.on_complete().
  void submit(Request& request, std::span<const int32_t> stage_first_node);

  int32_t thread_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Why `stage_first_node` cannot be used with `graph` (bounds out of order, or
// an edge between two nodes of the same or a later stage); nullopt when it can.
std::optional<std::string> check_barrier_stages(const GraphView& graph,
                                                std::span<const int32_t> stage_first_node);

}  // namespace tessera::scheduler
