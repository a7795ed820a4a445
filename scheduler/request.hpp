#pragma once
// One execution of a tile graph. The scheduler knows nothing of models or
// kernels: a Request says how to execute one node and what to do when all
// nodes have run; the per-request parent counters live here, not in
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
  // Optional [node_count]: the parent whose output each node reads most (-1:
  // none). A node made ready on another worker than the one that ran this
  // parent goes to that worker's pool row instead (dse.hpp, data affinity).
  const int32_t* main_parents = nullptr;
  // Optional [node_count]: 0 where a DSE that readies the node should queue
  // it (local cache, FIFO) instead of walking into it (dse.hpp); null: walk
  // into every node, as Algorithm 1.
  const uint8_t* walk_into = nullptr;
  // Optional [node_count]: 1 where a DSE that readies the node but runs
  // another next pushes it to the pool at once, as it does for every node
  // while a worker is idle, instead of caching it (dse.hpp): long nodes,
  // which a worker going idle a moment later would otherwise wait out.
  const uint8_t* shared_when_ready = nullptr;
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
    return parent_executed(pending_parents_.get(), child);
  }
  // The same with the counters passed in: the DSE's hot loop loads them once
  // per path instead of once per child (a store through them could alias the
  // request's fields, so the compiler would reload them).
  //
  // Each node's counter starts at its parent count and counts down. A parent
  // that reads 1 is the last one: every other parent has counted, and no one
  // will touch the counter again, so it owns the child without a locked
  // read-modify-write. That covers single-parent nodes (chains, element-wise
  // tiles) and the last of several parents, half the counts of a 2-parent
  // node; and the node's parent count is not read at all.
  static bool parent_executed(std::atomic<int32_t>* pending, int32_t child) {
    // acquire: reading 1 means reading the last of the other parents'
    // fetch_sub (release), whose writes then happen before the child runs.
    if (pending[child].load(std::memory_order_acquire) == 1) return true;
    return pending[child].fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  // The same for a caller that knows no other thread counts this request's
  // parents meanwhile (the executor's single-worker mode, dse.hpp): a plain
  // load and store instead of a locked read-modify-write.
  bool mark_parent_executed_exclusive(int32_t child) {
    return parent_executed_exclusive(pending_parents_.get(), child);
  }
  static bool parent_executed_exclusive(std::atomic<int32_t>* pending, int32_t child) {
    // relaxed: exclusive by contract; the hand-over to multi-worker mode
    // orders these stores before any later fetch_sub (dse.hpp).
    const int32_t left = pending[child].load(std::memory_order_relaxed);
    if (left == 1) return true;
    pending[child].store(left - 1, std::memory_order_relaxed);
    return false;
  }
  // The parents-still-to-run counters, one per node (for the DSE's hot loop).
  std::atomic<int32_t>* pending_parents() { return pending_parents_.get(); }
  // The pool row of the worker that ran each node, when the graph has
  // main_parents (else null). Written by that worker before it counts the
  // node's children's parents (release), read by whoever readied a child
  // (acquire), so no atomic is needed.
  int32_t* ran_on() { return ran_on_.get(); }
  // Counts one executed node; true when it was the last one.
  bool mark_node_done() { return mark_nodes_done(1); }
  // Counts `count` executed nodes at once (a DSE batches them); true when they
  // were the last ones. acq_rel: every node's writes happen before the
  // caller that completes the request runs on_complete().
  bool mark_nodes_done(int32_t count) {
    return remaining_.fetch_sub(count, std::memory_order_acq_rel) == count;
  }

 private:
  GraphView graph_;
  int32_t priority_;
  std::unique_ptr<std::atomic<int32_t>[]> pending_parents_;  // see parent_executed()
  std::unique_ptr<int32_t[]> ran_on_;
  // Own cache line: DSEs decrement it while others read the fields above on
  // every node.
  alignas(64) std::atomic<int32_t> remaining_;
};

}  // namespace tessera::scheduler
