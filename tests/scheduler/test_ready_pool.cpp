// ReadyPool (ASPEN §3.3): priority order within a row, stealing, and that
// under concurrent producers/consumers every entry comes out exactly once.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "scheduler/ready_pool.hpp"
#include "test_support.hpp"

namespace {

using tessera::scheduler::column_for_depth;
using tessera::scheduler::GraphView;
using tessera::scheduler::ReadyEntry;
using tessera::scheduler::ReadyPool;
using tessera::scheduler::Request;

using tessera::test::seed_for;
using tessera::test::test_scale;

// The pool only reads graph().depths; the rest of the graph is irrelevant here.
struct DepthOnlyRequest final : Request {
  explicit DepthOnlyRequest(const std::vector<int32_t>& depths)
      : Request(GraphView{static_cast<int32_t>(depths.size()), nullptr, nullptr, nullptr,
                          depths.data(), nullptr, 0}) {}
  void execute_node(int32_t) noexcept override {}
  void on_complete() noexcept override {}
};

std::vector<int32_t> drain(ReadyPool& pool, int32_t row, const Request* expected_request) {
  std::vector<int32_t> nodes;
  while (auto entry = pool.pop(row)) {
    CHECK(entry->request == expected_request);
    nodes.push_back(entry->node);
  }
  return nodes;
}

}  // namespace

TEST_CASE("column_for_depth: in range, monotone, shallow before deep") {
  for (int32_t columns : {1, 2, 3, 7, 16}) {
    int32_t previous = 0;
    for (int32_t depth = 0; depth < 200000; depth += (depth < 1000 ? 1 : 997)) {
      const int32_t column = column_for_depth(depth, columns);
      REQUIRE(column >= 0);
      REQUIRE(column < columns);
      REQUIRE(column >= previous);
      previous = column;
    }
    CHECK(column_for_depth(0, columns) == 0);
    CHECK(column_for_depth(1 << 30, columns) == columns - 1);
    if (columns > 1) CHECK(column_for_depth(1, columns) > column_for_depth(0, columns));
  }
}

TEST_CASE("pop: shallow depths first, FIFO within a priority class") {
  std::mt19937_64 rng(seed_for("priority order"));
  for (int round = 0; round < 50; ++round) {
    const int32_t columns = std::uniform_int_distribution<int32_t>(1, 16)(rng);
    const int32_t rows = std::uniform_int_distribution<int32_t>(1, 5)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 500)(rng);
    std::vector<int32_t> depths(static_cast<size_t>(count));
    const int32_t max_depth = std::uniform_int_distribution<int32_t>(0, 3000)(rng);
    for (int32_t& depth : depths) {
      depth = std::uniform_int_distribution<int32_t>(0, max_depth)(rng);
    }
    DepthOnlyRequest request(depths);
    ReadyPool pool(rows, columns);
    const int32_t row = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
    // Push nodes in a random order, in random-sized batches.
    std::vector<int32_t> push_order(static_cast<size_t>(count));
    std::iota(push_order.begin(), push_order.end(), 0);
    std::shuffle(push_order.begin(), push_order.end(), rng);
    std::vector<ReadyEntry> batch;
    for (size_t i = 0; i < push_order.size();) {
      const size_t size = std::uniform_int_distribution<size_t>(1, 9)(rng);
      batch.clear();
      for (size_t j = i; j < std::min(push_order.size(), i + size); ++j) {
        batch.push_back({&request, push_order[j]});
      }
      pool.push_batch(row, batch);
      i += batch.size();
    }
    CHECK(pool.size() == count);
    // Gold: stable sort of the push order by priority class.
    std::vector<int32_t> expected = push_order;
    std::stable_sort(expected.begin(), expected.end(), [&](int32_t a, int32_t b) {
      return column_for_depth(depths[static_cast<size_t>(a)], columns) <
             column_for_depth(depths[static_cast<size_t>(b)], columns);
    });
    // Pop from some row: its own row or by stealing, the order is the same.
    const int32_t pop_row = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
    CHECK(drain(pool, pop_row, &request) == expected);
    CHECK(pool.empty());
  }
}

TEST_CASE("pop: depths in distinct classes come out sorted by depth") {
  // Independent of the exact hash: depths 0, 1, 2, 4, ... differ in log2 and
  // must leave in increasing depth whatever order they went in.
  std::vector<int32_t> depths = {1024, 0, 64, 2, 8, 1, 256, 4, 16, 32, 128, 512};
  DepthOnlyRequest request(depths);
  ReadyPool pool(2, 16);
  for (int32_t node = 0; node < static_cast<int32_t>(depths.size()); ++node) {
    pool.push(1, {&request, node});
  }
  int32_t previous_depth = -1;
  while (auto entry = pool.pop(1)) {
    CHECK(depths[static_cast<size_t>(entry->node)] > previous_depth);
    previous_depth = depths[static_cast<size_t>(entry->node)];
  }
  CHECK(previous_depth == 1024);
}

TEST_CASE("pop: own row first, then steals from the other rows") {
  std::vector<int32_t> depths = {5000, 0, 7, 3};
  DepthOnlyRequest request(depths);
  ReadyPool pool(4, 8);
  CHECK(pool.empty());
  CHECK_FALSE(pool.pop(0).has_value());
  pool.push(0, {&request, 0});  // deep, own row of 0
  pool.push(2, {&request, 1});  // shallow, row 2
  CHECK_FALSE(pool.empty());
  CHECK(pool.size() == 2);
  // Row 0 prefers its own deep node over the shallower one of row 2.
  auto first = pool.pop(0);
  REQUIRE(first.has_value());
  CHECK(first->node == 0);
  auto stolen = pool.pop(0);
  REQUIRE(stolen.has_value());
  CHECK(stolen->node == 1);
  CHECK_FALSE(pool.pop(0).has_value());
  CHECK(pool.empty());
  // The polling hint: set by a push into any row, cleared by the pop that
  // finds the cells empty.
  CHECK_FALSE(pool.maybe_nonempty());
  pool.push(3, {&request, 2});
  CHECK(pool.maybe_nonempty());
  REQUIRE(pool.pop(1).has_value());
  CHECK_FALSE(pool.pop(1).has_value());
  CHECK_FALSE(pool.maybe_nonempty());
  // Every row can steal from every other row.
  for (int32_t owner = 0; owner < 4; ++owner) {
    for (int32_t thief = 0; thief < 4; ++thief) {
      pool.push(owner, {&request, 2 + (owner + thief) % 2});
      auto entry = pool.pop(thief);
      REQUIRE(entry.has_value());
      CHECK(entry->node == 2 + (owner + thief) % 2);
      CHECK(pool.empty());
    }
  }
}

TEST_CASE("concurrent producers and consumers: every entry popped exactly once") {
  const uint64_t seed = seed_for("concurrent pool");
  const double scale = test_scale();
  struct Config {
    int32_t rows, columns, producers, consumers;
  };
  for (const Config config : {Config{1, 1, 1, 1}, Config{2, 16, 2, 2}, Config{3, 4, 4, 3},
                              Config{8, 16, 3, 8}, Config{5, 2, 1, 6}, Config{4, 16, 6, 1}}) {
    CAPTURE(config.rows);
    CAPTURE(config.producers);
    CAPTURE(config.consumers);
    const auto per_producer = static_cast<int32_t>(std::max(100.0, 60000.0 * scale));
    const int32_t total = per_producer * config.producers;
    std::vector<int32_t> depths(static_cast<size_t>(total));
    std::mt19937_64 depth_rng(seed);
    for (int32_t& depth : depths) depth = std::uniform_int_distribution<int32_t>(0, 100)(depth_rng);
    DepthOnlyRequest request(depths);
    ReadyPool pool(config.rows, config.columns);
    std::atomic<int32_t> producers_done{0};
    std::vector<std::vector<int32_t>> popped(static_cast<size_t>(config.consumers));
    std::atomic<int64_t> wrong_request{0};
    std::vector<std::thread> threads;
    for (int32_t p = 0; p < config.producers; ++p) {
      threads.emplace_back([&, p] {
        std::mt19937_64 rng(seed + 1000 + static_cast<uint64_t>(p));
        std::vector<ReadyEntry> batch;
        for (int32_t i = 0; i < per_producer;) {
          const int32_t size = std::uniform_int_distribution<int32_t>(1, 17)(rng);
          batch.clear();
          for (int32_t j = i; j < std::min(per_producer, i + size); ++j) {
            batch.push_back({&request, p * per_producer + j});
          }
          const int32_t row = std::uniform_int_distribution<int32_t>(0, config.rows - 1)(rng);
          pool.push_batch(row, batch);
          i += static_cast<int32_t>(batch.size());
        }
        producers_done.fetch_add(1, std::memory_order_release);
      });
    }
    for (int32_t c = 0; c < config.consumers; ++c) {
      threads.emplace_back([&, c] {
        const int32_t row = c % config.rows;
        std::vector<int32_t>& mine = popped[static_cast<size_t>(c)];
        while (true) {
          const bool finished = producers_done.load(std::memory_order_acquire) == config.producers;
          auto entry = pool.pop(row);
          if (!entry) {
            if (finished) break;  // nothing left and nothing more will come
            std::this_thread::yield();
            continue;
          }
          if (entry->request != &request) wrong_request.fetch_add(1);
          mine.push_back(entry->node);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(wrong_request.load() == 0);
    std::vector<int32_t> all;
    for (const auto& part : popped) all.insert(all.end(), part.begin(), part.end());
    std::sort(all.begin(), all.end());
    std::vector<int32_t> gold(static_cast<size_t>(total));
    std::iota(gold.begin(), gold.end(), 0);
    CHECK(all.size() == gold.size());
    CHECK(all == gold);
    CHECK(pool.empty());
    CHECK(pool.size() == 0);
  }
}

TEST_CASE("concurrent DSE-like threads that pop and push back: nothing lost or duplicated") {
  // Each thread pops an entry and, for a node below `levels`, pushes its two
  // "children" (a binary tree), like DSEs feeding each other through the pool.
  const uint64_t seed = seed_for("pop-and-push");
  const int32_t levels = test_scale() < 0.5 ? 14 : 17;
  const int32_t total = (1 << levels) - 1;  // heap-numbered binary tree
  std::vector<int32_t> depths(static_cast<size_t>(total));
  for (int32_t node = 0; node < total; ++node) {
    depths[static_cast<size_t>(node)] = std::bit_width(static_cast<uint32_t>(node + 1)) - 1;
  }
  DepthOnlyRequest request(depths);
  for (int32_t threads_count : {1, 2, 5}) {
    ReadyPool pool(threads_count);
    pool.push(0, {&request, 0});
    std::atomic<int32_t> popped_count{0};
    std::vector<std::vector<int32_t>> popped(static_cast<size_t>(threads_count));
    std::vector<std::thread> threads;
    for (int32_t t = 0; t < threads_count; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
        std::vector<ReadyEntry> children;
        while (popped_count.load(std::memory_order_acquire) < total) {
          auto entry = pool.pop(t);
          if (!entry) {
            std::this_thread::yield();
            continue;
          }
          popped[static_cast<size_t>(t)].push_back(entry->node);
          children.clear();
          for (int32_t child : {2 * entry->node + 1, 2 * entry->node + 2}) {
            if (child < total) children.push_back({&request, child});
          }
          if (!children.empty()) {
            pool.push_batch(std::uniform_int_distribution<int32_t>(0, threads_count - 1)(rng),
                            children);
          }
          popped_count.fetch_add(1, std::memory_order_release);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    std::vector<int32_t> all;
    for (const auto& part : popped) all.insert(all.end(), part.begin(), part.end());
    std::sort(all.begin(), all.end());
    std::vector<int32_t> gold(static_cast<size_t>(total));
    std::iota(gold.begin(), gold.end(), 0);
    CHECK(all == gold);
    CHECK(pool.empty());
  }
}

TEST_CASE("one consumer sees each producer's entries of one class in push order (FIFO cells)") {
  const double scale = test_scale();
  const int32_t producers = 4;
  const auto per_producer = static_cast<int32_t>(std::max(100.0, 50000.0 * scale));
  std::vector<int32_t> depths(static_cast<size_t>(producers * per_producer), 3);
  DepthOnlyRequest request(depths);
  ReadyPool pool(2, 16);
  std::atomic<int32_t> done{0};
  std::vector<std::thread> threads;
  for (int32_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int32_t i = 0; i < per_producer; ++i) pool.push(0, {&request, p * per_producer + i});
      done.fetch_add(1, std::memory_order_release);
    });
  }
  std::vector<int32_t> last_seen(producers, -1);
  int64_t out_of_order = 0;
  int64_t received = 0;
  while (true) {
    const bool finished = done.load(std::memory_order_acquire) == producers;
    auto entry = pool.pop(1);  // steals from row 0
    if (!entry) {
      if (finished) break;
      continue;
    }
    const int32_t producer = entry->node / per_producer;
    const int32_t sequence = entry->node % per_producer;
    if (sequence <= last_seen[static_cast<size_t>(producer)]) ++out_of_order;
    last_seen[static_cast<size_t>(producer)] = sequence;
    ++received;
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(out_of_order == 0);
  CHECK(received == int64_t{producers} * per_producer);
}

TEST_CASE("bad shapes are rejected") {
  CHECK_THROWS(ReadyPool(0, 4));
  CHECK_THROWS(ReadyPool(2, 0));
  CHECK_THROWS(ReadyPool(2, 16, 0));
  CHECK_THROWS(ReadyPool(2, 17, 4));     // 68 cells: more than one bitmap word
  CHECK_THROWS(ReadyPool(4, 16, 4, 3));  // max_rows below rows
  CHECK_NOTHROW(ReadyPool(2, 64, 1));
}

TEST_CASE("owner pushes while thieves steal (Taskflow wsq style): sorted multiset equals gold") {
  // N grows geometrically past the ring capacity of a cell (so the overflow
  // path runs too); the owner pushes batches into its row and pops it, M
  // thieves steal; every item must come out exactly once.
  const uint64_t seed = seed_for("owner and thieves");
  const double scale = test_scale();
  const auto max_items = static_cast<int32_t>(std::max(1024.0, 262144.0 * scale));
  for (int32_t thieves = 1; thieves <= 4; ++thieves) {
    for (int32_t items = 1; items <= max_items; items *= 8) {
      CAPTURE(thieves);
      CAPTURE(items);
      std::vector<int32_t> depths(static_cast<size_t>(items));
      std::mt19937_64 rng(seed + static_cast<uint64_t>(items));
      for (int32_t& depth : depths) depth = std::uniform_int_distribution<int32_t>(0, 40)(rng);
      DepthOnlyRequest request(depths);
      ReadyPool pool(thieves + 1);
      std::atomic<bool> owner_done{false};
      std::vector<std::vector<int32_t>> got(static_cast<size_t>(thieves) + 1);
      std::vector<std::thread> threads;
      for (int32_t t = 1; t <= thieves; ++t) {
        threads.emplace_back([&, t] {
          auto& mine = got[static_cast<size_t>(t)];
          while (true) {
            const bool done = owner_done.load(std::memory_order_acquire);
            if (auto entry = pool.pop(t)) {
              mine.push_back(entry->node);
            } else if (done) {
              break;
            }
          }
        });
      }
      {
        auto& mine = got[0];
        std::vector<ReadyEntry> batch;
        for (int32_t i = 0; i < items;) {
          const int32_t size = std::uniform_int_distribution<int32_t>(1, 40)(rng);
          batch.clear();
          for (int32_t j = i; j < std::min(items, i + size); ++j) batch.push_back({&request, j});
          pool.push_batch(0, batch);
          i += static_cast<int32_t>(batch.size());
          if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
            if (auto entry = pool.pop(0)) mine.push_back(entry->node);
          }
        }
        while (auto entry = pool.pop(0)) mine.push_back(entry->node);
        owner_done.store(true, std::memory_order_release);
      }
      for (std::thread& thread : threads) thread.join();
      std::vector<int32_t> all;
      for (const auto& part : got) all.insert(all.end(), part.begin(), part.end());
      std::sort(all.begin(), all.end());
      std::vector<int32_t> gold(static_cast<size_t>(items));
      std::iota(gold.begin(), gold.end(), 0);
      REQUIRE(all == gold);
      CHECK(pool.empty());
    }
  }
}

namespace {
struct PriorityRequest final : Request {
  PriorityRequest(const std::vector<int32_t>& depths, int32_t priority)
      : Request(GraphView{static_cast<int32_t>(depths.size()), nullptr, nullptr, nullptr,
                          depths.data(), nullptr, 0},
                priority) {}
  void execute_node(int32_t) noexcept override {}
  void on_complete() noexcept override {}
};
}  // namespace

TEST_CASE("band_for_priority: default band 1, higher priority never lower band") {
  for (int32_t bands : {1, 2, 3, 4, 8}) {
    int32_t previous = 0;
    for (int32_t priority = -5; priority < 20; ++priority) {
      const int32_t band = tessera::scheduler::band_for_priority(priority, bands);
      REQUIRE(band >= 0);
      REQUIRE(band < bands);
      REQUIRE(band >= previous);
      previous = band;
    }
    if (bands > 1) {
      CHECK(tessera::scheduler::band_for_priority(0, bands) == ReadyPool::kDefaultPriorityBand);
      CHECK(tessera::scheduler::band_for_priority(-1, bands) == 0);
    }
  }
}

TEST_CASE("pop: higher-priority requests' entries first, from any row, depth order inside") {
  std::mt19937_64 rng(seed_for("pool priority"));
  for (int round = 0; round < 30; ++round) {
    const int32_t rows = std::uniform_int_distribution<int32_t>(1, 4)(rng);
    const int32_t count = std::uniform_int_distribution<int32_t>(1, 400)(rng);
    std::vector<int32_t> depths(static_cast<size_t>(count));
    for (int32_t& depth : depths) depth = std::uniform_int_distribution<int32_t>(0, 500)(rng);
    // Priorities -1, 0, 1, 2, 7 (the last two share the top band of 4).
    const std::vector<int32_t> priorities = {-1, 0, 1, 2, 7};
    std::vector<std::unique_ptr<PriorityRequest>> requests;
    for (const int32_t priority : priorities) {
      requests.push_back(std::make_unique<PriorityRequest>(depths, priority));
    }
    ReadyPool pool(rows);
    // Saturate: every request's nodes, shuffled over rows and requests.
    std::vector<ReadyEntry> entries;
    for (const auto& request : requests) {
      for (int32_t node = 0; node < count; ++node) entries.push_back({request.get(), node});
    }
    std::shuffle(entries.begin(), entries.end(), rng);
    for (const ReadyEntry& entry : entries) {
      pool.push(std::uniform_int_distribution<int32_t>(0, rows - 1)(rng), entry);
    }
    const int32_t popper = std::uniform_int_distribution<int32_t>(0, rows - 1)(rng);
    int32_t previous_band = ReadyPool::kDefaultBands;
    int64_t popped = 0;
    while (auto entry = pool.pop(popper)) {
      const int32_t band =
          tessera::scheduler::band_for_priority(entry->request->priority(), pool.bands());
      // Bands above the default are global: no lower band may come out before
      // them. Default and lower bands are ordered within a row (own row first).
      if (previous_band > ReadyPool::kDefaultPriorityBand) CHECK(band <= previous_band);
      previous_band = band;
      ++popped;
    }
    CHECK(popped == int64_t{count} * static_cast<int64_t>(priorities.size()));
    CHECK(pool.empty());
    CHECK_FALSE(pool.urgent_pending());
  }
}

TEST_CASE("rows can be added while others push and pop") {
  std::vector<int32_t> depths(20000, 1);
  DepthOnlyRequest request(depths);
  ReadyPool pool(1, ReadyPool::kDefaultColumns, ReadyPool::kDefaultBands, 8);
  CHECK(pool.rows() == 1);
  CHECK(pool.max_rows() == 8);
  std::atomic<bool> done{false};
  std::vector<int32_t> got;
  std::thread consumer([&] {
    while (true) {
      const bool finished = done.load();
      if (auto entry = pool.pop(0)) {
        got.push_back(entry->node);
      } else if (finished) {
        break;
      }
    }
  });
  for (int32_t node = 0; node < 20000; ++node) {
    if (node % 2500 == 0) pool.add_rows(std::min(8, pool.rows() + 1));
    pool.push(node % pool.rows(), {&request, node});
  }
  done.store(true);
  consumer.join();
  std::sort(got.begin(), got.end());
  std::vector<int32_t> gold(20000);
  std::iota(gold.begin(), gold.end(), 0);
  CHECK(got == gold);
  CHECK(pool.rows() == 8);
  CHECK_THROWS(pool.add_rows(9));
}
