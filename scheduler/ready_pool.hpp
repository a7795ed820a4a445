#pragma once
// The Ready Pool (ASPEN §3.3): a matrix of concurrent FIFO queues. Each DSE owns
// a row; the column is a priority class derived from the node's depth so that
// pop() prefers shallow nodes, which lets DSEs follow longer paths. pop() scans
// the caller's own row first (data reuse) and steals from other rows when it is
// empty (load balancing).
//
// First version: every cell is a mutex-protected deque. Per-row and per-cell
// atomic counts let scans of empty rows and cells skip the locks, so idle
// workers polling the pool touch only shared-read cache lines.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

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

class ReadyPool {
 public:
  static constexpr int32_t kDefaultColumns = 16;

  explicit ReadyPool(int32_t rows, int32_t columns = kDefaultColumns);
  ~ReadyPool();
  ReadyPool(const ReadyPool&) = delete;
  ReadyPool& operator=(const ReadyPool&) = delete;

  int32_t rows() const { return rows_; }
  int32_t columns() const { return columns_; }

  // Pushes ready nodes into `row` (ASPEN §3.3 batches a DSE's pushes); each goes
  // to the column of its depth (request->graph().depths, column 0 if absent).
  void push_batch(int32_t row, std::span<const ReadyEntry> entries);
  void push(int32_t row, const ReadyEntry& entry) { push_batch(row, {&entry, 1}); }

  // Takes one entry: own row by column (priority) order, then the other rows in
  // turn starting after `row`. Empty optional when every cell looked empty.
  std::optional<ReadyEntry> pop(int32_t row);

  // Whether the pool held nothing at the moment of the (sequentially
  // consistent) reads of the row counts. Exact only when no one is pushing;
  // the executor's parking protocol relies on the seq_cst ordering.
  bool empty() const;
  // Number of entries, same caveat as empty().
  int64_t size() const;

 private:
  struct Cell;
  struct RowCount;

  Cell& cell(int32_t row, int32_t column);
  std::optional<ReadyEntry> pop_from_row(int32_t row);

  int32_t rows_;
  int32_t columns_;
  std::unique_ptr<Cell[]> cells_;           // [rows_ * columns_], row-major
  std::unique_ptr<RowCount[]> row_counts_;  // [rows_]
};

}  // namespace tessera::scheduler
