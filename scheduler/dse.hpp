#pragma once
// Distributed Scheduling Engine (ASPEN §3.2, Algorithm 1): one per worker.
// It follows a path depth-first through a request's tile graph, keeping the
// first child that its execution made ready and handing the others on as new
// path heads. It is model-agnostic: entries carry their Request, so nodes of
// any number of requests and models interleave.
//
// Local cache (the optimisation §3.2 suggests). The other readied children go
// first to a small FIFO owned by this DSE, not to the shared pool: no atomic
// operation, no shared cache line. They spill to this DSE's pool row (one
// batch) when the cache is full (the older half) or when some worker is idle
// (all of it, so the idle worker can steal). A cache of capacity 0 is exactly
// Algorithm 1.
//
// Completion counting is batched too: the DSE counts the nodes it ran for the
// current request and adds them to the request's shared counter when it
// switches request or runs out of local work, instead of one shared atomic
// per node.
//
// Data affinity (ASPEN §3.3: own row first, for data reuse). When the graph
// names each node's main parent (GraphView::main_parents: the tile it reads
// most of), a readied child whose main parent ran on another worker is not
// walked here but pushed to that worker's row: its input is in that core's
// cache. The owner pops its own row first; an idle worker steals it as any
// other pool entry, so no parallelism is lost. A single worker never routes.
//
// Walk or queue. A graph may mark nodes not to walk into (GraphView::
// walk_into, from graph::depth_first_nodes): a readied child of such an op
// goes to the cache like the other children, so the op's ready tiles run one
// after another while its weights are in cache.
//
// Long nodes are shared at once. The cache is private: a worker that goes
// idle just after a DSE cached some readied nodes cannot take them until
// that DSE finishes the node it runs next. For nodes marked in
// GraphView::shared_when_ready (graph::long_nodes: big GEMM and conv
// tiles) the DSE pushes them to its pool row whether or not a worker is
// idle yet; it still pops its own row first. And before it runs a node, a
// DSE holding cached nodes hands them to the pool if a worker is idle by
// then (checked after the previous node too, where its children are shared).
//
// Going on from the cache. At a dead end the DSE takes the next head from its
// local cache inside the same loop when it is of the same request, nothing
// more urgent is queued and no hand-over or exit is pending: the state a new
// path would set up (request, counters, exclusive mode) is already right, and
// on a graph of cheap nodes that set-up cost as much as the nodes (paths of
// a random two-parent DAG are about two nodes long).
//
// Priority (ASPEN §3.3 policy, request priority): while entries of a band
// above the default are queued in the pool (ReadyPool::urgent_pending), a DSE
// running default- or low-priority work stops after the current node, parks
// its next node in its cache and pops from the pool, which hands out the
// highest band first.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "scheduler/ready_pool.hpp"

namespace tessera::scheduler {

struct DseHooks {
  // Called after the DSE pushed `count` entries to the pool (to wake workers).
  std::function<void(int32_t count)> on_pushed;
  // Called after a request's on_complete() returned (the request may be gone).
  std::function<void()> on_request_completed;
};

struct DseOptions {
  static constexpr int32_t kDefaultCacheCapacity = 32;
  // Ready children kept locally; 0: every extra child goes to the pool
  // (Algorithm 1 as written).
  int32_t cache_capacity = kDefaultCacheCapacity;
  // Number of workers currently looking for work (owned by the executor);
  // when > 0 the DSE shares its extra children through the pool. May be null.
  const std::atomic<int32_t>* idle_workers = nullptr;
  // Set by the executor while this DSE is its only worker: paths then count
  // parents with plain loads and stores (Request::mark_parent_executed_exclusive).
  // May be null (always atomic).
  const std::atomic<bool>* exclusive = nullptr;
  // Set when this DSE's worker is to leave (the executor's retire flag): a
  // path that goes on from the local cache stops at the next node. May be null.
  const std::atomic<bool>* leave = nullptr;
};

class Dse {
 public:
  Dse(ReadyPool& pool, int32_t row, DseHooks hooks = {}, DseOptions options = {});
  ~Dse();
  Dse(const Dse&) = delete;
  Dse& operator=(const Dse&) = delete;

  // Algorithm 1, line 9 then lines 11-20 until the path ends: takes a path
  // head (local cache first unless urgent pool work is queued, then the pool)
  // and runs it. False when there was no work (nothing was run); completion
  // counts are flushed then, and whenever the local cache is empty after a
  // path.
  bool run_next_path();

  // Algorithm 1, lines 11-20 repeated while a child became ready: executes
  // `head`, then the first child it made ready, and so on. Every other child
  // made ready goes to the local cache or, in one batch per executed node, to
  // this DSE's pool row.
  void run_path(ReadyEntry head);

  // Pushes every locally cached entry to the pool (one batch) and flushes the
  // completion count; used when the worker retires or when others are idle.
  void spill();
  // Adds the nodes run for the current request to its counter; completes the
  // request if they were its last.
  void flush_completed();

  int32_t row() const { return row_; }
  int32_t cached() const { return cache_size_; }

  // Hand-over from single-worker mode (Dekker handshake, seq_cst on both
  // sides): a DSE runs paths exclusive only if, after announcing itself here,
  // it still reads the executor's `exclusive` flag set; it stays announced
  // until it goes idle, spills, or sees the flag cleared at a path start. The
  // executor clears the flag, then waits until this reads false, before
  // starting a second worker.
  bool in_exclusive_path() const { return in_exclusive_path_.load(std::memory_order_seq_cst); }

 private:
  void cache_or_batch(ReadyEntry entry, bool share);
  void leave_exclusive();
  [[gnu::noinline]] void spill_older_half();
  // Moves every cached entry, oldest first, to the batch for the pool.
  void batch_whole_cache();
  void push_batch();
  void send_to_row(int32_t row, ReadyEntry entry);
  void switch_request(Request* request);
  ReadyEntry cache_pop();
  template <bool kExclusive>
  bool go_on_from_cache(const Request* request) const;
  template <bool kExclusive>
  void run_path_impl(Request* request, int32_t node);

  ReadyPool& pool_;
  int32_t row_;
  DseHooks hooks_;
  DseOptions options_;
  std::vector<ReadyEntry> batch_;  // reused so the hot loop does not allocate
  // The local cache: a ring of cache_capacity entries (FIFO: older, usually
  // shallower, nodes leave first, as in the pool's depth order).
  std::unique_ptr<ReadyEntry[]> cache_;
  int32_t cache_head_ = 0;
  int32_t cache_size_ = 0;
  // Batched completion count for `current_`.
  Request* current_ = nullptr;
  int32_t current_done_ = 0;
  bool current_yields_ = false;     // current_ gives way to urgent pool work
  bool exclusive_entered_ = false;  // announced in in_exclusive_path_ (this thread only)
  // Read by the executor's add_workers only: own cache line.
  alignas(64) std::atomic<bool> in_exclusive_path_{false};
};

}  // namespace tessera::scheduler
