#include "scheduler/dse.hpp"

#include <string>

#include "graph/error.hpp"

namespace tessera::scheduler {

Dse::Dse(ReadyPool& pool, int32_t row, DseHooks hooks, DseOptions options)
    : pool_(pool), row_(row), hooks_(std::move(hooks)), options_(options) {
  if (options_.cache_capacity < 0) {
    throw Error("DseOptions::cache_capacity must be >= 0, got " +
                std::to_string(options_.cache_capacity));
  }
  if (options_.cache_capacity > 0) {
    cache_ = std::make_unique<ReadyEntry[]>(static_cast<size_t>(options_.cache_capacity));
  }
  batch_.reserve(static_cast<size_t>(options_.cache_capacity) + 16);
}

Dse::~Dse() = default;

inline ReadyEntry Dse::cache_pop() {
  const ReadyEntry entry = cache_[static_cast<size_t>(cache_head_)];
  if (++cache_head_ == options_.cache_capacity) cache_head_ = 0;
  --cache_size_;
  return entry;
}

void Dse::spill_older_half() {
  // The older half (shallower nodes, first in the pool's order) goes to the
  // pool where other DSEs can steal it.
  for (int32_t spilled = (options_.cache_capacity + 1) / 2; spilled > 0; --spilled) {
    batch_.push_back(cache_pop());
  }
}

inline void Dse::batch_whole_cache() {
  while (cache_size_ > 0) batch_.push_back(cache_pop());
}

inline void Dse::cache_or_batch(ReadyEntry entry, bool share) {
  if (share || options_.cache_capacity == 0) {
    batch_.push_back(entry);
    return;
  }
  if (cache_size_ == options_.cache_capacity) [[unlikely]]
    spill_older_half();
  int32_t tail = cache_head_ + cache_size_;
  if (tail >= options_.cache_capacity) tail -= options_.cache_capacity;
  cache_[static_cast<size_t>(tail)] = entry;
  ++cache_size_;
}

void Dse::push_batch() {
  pool_.push_batch(row_, batch_);
  if (hooks_.on_pushed) hooks_.on_pushed(static_cast<int32_t>(batch_.size()));
  batch_.clear();
}

void Dse::send_to_row(int32_t row, ReadyEntry entry) {
  pool_.push(row, entry);
  if (hooks_.on_pushed) hooks_.on_pushed(1);
}

void Dse::flush_completed() {
  if (current_ == nullptr) return;
  Request* request = current_;
  const int32_t done = current_done_;
  current_ = nullptr;  // once counted, the request may complete and be destroyed
  current_done_ = 0;
  if (done > 0 && request->mark_nodes_done(done)) {
    request->on_complete();
    if (hooks_.on_request_completed) hooks_.on_request_completed();
  }
}

void Dse::switch_request(Request* request) {
  if (request == current_) return;
  flush_completed();
  current_ = request;
  current_yields_ = pool_.policy().priority_to_band(request->priority(), pool_.bands()) <=
                    ReadyPool::kDefaultPriorityBand;
}

void Dse::spill() {
  leave_exclusive();
  batch_whole_cache();
  if (!batch_.empty()) push_batch();
  flush_completed();
}

bool Dse::run_next_path() {
  // Algorithm 1, line 9, with the local cache in front of the pool; urgent
  // (higher-band) pool work goes first.
  std::optional<ReadyEntry> head;
  if (cache_size_ > 0 && !pool_.urgent_pending()) {
    head = cache_pop();
  } else {
    head = pool_.pop(row_);
    if (!head && cache_size_ > 0) head = cache_pop();
  }
  if (!head) {
    flush_completed();
    leave_exclusive();  // an idle DSE must not hold add_workers up
    return false;
  }
  run_path(*head);
  // Nothing local left: the next head comes from the pool, possibly of another
  // request, so report our count now rather than when we next switch.
  if (cache_size_ == 0) flush_completed();
  return true;
}

template <bool kExclusive>
inline bool Dse::go_on_from_cache(const Request* request) const {
  if (cache_size_ == 0 || cache_[static_cast<size_t>(cache_head_)].request != request) return false;
  if (pool_.urgent_pending()) return false;  // line 9 would pop the pool first
  // relaxed, as at a path start (run_path): a late sight delays by one node.
  if (options_.leave && options_.leave->load(std::memory_order_relaxed)) return false;
  if (kExclusive && !options_.exclusive->load(std::memory_order_relaxed)) return false;
  return true;
}

void Dse::leave_exclusive() {
  if (!exclusive_entered_) return;
  exclusive_entered_ = false;
  // release: our plain counter updates happen before the second worker,
  // started after add_workers acquires this false.
  in_exclusive_path_.store(false, std::memory_order_release);
}

void Dse::run_path(ReadyEntry head) {
  switch_request(head.request);
  const std::atomic<bool>* exclusive = options_.exclusive;
  // relaxed: the common multi-worker case pays one plain load per path. A
  // stale `true` after add_workers cleared the flag is harmless: add_workers
  // waits for in_exclusive_path() to read false, which only this DSE writes.
  if (exclusive && exclusive->load(std::memory_order_relaxed)) {
    if (!exclusive_entered_) {
      // seq_cst store then seq_cst load: the Dekker handshake with add_workers
      // (in_exclusive_path()); one of the two sides sees the other's store.
      // Paid once per busy period, not per path: the DSE stays exclusive
      // until it goes idle or sees the flag cleared.
      in_exclusive_path_.store(true, std::memory_order_seq_cst);
      exclusive_entered_ = exclusive->load(std::memory_order_seq_cst);
      if (!exclusive_entered_) in_exclusive_path_.store(false, std::memory_order_release);
    }
    if (exclusive_entered_) {
      run_path_impl<true>(head.request, head.node);
      return;
    }
  } else {
    leave_exclusive();
  }
  run_path_impl<false>(head.request, head.node);
}

template <bool kExclusive>
void Dse::run_path_impl(Request* request, int32_t node) {
  const std::atomic<int32_t>* idle_workers = options_.idle_workers;
  // Loaded once per path: the loop below stores through `pending`, which the
  // compiler must otherwise assume may change them.
  const GraphView graph = request->graph();
  std::atomic<int32_t>* const pending = request->pending_parents();
  const int32_t* const main_parents = graph.main_parents;
  const uint8_t* const walk_into = graph.walk_into;
  const uint8_t* const shared_when_ready = graph.shared_when_ready;
  int32_t* const ran_on = request->ran_on();  // non-null with main_parents
  while (true) {
    // Siblings cached while no worker was idle stay invisible to one that
    // went idle since, for as long as this node runs: hand them over first.
    if (cache_size_ > 0 && idle_workers && idle_workers->load(std::memory_order_relaxed) > 0) {
      batch_whole_cache();
      push_batch();
    }
    request->execute_node(node);  // line 11
    if (ran_on) ran_on[node] = row_;
    // relaxed: a hint; a stale value only delays sharing by one node.
    const bool share = idle_workers && idle_workers->load(std::memory_order_relaxed) > 0;
    if (share) batch_whole_cache();
    int32_t next = -1;  // line 13: N <- NULL
    const int32_t edge_end = graph.child_offsets[node + 1];
    for (int32_t edge = graph.child_offsets[node]; edge < edge_end; ++edge) {  // line 14
      const int32_t child = graph.children[edge];
      const bool ready = kExclusive ? Request::parent_executed_exclusive(pending, child)
                                    : Request::parent_executed(pending, child);
      if (!ready) continue;  // lines 15-16
      if (!kExclusive && main_parents) {
        // Data affinity: a child whose main input another worker wrote goes
        // to that worker's row, where it finds the input in cache (it pops
        // its own row first); an idle worker still steals it from there.
        const int32_t home = main_parents[child];
        if (home >= 0 && ran_on[home] != row_) {
          send_to_row(ran_on[home], {request, child});
          continue;
        }
      }
      if (next < 0 && (walk_into == nullptr || walk_into[child])) {
        next = child;  // line 18: traverse to the first readied child
      } else {
        // line 20, cached or batched
        cache_or_batch({request, child}, share || (shared_when_ready && shared_when_ready[child]));
      }
    }
    // Per-request completion is not in Algorithm 1 (it runs one DNN forever).
    // The count is batched; a request with a node still ours (next, cached)
    // cannot complete, so `request` stays valid while we hold one.
    ++current_done_;
    if (next >= 0 && current_yields_ && pool_.urgent_pending()) {
      cache_or_batch({request, next}, false);  // give way to higher-priority work
      next = -1;
    }
    if (!batch_.empty()) push_batch();
    if (next < 0) {
      // Dead end: back to line 9, here without leaving the loop when the
      // cache's oldest entry may simply run next (see dse.hpp).
      if (!go_on_from_cache<kExclusive>(request)) return;
      next = cache_pop().node;
    }
    node = next;
  }
}

}  // namespace tessera::scheduler
