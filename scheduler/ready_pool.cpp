#include "scheduler/ready_pool.hpp"

#include <algorithm>
#include <bit>

#include "graph/error.hpp"

namespace tessera::scheduler {

namespace {
// Destructive-interference size; hard-coded because GCC warns when
// std::hardware_destructive_interference_size is used in headers/ABI.
constexpr size_t kCacheLine = 64;
}  // namespace

struct alignas(kCacheLine) ReadyPool::Cell {
  std::mutex mutex;
  std::deque<ReadyEntry> entries;
  // Mirrors entries.size(); read without the lock to skip empty cells.
  std::atomic<int64_t> count{0};
};

struct alignas(kCacheLine) ReadyPool::RowCount {
  std::atomic<int64_t> value{0};
};

int32_t column_for_depth(int32_t depth, int32_t columns) {
  if (depth <= 0 || columns <= 1) return 0;
  // depth 0 -> 0, 1 -> 1, 2..3 -> 2, 4..7 -> 3, ...
  const auto column = static_cast<int32_t>(std::bit_width(static_cast<uint32_t>(depth)));
  return std::min(column, columns - 1);
}

ReadyPool::ReadyPool(int32_t rows, int32_t columns) : rows_(rows), columns_(columns) {
  if (rows < 1 || columns < 1) {
    throw Error("ReadyPool needs at least one row and one column (got " + std::to_string(rows) +
                " x " + std::to_string(columns) + ")");
  }
  cells_ = std::make_unique<Cell[]>(static_cast<size_t>(rows) * static_cast<size_t>(columns));
  row_counts_ = std::make_unique<RowCount[]>(static_cast<size_t>(rows));
}

ReadyPool::~ReadyPool() = default;

ReadyPool::Cell& ReadyPool::cell(int32_t row, int32_t column) {
  return cells_[static_cast<size_t>(row) * static_cast<size_t>(columns_) +
                static_cast<size_t>(column)];
}

void ReadyPool::push_batch(int32_t row, std::span<const ReadyEntry> entries) {
  // Group consecutive entries of the same column under one lock: children of
  // one node usually share a depth.
  size_t begin = 0;
  while (begin < entries.size()) {
    const auto column_of = [this](const ReadyEntry& entry) {
      const int32_t* depths = entry.request->graph().depths;
      return depths ? column_for_depth(depths[entry.node], columns_) : 0;
    };
    const int32_t column = column_of(entries[begin]);
    size_t end = begin + 1;
    while (end < entries.size() && column_of(entries[end]) == column) ++end;
    const auto added = static_cast<int64_t>(end - begin);
    Cell& target = cell(row, column);
    {
      std::lock_guard lock(target.mutex);
      target.entries.insert(target.entries.end(), entries.begin() + static_cast<ptrdiff_t>(begin),
                            entries.begin() + static_cast<ptrdiff_t>(end));
      target.count.fetch_add(added, std::memory_order_relaxed);
      // seq_cst: pairs with the parked-count handshake in the executor (a
      // pusher that sees no parked worker relies on the worker seeing this).
      row_counts_[static_cast<size_t>(row)].value.fetch_add(added, std::memory_order_seq_cst);
    }
    begin = end;
  }
}

std::optional<ReadyEntry> ReadyPool::pop_from_row(int32_t row) {
  if (row_counts_[static_cast<size_t>(row)].value.load(std::memory_order_relaxed) == 0) {
    return std::nullopt;
  }
  for (int32_t column = 0; column < columns_; ++column) {
    Cell& source = cell(row, column);
    if (source.count.load(std::memory_order_relaxed) == 0) continue;
    std::lock_guard lock(source.mutex);
    if (source.entries.empty()) continue;
    const ReadyEntry entry = source.entries.front();
    source.entries.pop_front();
    source.count.fetch_sub(1, std::memory_order_relaxed);
    row_counts_[static_cast<size_t>(row)].value.fetch_sub(1, std::memory_order_relaxed);
    return entry;
  }
  return std::nullopt;
}

std::optional<ReadyEntry> ReadyPool::pop(int32_t row) {
  // Own row first (ASPEN §3.3: data reuse), then steal from the others.
  for (int32_t step = 0; step < rows_; ++step) {
    const int32_t victim = (row + step) % rows_;
    if (auto entry = pop_from_row(victim)) return entry;
  }
  return std::nullopt;
}

bool ReadyPool::empty() const {
  for (int32_t row = 0; row < rows_; ++row) {
    if (row_counts_[static_cast<size_t>(row)].value.load(std::memory_order_seq_cst) != 0) {
      return false;
    }
  }
  return true;
}

int64_t ReadyPool::size() const {
  int64_t total = 0;
  for (int32_t row = 0; row < rows_; ++row) {
    total += row_counts_[static_cast<size_t>(row)].value.load(std::memory_order_seq_cst);
  }
  return total;
}

}  // namespace tessera::scheduler
