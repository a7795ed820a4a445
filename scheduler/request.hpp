#pragma once
// One execution of a tile graph. The scheduler knows nothing of models or
// kernels: a Request says how to execute one node and what to do when all
// nodes have run; the per-request executed-parents counters live here, not in
// the model, so one model can run many requests at once (DESIGN.md, Scheduler).
#include <atomic>
#include <cstdint>
#include <memory>

namespace tessera::scheduler {

// Immutable per-model graph structure in CSR form. Nodes are numbered in a
// topological order; the arrays are owned by the caller and outlive requests.
struct GraphView {
  int32_t node_count = 0;
  const int32_t* parent_counts = nullptr;  // [node_count]
  const int32_t* child_offsets = nullptr;  // [node_count + 1]
  const int32_t* children = nullptr;       // [child_offsets[node_count]]
  const int32_t* depths = nullptr;         // [node_count]; feeds ready-pool priority
  const int32_t* sources = nullptr;        // nodes with no parents
  int32_t source_count = 0;
};

class Request {
 public:
  explicit Request(const GraphView& graph, int32_t priority = 0);
  virtual ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Runs one node's work. Called exactly once per node, after all its parents.
  virtual void execute_node(int32_t node) noexcept = 0;
  // Called exactly once, by the thread that finished the last node (or by
  // submit() for an empty graph). The Request may be destroyed from here on.
  virtual void on_complete() noexcept = 0;

  const GraphView& graph() const { return graph_; }
  int32_t priority() const { return priority_; }

  // Algorithm 1, lines 15-16: counts one executed parent of `child`; true when
  // that made the child ready (this caller is then its unique owner).
  bool mark_parent_executed(int32_t child) {
    // acq_rel: the parent's writes must be visible to whoever runs the child.
    return executed_parents_[child].fetch_add(1, std::memory_order_acq_rel) + 1 ==
           graph_.parent_counts[child];
  }
  // Counts one executed node; true when it was the last one.
  bool mark_node_done() { return remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

 private:
  GraphView graph_;
  int32_t priority_;
  std::unique_ptr<std::atomic<int32_t>[]> executed_parents_;
  std::atomic<int32_t> remaining_;
};

}  // namespace tessera::scheduler
