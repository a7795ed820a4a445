#include "scheduler/ready_pool.hpp"

#include <algorithm>
#include <bit>
#include <deque>
#include <mutex>
#include <string>

#include "graph/error.hpp"

namespace tessera::scheduler {

namespace {
// Destructive-interference size; hard-coded because GCC warns when
// std::hardware_destructive_interference_size is used in headers/ABI.
constexpr size_t kCacheLine = 64;
constexpr uint64_t kSlotMask = ReadyPool::kCellCapacity - 1;
static_assert(std::has_single_bit(static_cast<uint32_t>(ReadyPool::kCellCapacity)));

// One ring slot. `sequence` hands the slot over (Vyukov's bounded MPMC queue):
// == position: free for the producer of that position; == position + 1:
// holds that position's entry, ready for its consumer.
struct Slot {
  std::atomic<uint64_t> sequence{0};
  ReadyEntry entry;
};
}  // namespace

// The producer and consumer indices sit on separate cache lines: the owner
// pushing a batch and a thief popping the same cell would otherwise
// invalidate each other's line on every operation (false sharing).
struct alignas(kCacheLine) ReadyPool::Cell {
  alignas(kCacheLine) std::atomic<uint64_t> tail{0};  // next position to push
  alignas(kCacheLine) std::atomic<uint64_t> head{0};  // next position to pop
  // Cold line: the slot array pointer is read-only after construction and the
  // overflow is touched only while the ring is full.
  alignas(kCacheLine) std::unique_ptr<Slot[]> slots;
  std::atomic<int64_t> overflow_count{0};
  std::mutex overflow_mutex;
  std::deque<ReadyEntry> overflow;

  Cell() : slots(std::make_unique<Slot[]>(kCellCapacity)) {
    for (uint64_t i = 0; i < kCellCapacity; ++i)
      slots[i].sequence.store(i, std::memory_order_relaxed);
  }
  Slot& slot(uint64_t position) { return slots[position & kSlotMask]; }

  // Pushes a prefix of `run` into the ring, claiming consecutive slots with
  // one CAS per chunk; returns how many it pushed (fewer when the ring fills).
  size_t ring_push(std::span<const ReadyEntry> run) {
    size_t pushed = 0;
    while (pushed < run.size()) {
      uint64_t position = tail.load(std::memory_order_relaxed);
      size_t claimed = 0;
      while (true) {
        const size_t wanted = std::min<size_t>(run.size() - pushed, kCellCapacity);
        claimed = 0;
        bool stale = false;
        for (; claimed < wanted; ++claimed) {
          // acquire: pairs with the consumer's release that freed this slot,
          // so our entry write below cannot race with its read of the old one.
          const uint64_t sequence =
              slot(position + claimed).sequence.load(std::memory_order_acquire);
          const auto lag = static_cast<int64_t>(sequence - (position + claimed));
          if (lag == 0) continue;  // free for this position
          stale = lag > 0;         // > 0: another producer took it, `position` is old
          break;                   // < 0: still full from the previous lap
        }
        if (stale) {
          position = tail.load(std::memory_order_relaxed);
          continue;
        }
        if (claimed == 0) return pushed;  // ring full
        // seq_cst: this store of the new tail must precede, in the single total
        // order, the pusher's later read of the row bitmap and of the parked
        // count (see push_batch and the executor's parking handshake). On x86
        // it is the same locked cmpxchg as a relaxed CAS.
        if (tail.compare_exchange_weak(position, position + claimed, std::memory_order_seq_cst,
                                       std::memory_order_relaxed)) {
          break;
        }
      }
      for (size_t i = 0; i < claimed; ++i) {
        Slot& target = slot(position + i);
        target.entry = run[pushed + i];
        // release: publishes the entry to the consumer that acquires the sequence.
        target.sequence.store(position + i + 1, std::memory_order_release);
      }
      pushed += claimed;
    }
    return pushed;
  }

  bool ring_pop(ReadyEntry& out) {
    uint64_t position = head.load(std::memory_order_relaxed);
    while (true) {
      Slot& source = slot(position);
      // acquire: pairs with the producer's release, making its entry visible.
      const uint64_t sequence = source.sequence.load(std::memory_order_acquire);
      const auto lag = static_cast<int64_t>(sequence - (position + 1));
      if (lag == 0) {
        // relaxed: the CAS only elects the one consumer of `position`; the
        // entry's visibility comes from the sequence acquire above.
        if (head.compare_exchange_weak(position, position + 1, std::memory_order_relaxed,
                                       std::memory_order_relaxed)) {
          out = source.entry;
          // release: our read of the entry happens before the next lap's
          // producer (which acquires the sequence) overwrites it.
          source.sequence.store(position + kCellCapacity, std::memory_order_release);
          return true;
        }
      } else if (lag < 0) {
        return false;  // empty, or the producer of `position` has not published yet
      } else {
        position = head.load(std::memory_order_relaxed);  // another consumer took it
      }
    }
  }

  bool overflow_pop(ReadyEntry& out) {
    // relaxed: a hint to skip the lock; the mutex orders the deque itself.
    if (overflow_count.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(overflow_mutex);
    if (overflow.empty()) return false;
    out = overflow.front();
    overflow.pop_front();
    overflow_count.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
};

// The bitmap is alone on its line: every thief reads it on every pop attempt,
// while the cells' indices are written by pushes and pops.
struct alignas(kCacheLine) ReadyPool::Row {
  std::atomic<uint64_t> maybe_nonempty{0};  // bit i: cell i may hold entries
  std::unique_ptr<Cell[]> cells;

  explicit Row(int32_t cell_count)
      : cells(std::make_unique<Cell[]>(static_cast<size_t>(cell_count))) {}
};

int32_t column_for_depth(int32_t depth, int32_t columns) {
  if (depth <= 0 || columns <= 1) return 0;
  // depth 0 -> 0, 1 -> 1, 2..3 -> 2, 4..7 -> 3, ...
  const auto column = static_cast<int32_t>(std::bit_width(static_cast<uint32_t>(depth)));
  return std::min(column, columns - 1);
}

int32_t band_for_priority(int32_t priority, int32_t bands) {
  if (bands <= 1) return 0;
  if (priority < 0) return 0;
  if (priority == 0) return 1;
  return static_cast<int32_t>(std::min<int64_t>(int64_t{1} + priority, bands - 1));
}

ReadyPool::ReadyPool(int32_t rows, int32_t columns, int32_t bands, int32_t max_rows,
                     ColumnPolicy policy)
    : columns_(columns),
      bands_(bands),
      cells_per_row_(columns * bands),
      max_rows_(max_rows == 0 ? rows : max_rows),
      policy_(policy) {
  if (rows < 1 || columns < 1 || bands < 1 || max_rows_ < rows) {
    throw Error("ReadyPool needs at least one row, column and band and max_rows >= rows (got " +
                std::to_string(rows) + " rows (max " + std::to_string(max_rows) + ") x " +
                std::to_string(columns) + " columns x " + std::to_string(bands) + " bands)");
  }
  if (int64_t{columns} * bands > kMaxCellsPerRow) {
    throw Error("ReadyPool rows hold at most " + std::to_string(kMaxCellsPerRow) +
                " cells (columns x bands), got " + std::to_string(columns) + " x " +
                std::to_string(bands));
  }
  if (!policy_.depth_to_column || !policy_.priority_to_band) {
    throw Error("ReadyPool ColumnPolicy needs both functions");
  }
  rows_ = std::make_unique<std::unique_ptr<Row>[]>(static_cast<size_t>(max_rows_));
  add_rows(rows);
}

ReadyPool::~ReadyPool() = default;

void ReadyPool::add_rows(int32_t count) {
  if (count > max_rows_) {
    throw Error("ReadyPool::add_rows: " + std::to_string(count) + " rows exceed max_rows " +
                std::to_string(max_rows_));
  }
  const int32_t current = row_count_.load(std::memory_order_relaxed);
  for (int32_t row = current; row < count; ++row) {
    rows_[static_cast<size_t>(row)] = std::make_unique<Row>(cells_per_row_);
  }
  // release: a reader that sees the new count (acquire in rows()) sees the rows.
  if (count > current) row_count_.store(count, std::memory_order_release);
}

int32_t ReadyPool::cell_index(const ReadyEntry& entry) const {
  const Request& request = *entry.request;
  const int32_t* depths = request.graph().depths;
  const int32_t column = depths ? policy_.depth_to_column(depths[entry.node], columns_) : 0;
  const int32_t band = policy_.priority_to_band(request.priority(), bands_);
  // Highest band first, then shallowest column: the lowest bit is the most urgent.
  return (bands_ - 1 - band) * columns_ + column;
}

bool ReadyPool::cell_nonempty(const Cell& cell) const {
  // seq_cst: the re-check half of the bitmap handshake (see push_batch). Head
  // first, so a concurrent pop can only make us answer "non-empty" wrongly,
  // which is the safe direction.
  const uint64_t head = cell.head.load(std::memory_order_seq_cst);
  const uint64_t tail = cell.tail.load(std::memory_order_seq_cst);
  return tail != head || cell.overflow_count.load(std::memory_order_seq_cst) > 0;
}

void ReadyPool::push_batch(int32_t row_index, std::span<const ReadyEntry> entries) {
  Row& row = *rows_[static_cast<size_t>(row_index)];
  const int32_t first_urgent_index = urgent_cells();
  size_t begin = 0;
  while (begin < entries.size()) {
    // Children of one node usually share a cell: one run, one CAS.
    const int32_t index = cell_index(entries[begin]);
    size_t end = begin + 1;
    while (end < entries.size() && cell_index(entries[end]) == index) ++end;
    const std::span<const ReadyEntry> run = entries.subspan(begin, end - begin);
    Cell& cell = row.cells[static_cast<size_t>(index)];
    if (index < first_urgent_index) {
      urgent_count_.fetch_add(static_cast<int64_t>(run.size()), std::memory_order_relaxed);
    }
    // FIFO per producer: once something overflowed, later entries queue behind
    // it until a consumer empties the overflow (relaxed: we read our own write).
    size_t pushed = 0;
    if (cell.overflow_count.load(std::memory_order_relaxed) == 0) pushed = cell.ring_push(run);
    if (pushed < run.size()) {
      std::lock_guard lock(cell.overflow_mutex);
      cell.overflow.insert(cell.overflow.end(), run.begin() + static_cast<ptrdiff_t>(pushed),
                           run.end());
      // seq_cst: like the ring's tail CAS, precedes our bitmap read below.
      cell.overflow_count.fetch_add(static_cast<int64_t>(run.size() - pushed),
                                    std::memory_order_seq_cst);
    }
    // Bitmap handshake. Pusher: publish (seq_cst tail CAS / overflow count),
    // then read the bit (seq_cst) and set it if clear. Popper that found the
    // cell empty: clear the bit (seq_cst RMW), then re-read the cell (seq_cst).
    // If our read saw the bit set, it precedes any later clear in the total
    // order, so that clearer's re-check sees our entry and sets the bit again;
    // either way a set bit covers the entry or an active popper holds it.
    const uint64_t bit = uint64_t{1} << index;
    if ((row.maybe_nonempty.load(std::memory_order_seq_cst) & bit) == 0) {
      row.maybe_nonempty.fetch_or(bit, std::memory_order_seq_cst);
    }
    begin = end;
  }
}

std::optional<ReadyEntry> ReadyPool::pop_from_row(Row& row, uint64_t cell_mask) {
  const int32_t first_urgent_index = urgent_cells();
  // relaxed: a hint; entry visibility comes from the slot sequence acquire.
  uint64_t bits = row.maybe_nonempty.load(std::memory_order_relaxed) & cell_mask;
  bool rechecked = false;
  while (bits != 0) {
    const int index = std::countr_zero(bits);
    Cell& cell = row.cells[static_cast<size_t>(index)];
    ReadyEntry entry;
    if (cell.ring_pop(entry) || cell.overflow_pop(entry)) {
      if (index < first_urgent_index) urgent_count_.fetch_sub(1, std::memory_order_relaxed);
      return entry;
    }
    const uint64_t bit = uint64_t{1} << index;
    if (!rechecked) {
      // Clear the hint, then re-check (see push_batch for the handshake).
      row.maybe_nonempty.fetch_and(~bit, std::memory_order_seq_cst);
      if (cell_nonempty(cell)) {
        row.maybe_nonempty.fetch_or(bit, std::memory_order_seq_cst);
        rechecked = true;  // try this cell once more: an entry is being published
        continue;
      }
    }
    rechecked = false;
    bits &= ~bit;
  }
  return std::nullopt;
}

std::optional<ReadyEntry> ReadyPool::pop(int32_t row) {
  const int32_t row_count = rows();
  // Priority across rows: each band above the default, highest first, is
  // taken from every row before anything lower (own row first within a band).
  if (urgent_pending()) {
    const uint64_t band_mask = (uint64_t{1} << columns_) - 1;  // columns_ < 64 here
    for (int32_t cell = 0; cell < urgent_cells(); cell += columns_) {
      for (int32_t step = 0; step < row_count; ++step) {
        const int32_t victim = (row + step) % row_count;
        if (auto entry = pop_from_row(*rows_[static_cast<size_t>(victim)], band_mask << cell)) {
          return entry;
        }
      }
    }
  }
  // Own row first (ASPEN §3.3: data reuse), then steal from the others.
  for (int32_t step = 0; step < row_count; ++step) {
    const int32_t victim = (row + step) % row_count;
    if (auto entry = pop_from_row(*rows_[static_cast<size_t>(victim)], ~uint64_t{0})) {
      return entry;
    }
  }
  return std::nullopt;
}

bool ReadyPool::empty() const {
  const int32_t row_count = rows();
  for (int32_t r = 0; r < row_count; ++r) {
    const Row& row = *rows_[static_cast<size_t>(r)];
    for (uint64_t bits = row.maybe_nonempty.load(std::memory_order_seq_cst); bits != 0;
         bits &= bits - 1) {
      if (cell_nonempty(row.cells[static_cast<size_t>(std::countr_zero(bits))])) return false;
    }
  }
  return true;
}

bool ReadyPool::maybe_nonempty() const {
  const int32_t row_count = rows();
  for (int32_t r = 0; r < row_count; ++r) {
    // relaxed: a hint; pop() and the parking handshake do the ordered reads.
    if (rows_[static_cast<size_t>(r)]->maybe_nonempty.load(std::memory_order_relaxed) != 0)
      return true;
  }
  return false;
}

int64_t ReadyPool::size() const {
  int64_t total = 0;
  const int32_t row_count = rows();
  for (int32_t r = 0; r < row_count; ++r) {
    const Row& row = *rows_[static_cast<size_t>(r)];
    for (int32_t c = 0; c < cells_per_row_; ++c) {
      const Cell& cell = row.cells[static_cast<size_t>(c)];
      const uint64_t head = cell.head.load(std::memory_order_seq_cst);  // head first: tail >= head
      const uint64_t tail = cell.tail.load(std::memory_order_seq_cst);
      total +=
          static_cast<int64_t>(tail - head) + cell.overflow_count.load(std::memory_order_seq_cst);
    }
  }
  return total;
}

}  // namespace tessera::scheduler
