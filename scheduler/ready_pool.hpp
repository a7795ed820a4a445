#pragma once
// The Ready Pool (ASPEN §3.3): a matrix of concurrent FIFO queues. Each DSE owns
// a row; the column is a priority class, so pop() takes the most urgent entry
// of a row first. pop() scans the caller's own row first (data reuse) and steals
// from the other rows when it is empty (load balancing).
//
// Columns. A row has `bands x columns` cells. The band comes from the
// request's priority (band_for_priority), the column inside a band from the
// node's depth (column_for_depth: shallow first, so DSEs follow longer paths,
// §3.3). pop() visits the highest band first and, inside it, the shallowest
// column, so a high-priority request's nodes leave before any queued node of a
// lower-priority request. Both maps are a ColumnPolicy: swap them to change
// the scheduling policy without touching the pool.
//
// Cells. Each cell is a bounded lock-free MPMC ring (Vyukov's bounded queue:
// one CAS per push batch or pop, a per-slot sequence number hands a slot from
// producer to consumer) with a mutex-protected overflow queue used only while
// the ring is full. Why not a Chase-Lev deque per row (Taskflow's wsq)?
// (1) The paper's cells are FIFO and the depth columns need one queue per
// class; a deque per row would give LIFO owner pops and lose the column
// order. (2) Rows are multi-producer: submit() and retiring workers push into
// any row, which a single-owner deque cannot take. (3) The owner's hot path
// cost is the same either way (Chase-Lev pop needs a full fence, Vyukov a
// CAS), and the DSE's local cache of ready children (dse.hpp) keeps most
// traffic off the pool anyway, so the pool's cost is paid once per spilled
// batch, not once per node.
//
// Finding work fast. Each row keeps a 64-bit "maybe non-empty" bitmap, one bit
// per cell ordered by priority; pop() takes the lowest set bit (count trailing
// zeros), and idle thieves read one word per row. Bits are hints kept
// conservative: a pusher sets the bit after publishing, a popper that finds
// the cell empty clears it and re-checks, restoring it if an entry arrived
// (see the memory_order notes in ready_pool.cpp).
//
// Rows can be added while the pool is in use (the executor's add_workers), up
// to max_rows; rows are never removed, a retired worker's row is drained by
// stealing.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "scheduler/request.hpp"

namespace tessera::scheduler {

struct ReadyEntry {
  Request* request = nullptr;
  int32_t node = 0;
};

// Priority policy H(k) of ASPEN §3.3 with k = node depth: shallower depth maps
// to a smaller column, which pop() visits first. Log-scaled so shallow depths
// get fine classes while any depth still fits in a bounded number of columns.
// Monotone non-decreasing in depth; result in [0, columns).
int32_t column_for_depth(int32_t depth, int32_t columns);

// Co-execution priority: which band a request's nodes go to; a higher band is
// popped first. Negative priorities -> 0, priority 0 (the default) -> 1,
// priority p > 0 -> min(1 + p, bands - 1). With one band everything shares it.
int32_t band_for_priority(int32_t priority, int32_t bands);

// The pool's scheduling policy, as plain function pointers (no virtual call,
// one indirect call per pushed entry).
struct ColumnPolicy {
  int32_t (*depth_to_column)(int32_t depth, int32_t columns) = &column_for_depth;
  int32_t (*priority_to_band)(int32_t priority, int32_t bands) = &band_for_priority;
};

class ReadyPool {
 public:
  static constexpr int32_t kDefaultColumns = 16;
  static constexpr int32_t kDefaultBands = 4;
  // The band priority 0 maps to with band_for_priority; bands above it are
  // "urgent" (see urgent_pending()).
  static constexpr int32_t kDefaultPriorityBand = 1;
  static constexpr int32_t kMaxCellsPerRow = 64;  // one bit each in the row's bitmap
  static constexpr int32_t kCellCapacity = 128;   // ring slots per cell (power of two)

  // `rows` rows are usable at once; add_rows() can grow to `max_rows` (0: rows).
  // bands * columns must be <= kMaxCellsPerRow.
  explicit ReadyPool(int32_t rows, int32_t columns = kDefaultColumns, int32_t bands = kDefaultBands,
                     int32_t max_rows = 0, ColumnPolicy policy = {});
  ~ReadyPool();
  ReadyPool(const ReadyPool&) = delete;
  ReadyPool& operator=(const ReadyPool&) = delete;

  // Number of usable rows (grows with add_rows, never shrinks).
  int32_t rows() const { return row_count_.load(std::memory_order_acquire); }
  int32_t max_rows() const { return max_rows_; }
  int32_t columns() const { return columns_; }
  int32_t bands() const { return bands_; }
  const ColumnPolicy& policy() const { return policy_; }

  // Makes rows [0, count) usable (count <= max_rows). Not thread-safe against
  // itself: one caller at a time (the executor's control lock); safe against
  // concurrent push/pop.
  void add_rows(int32_t count);

  // Pushes ready nodes into `row` (ASPEN §3.3 batches a DSE's pushes); each goes
  // to the cell of its request's band and its depth's column
  // (request->graph().depths, column 0 if absent). Runs of entries with the
  // same cell cost one CAS.
  void push_batch(int32_t row, std::span<const ReadyEntry> entries);
  void push(int32_t row, const ReadyEntry& entry) { push_batch(row, {&entry, 1}); }

  // Takes one entry: own row by priority (band, then column) order, then the
  // other rows in turn starting after `row`. Empty optional when every cell
  // looked empty (an entry being published concurrently may be missed; its
  // pusher wakes a worker afterwards).
  std::optional<ReadyEntry> pop(int32_t row);

  // Whether entries of a band above kDefaultPriorityBand are queued (relaxed:
  // a scheduling hint for DSEs deciding whether to leave their current path).
  bool urgent_pending() const { return urgent_count_.load(std::memory_order_relaxed) > 0; }

  // Whether the pool held nothing at the moment of the (sequentially
  // consistent) reads of the bitmaps and cells. Exact only when no one is
  // pushing; the executor's parking protocol relies on the seq_cst ordering.
  bool empty() const;
  // Number of entries, same caveat as empty().
  int64_t size() const;
  // Whether any row's bitmap has a bit set (relaxed loads of one word per
  // row): a cheap hint for polling, never the proof empty() gives.
  bool maybe_nonempty() const;

 private:
  struct Cell;
  struct Row;

  int32_t cell_index(const ReadyEntry& entry) const;
  bool cell_nonempty(const Cell& cell) const;
  std::optional<ReadyEntry> pop_from_row(Row& row, uint64_t cell_mask);
  // Cells [0, urgent_cells()) of a row hold bands above the default one.
  int32_t urgent_cells() const {
    return std::max(0, (bands_ - 1 - kDefaultPriorityBand) * columns_);
  }

  int32_t columns_;
  int32_t bands_;
  int32_t cells_per_row_;
  int32_t max_rows_;
  ColumnPolicy policy_;
  std::unique_ptr<std::unique_ptr<Row>[]> rows_;  // [max_rows_], [0, row_count_) allocated
  std::atomic<int32_t> row_count_{0};
  // Entries queued in bands above the default one; written only by urgent
  // traffic, so default-priority work never touches this line.
  alignas(64) std::atomic<int64_t> urgent_count_{0};
};

}  // namespace tessera::scheduler
