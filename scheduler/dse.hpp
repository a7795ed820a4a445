#pragma once
// Distributed Scheduling Engine (ASPEN §3.2, Algorithm 1): one per worker.
// It follows a path depth-first through a request's tile graph, keeping the
// first child that its execution made ready and pushing the others to the
// ready pool as new path heads. It is model-agnostic: entries carry their
// Request, so nodes of any number of requests and models interleave.
#include <cstdint>
#include <functional>
#include <vector>

#include "scheduler/ready_pool.hpp"

namespace tessera::scheduler {

struct DseHooks {
  // Called after the DSE pushed `count` entries to the pool (to wake workers).
  std::function<void(int32_t count)> on_pushed;
  // Called after a request's on_complete() returned (the request may be gone).
  std::function<void()> on_request_completed;
};

class Dse {
 public:
  Dse(ReadyPool& pool, int32_t row, DseHooks hooks = {});

  // Algorithm 1, line 9 then lines 11-20 until the path ends: pops a path head
  // and runs it. False when the pool looked empty (nothing was run).
  bool run_next_path();

  // Algorithm 1, lines 11-20 repeated while a child became ready: executes
  // `head`, then the first child it made ready, and so on. Every other child
  // made ready is pushed to this DSE's row in one batch per executed node.
  void run_path(ReadyEntry head);

  int32_t row() const { return row_; }

 private:
  ReadyPool& pool_;
  int32_t row_;
  DseHooks hooks_;
  std::vector<ReadyEntry> batch_;  // reused so the hot loop does not allocate
};

}  // namespace tessera::scheduler
