// Memory plan for barrier-free execution.
//
// Operator order is not execution order here: without barriers, a tile of a
// later op may run while a tile of an earlier op (on another path) still
// reads. Operator-level liveness alone ("A's last consumer comes before B's
// producer") is therefore unsafe. B may take A's bytes only when EVERY tile
// that writes B is a tile-graph descendant of EVERY tile that writes or reads
// A: then, in any execution order the DSEs pick, all uses of A have finished
// before the first byte of B is written. Readers of B need no check: they
// descend from the B writers whose data they read.
//
// The check is done per pair (A, B) with one forward pass per A over the tile
// graph, carrying for every node the bitset of A's accessor tiles among its
// ancestors. Placement is greedy best-fit in operator order against the
// tensors B must not overlap.
#include "graph/memory_plan.hpp"

#include <algorithm>
#include <bit>
#include <limits>

#include "graph/error.hpp"

namespace tessera::graph {
namespace {

uint64_t align_up(uint64_t v) {
  return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

}  // namespace

MemoryPlan plan_memory(const Graph& graph, const std::vector<TileNode>& nodes) {
  const size_t tensor_count = graph.tensors.size();
  MemoryPlan plan;
  plan.offsets.assign(tensor_count, 0);

  // Arena tensors in placement order: graph inputs, then op outputs.
  std::vector<int32_t> order;
  std::vector<bool> in_arena(tensor_count, false), is_input(tensor_count, false),
      is_output(tensor_count, false);
  auto add_tensor = [&](int32_t t) {
    size_t i = static_cast<size_t>(t);
    if (i >= tensor_count) throw Error("memory plan: tensor index out of range");
    if (graph.tensors[i].is_weight || in_arena[i]) return;
    in_arena[i] = true;
    order.push_back(t);
  };
  for (int32_t t : graph.inputs) {
    add_tensor(t);
    is_input[static_cast<size_t>(t)] = true;
  }
  for (const Operator& op : graph.ops) add_tensor(op.outputs.at(0));
  for (int32_t t : graph.outputs) {
    if (static_cast<size_t>(t) >= tensor_count) throw Error("memory plan: bad output index");
    is_output[static_cast<size_t>(t)] = true;
  }

  // Writer and accessor (writer or reader) tiles of every tensor. Every tile
  // of a consuming op counts as a reader: conservative, hence safe.
  std::vector<std::vector<int32_t>> writers(tensor_count), accessors(tensor_count);
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Operator& op = graph.ops.at(static_cast<size_t>(nodes[n].op));
    int32_t id = static_cast<int32_t>(n);
    writers[static_cast<size_t>(op.outputs[0])].push_back(id);
    accessors[static_cast<size_t>(op.outputs[0])].push_back(id);
    for (int32_t t : op.inputs) {
      auto& acc = accessors[static_cast<size_t>(t)];
      if (acc.empty() || acc.back() != id) acc.push_back(id);
    }
  }

  // finished_before[a][b]: every writer of b descends from every accessor of a.
  const size_t count = order.size();
  std::vector<std::vector<bool>> finished_before(count, std::vector<bool>(count, false));
  std::vector<uint64_t> ancestors;
  std::vector<int32_t> bit_of(nodes.size(), -1);
  for (size_t ai = 0; ai < count; ++ai) {
    size_t a = static_cast<size_t>(order[ai]);
    if (is_output[a]) continue;  // live until the end of the request
    const auto& acc = accessors[a];
    const size_t words = (acc.size() + 63) / 64;
    ancestors.assign(nodes.size() * words, 0);
    for (size_t k = 0; k < acc.size(); ++k)
      bit_of[static_cast<size_t>(acc[k])] = static_cast<int32_t>(k);
    size_t start = acc.empty() ? nodes.size() : static_cast<size_t>(acc.front());
    for (size_t n = start; n < nodes.size(); ++n) {
      uint64_t* mine = &ancestors[n * words];
      for (int32_t c : nodes[n].children) {
        uint64_t* theirs = &ancestors[static_cast<size_t>(c) * words];
        for (size_t w = 0; w < words; ++w) theirs[w] |= mine[w];
        if (bit_of[n] >= 0)
          theirs[static_cast<size_t>(bit_of[n]) / 64] |= uint64_t{1} << (bit_of[n] % 64);
      }
    }
    for (int32_t n : acc) bit_of[static_cast<size_t>(n)] = -1;
    for (size_t bi = 0; bi < count; ++bi) {
      size_t b = static_cast<size_t>(order[bi]);
      if (bi == ai || is_input[b]) continue;  // inputs are written before any node runs
      bool all = true;
      for (int32_t w : writers[b]) {
        size_t bits = 0;
        for (size_t k = 0; k < words; ++k)
          bits += static_cast<size_t>(std::popcount(ancestors[static_cast<size_t>(w) * words + k]));
        if (bits != acc.size()) {
          all = false;
          break;
        }
      }
      finished_before[ai][bi] = all;
    }
  }

  // Greedy best-fit placement against the already placed tensors that may
  // still be in use while this one is written.
  std::vector<uint64_t> sizes(count);
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (size_t bi = 0; bi < count; ++bi) {
    const TensorInfo& info = graph.tensors[static_cast<size_t>(order[bi])];
    sizes[bi] = align_up(static_cast<uint64_t>(shape_numel(info.shape)) * dtype_size(info.dtype));
    plan.bytes_without_reuse += sizes[bi];
    busy.clear();
    for (size_t ai = 0; ai < bi; ++ai)
      if (!finished_before[ai][bi])
        busy.emplace_back(plan.offsets[static_cast<size_t>(order[ai])],
                          plan.offsets[static_cast<size_t>(order[ai])] + sizes[ai]);
    std::sort(busy.begin(), busy.end());
    uint64_t best = 0, best_gap = std::numeric_limits<uint64_t>::max(), cursor = 0;
    bool found = false;
    for (auto [b, e] : busy) {
      if (b > cursor && b - cursor >= sizes[bi] && b - cursor < best_gap) {
        best = cursor;
        best_gap = b - cursor;
        found = true;
      }
      cursor = std::max(cursor, e);
    }
    uint64_t offset = found ? best : cursor;
    plan.offsets[static_cast<size_t>(order[bi])] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + sizes[bi]);
  }
  return plan;
}

}  // namespace tessera::graph
