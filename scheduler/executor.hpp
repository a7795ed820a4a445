#pragma once
// The dataflow executor: one DSE (ASPEN Algorithm 1) per worker thread over a
// shared ReadyPool. Any number of requests, of any models, run at once.
#include <cstdint>
#include <memory>

#include "scheduler/request.hpp"

namespace tessera::scheduler {

struct ExecutorOptions {
  int32_t threads = 0;  // 0: one per core the process may run on
};

class Executor {
 public:
  explicit Executor(const ExecutorOptions& options);
  ~Executor();  // waits for running requests' nodes to drain, then joins the workers
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Starts a request: pushes its source nodes to the ready pool. Returns at
  // once; the request's on_complete() says when it is done. The request must
  // stay alive until then.
  void submit(Request& request);

  int32_t thread_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::scheduler
