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
//
// A Reshape/Flatten output is the input's bytes under another shape (both
// plain row-major: the reshape kernels are NCHW-only), so it is not given
// space of its own: input and output form one alias group, placed as one
// buffer whose writers and accessors are the union of its members' (so its
// lifetime covers both), and the reshape kernel skips the copy.
//
// A Softmax writes its output over its input X where nothing else reads X
// (writes_over_input()): the row its tile reads is the row it writes, so
// the scores an attention head's QK^T tile just left in cache are
// overwritten there instead of a second buffer being pulled in from memory
// for the output. X and the output form one alias group too.
//
// A Conv with a fused residual R writes its output over R where its kernel
// finishes each element in R's element's place and every other reader of
// R's bytes is done there first (MemoryPlanOptions::forecast): the output
// goes into the lines R was just read from. A chain of residual blocks
// then keeps one buffer (ResNet-50's 16 bottleneck outputs).
#include "graph/memory_plan.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <span>

#include "graph/dependency.hpp"
#include "graph/error.hpp"

namespace tessera::graph {
namespace {

uint64_t align_up(uint64_t v) {
  return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// The node indices [begin, end) of op `op`'s tiles: the nodes of one op
// are consecutive, from first_tile[op] (nodes.size() for an op with none).
std::pair<int32_t, int32_t> op_tiles(std::span<const TileNode> nodes,
                                     std::span<const int32_t> first_tile, size_t op) {
  int32_t end = first_tile[op];
  while (static_cast<size_t>(end) < nodes.size() && static_cast<size_t>(nodes[end].op) == op) ++end;
  return {first_tile[op], end};
}

bool overlaps(const Region& a, const Region& b) {
  if (a.begin.size() != b.begin.size()) return true;  // not comparable: assume the worst
  for (size_t d = 0; d < a.begin.size(); ++d)
    if (a.end[d] <= b.begin[d] || b.end[d] <= a.begin[d]) return false;
  return true;
}

// Whether op `op_index`'s output may take the bytes of its fused residual
// R (MemoryPlanOptions::forecast), which `residual_bytes` (R and the
// tensors written over before it, all of R's shape) occupy: every tile of
// another op that reads a region of them overlapping a tile of this op's
// output is an ancestor of that tile, so it has read there before the
// tile overwrites it. A reader that is not an ancestor (a later op, or a
// tile beside it) keeps R apart.
bool residual_reads_done_first(const Graph& graph, size_t op_index,
                               std::span<const int32_t> residual_bytes,
                               std::span<const TileNode> nodes, std::span<const int32_t> first_tile,
                               const std::vector<std::vector<int32_t>>& parents) {
  auto in_residual = [&](int32_t t) {
    return std::find(residual_bytes.begin(), residual_bytes.end(), t) != residual_bytes.end();
  };
  const auto [w_begin, w_end] = op_tiles(nodes, first_tile, op_index);
  std::vector<std::vector<bool>> ancestors;  // per writer tile, computed on first use
  auto is_ancestor = [&](int32_t maybe, int32_t tile) {
    std::vector<bool>& seen = ancestors[static_cast<size_t>(tile - w_begin)];
    if (seen.empty()) {
      seen.assign(nodes.size(), false);
      std::vector<int32_t> stack{tile};
      while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        for (int32_t p : parents[static_cast<size_t>(n)])
          if (!seen[static_cast<size_t>(p)]) {
            seen[static_cast<size_t>(p)] = true;
            stack.push_back(p);
          }
      }
    }
    return static_cast<bool>(seen[static_cast<size_t>(maybe)]);
  };
  ancestors.resize(static_cast<size_t>(w_end - w_begin));
  for (size_t j = 0; j < graph.ops.size(); ++j) {
    const Operator& reader = graph.ops[j];
    if (j == op_index || std::none_of(reader.inputs.begin(), reader.inputs.end(), in_residual))
      continue;
    std::vector<Shape> shapes;
    for (int32_t t : reader.inputs) shapes.push_back(graph.tensors[static_cast<size_t>(t)].shape);
    const Shape& out = graph.tensors[static_cast<size_t>(reader.outputs[0])].shape;
    const auto [r_begin, r_end] = op_tiles(nodes, first_tile, j);
    for (int32_t r = r_begin; r < r_end; ++r)
      for (const InputDependency& dep :
           tile_dependencies(reader, shapes, out, nodes[static_cast<size_t>(r)].region)) {
        if (!in_residual(reader.inputs[static_cast<size_t>(dep.operand)])) continue;
        for (int32_t w = w_begin; w < w_end; ++w)
          if (overlaps(dep.region, nodes[static_cast<size_t>(w)].region) && !is_ancestor(r, w))
            return false;
      }
  }
  return true;
}

}  // namespace

bool is_alias_op(const Graph& graph, const Operator& op) {
  if ((op.type != OpType::Reshape && op.type != OpType::Flatten) || op.inputs.size() != 1 ||
      op.outputs.size() != 1)
    return false;
  const TensorInfo& in = graph.tensors.at(static_cast<size_t>(op.inputs[0]));
  const TensorInfo& out = graph.tensors.at(static_cast<size_t>(op.outputs[0]));
  return !in.is_weight && in.dtype == out.dtype && shape_numel(in.shape) == shape_numel(out.shape);
}

bool writes_over_input(const Graph& graph, const Operator& op, std::span<const TileNode> tiles) {
  if (op.type != OpType::Softmax || op.inputs.empty() || op.outputs.size() != 1) return false;
  const TensorInfo& in = graph.tensors.at(static_cast<size_t>(op.inputs[0]));
  const TensorInfo& out = graph.tensors.at(static_cast<size_t>(op.outputs[0]));
  if (in.is_weight || in.dtype != out.dtype || in.shape != out.shape) return false;
  for (size_t i = 1; i < op.inputs.size(); ++i)
    if (op.inputs[i] == op.inputs[0]) return false;
  // Every tile holds whole rows: the dims the softmax normalises over are
  // never cut (tiler.cpp), so no tile reads a row another tile writes.
  const size_t rank = out.shape.size();
  const size_t axis = static_cast<size_t>(std::max<int64_t>(op.attrs.axis, 0));
  const size_t last = op.attrs.softmax_coerce_2d ? rank : axis + 1;
  for (const TileNode& tile : tiles)
    for (size_t d = axis; d < last && d < rank; ++d)
      if (tile.region.begin.at(d) != 0 || tile.region.end.at(d) != out.shape[d]) return false;
  return true;
}

MemoryPlan plan_memory(const Graph& graph, std::vector<TileNode>& nodes,
                       const MemoryPlanOptions& options) {
  const size_t tensor_count = graph.tensors.size();
  MemoryPlan plan;
  plan.offsets.assign(tensor_count, 0);
  plan.alias_of.assign(tensor_count, -1);

  // Alias groups, by their root (ops are in topological order, so an input's
  // root is known before its Reshape is seen).
  std::vector<int32_t> root(tensor_count);
  for (size_t t = 0; t < tensor_count; ++t) root[t] = static_cast<int32_t>(t);
  for (const Operator& op : graph.ops) {
    if (!is_alias_op(graph, op)) continue;
    const int32_t r = root[static_cast<size_t>(op.inputs[0])];
    root[static_cast<size_t>(op.outputs[0])] = r;
    plan.alias_of[static_cast<size_t>(op.outputs[0])] = r;
  }
  auto group = [&](int32_t t) { return static_cast<size_t>(root[static_cast<size_t>(t)]); };

  // Ops that write over their input (writes_over_input()) join the input's
  // group when that group is read by no other op (alias ops inside a group
  // read nothing of another), is no graph input and no graph output: its
  // only reader's tiles each overwrite the rows they read.
  {
    std::vector<int32_t> readers(tensor_count, 0);
    for (const Operator& op : graph.ops) {
      if (is_alias_op(graph, op)) continue;
      std::vector<size_t> read;
      for (int32_t t : op.inputs) {
        if (static_cast<size_t>(t) >= tensor_count) throw Error("memory plan: bad input index");
        if (graph.tensors[static_cast<size_t>(t)].is_weight) continue;
        if (std::find(read.begin(), read.end(), group(t)) == read.end()) read.push_back(group(t));
      }
      for (size_t g : read) ++readers[g];
    }
    std::vector<bool> pinned(tensor_count, false);  // graph inputs and outputs, by group
    for (int32_t t : graph.inputs) pinned[group(t)] = true;
    for (int32_t t : graph.outputs) pinned[group(t)] = true;
    std::vector<int32_t> first_tile(graph.ops.size() + 1, static_cast<int32_t>(nodes.size()));
    for (size_t n = nodes.size(); n-- > 0;)
      first_tile[static_cast<size_t>(nodes[n].op)] = static_cast<int32_t>(n);
    for (size_t i = 0; i < graph.ops.size(); ++i) {
      const Operator& op = graph.ops[i];
      if (op.type != OpType::Softmax || op.inputs.empty()) continue;
      const size_t in = group(op.inputs[0]), out = group(op.outputs[0]);
      if (in == out || readers[in] != 1 || pinned[in] || pinned[out]) continue;
      if (std::any_of(op.inputs.begin() + 1, op.inputs.end(),
                      [&](int32_t t) { return group(t) == in; }))
        continue;  // the mask is the scores' bytes
      const auto [begin, end] = op_tiles(nodes, first_tile, i);
      const std::span<const TileNode> tiles(nodes.data() + begin, static_cast<size_t>(end - begin));
      if (tiles.empty() || !writes_over_input(graph, op, tiles)) continue;
      // The output's group (its Reshapes) moves into the input's.
      for (size_t t = 0; t < tensor_count; ++t)
        if (static_cast<size_t>(root[t]) == out) {
          root[t] = static_cast<int32_t>(in);
          plan.alias_of[t] = static_cast<int32_t>(in);
        }
      readers[in] = readers[out];
    }

    // Convs written over their fused residual (MemoryPlanOptions::forecast),
    // where the residual has the output's shape and type, is not also the
    // conv's input, and is read by nothing that does not run first.
    if (options.forecast) {
      std::vector<std::vector<int32_t>> parents(nodes.size());
      for (size_t n = 0; n < nodes.size(); ++n)
        for (int32_t c : nodes[n].children)
          parents[static_cast<size_t>(c)].push_back(static_cast<int32_t>(n));
      for (size_t i = 0; i < graph.ops.size(); ++i) {
        const Operator& op = graph.ops[i];
        if (op.type != OpType::Conv || !op.attrs.fused_residual || op.inputs.size() != 4) continue;
        const int32_t residual = op.inputs[3];
        const size_t in = group(residual), out = group(op.outputs[0]);
        const TensorInfo& r = graph.tensors[static_cast<size_t>(residual)];
        const TensorInfo& y = graph.tensors[static_cast<size_t>(op.outputs[0])];
        if (in == out || pinned[in] || pinned[out] || r.is_weight || r.shape != y.shape ||
            r.dtype != y.dtype || group(op.inputs[0]) == in)
          continue;
        // R's bytes may already hold earlier tensors (a chain of residual
        // blocks writes each output over the last); all must be of R's
        // shape (no Reshape among them) for their readers' regions to
        // compare with this op's tiles.
        std::vector<int32_t> members;
        bool same_shapes = true;
        for (size_t t = 0; t < tensor_count; ++t)
          if (group(static_cast<int32_t>(t)) == in) {
            members.push_back(static_cast<int32_t>(t));
            same_shapes = same_shapes && graph.tensors[t].shape == r.shape;
          }
        if (!same_shapes) continue;
        if (!options.forecast->writes_over_residual(graph, static_cast<int32_t>(i))) continue;
        if (!residual_reads_done_first(graph, i, members, nodes, first_tile, parents)) continue;
        for (size_t t = 0; t < tensor_count; ++t)
          if (static_cast<size_t>(root[t]) == out) {
            root[t] = static_cast<int32_t>(in);
            plan.alias_of[t] = static_cast<int32_t>(in);
          }
        readers[in] += readers[out];
      }
    }
  }

  // Arena tensors in placement order: graph inputs, then op outputs.
  std::vector<int32_t> order;
  std::vector<bool> in_arena(tensor_count, false), is_input(tensor_count, false),
      is_output(tensor_count, false);
  auto add_tensor = [&](int32_t t) {
    size_t i = static_cast<size_t>(t);
    if (i >= tensor_count) throw Error("memory plan: tensor index out of range");
    if (graph.tensors[i].is_weight || in_arena[i]) return;
    in_arena[i] = true;
    plan.bytes_without_reuse +=
        align_up(static_cast<uint64_t>(shape_numel(graph.tensors[i].shape)) *
                 dtype_size(graph.tensors[i].dtype));
    if (root[i] == t) order.push_back(t);  // an alias takes its root's place
  };
  for (int32_t t : graph.inputs) {
    add_tensor(t);
    is_input[static_cast<size_t>(t)] = true;
  }
  for (const Operator& op : graph.ops) add_tensor(op.outputs.at(0));
  for (int32_t t : graph.outputs) {
    if (static_cast<size_t>(t) >= tensor_count) throw Error("memory plan: bad output index");
    is_output[group(t)] = true;  // the whole group lives to the end
  }

  // Writer and accessor (writer or reader) tiles of every tensor. Every tile
  // of a consuming op counts as a reader: conservative, hence safe.
  std::vector<std::vector<int32_t>> writers(tensor_count), accessors(tensor_count);
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Operator& op = graph.ops.at(static_cast<size_t>(nodes[n].op));
    int32_t id = static_cast<int32_t>(n);
    writers[group(op.outputs[0])].push_back(id);
    accessors[group(op.outputs[0])].push_back(id);
    for (int32_t t : op.inputs) {
      auto& acc = accessors[group(t)];
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

  // Bounded run-ahead (MemoryPlanOptions): whether `a` is done with at least
  // reuse_distance ops before `b` is first written, so that ordering edges
  // may make their bytes shareable. Inputs are written before any node runs
  // and outputs live to the end: neither can be ordered that way.
  std::vector<int32_t> last_access(tensor_count, -1), first_write(tensor_count, -1);
  for (size_t t = 0; t < tensor_count; ++t) {
    for (int32_t n : accessors[t])
      last_access[t] = std::max(last_access[t], nodes[static_cast<size_t>(n)].op);
    if (!writers[t].empty()) first_write[t] = nodes[static_cast<size_t>(writers[t].front())].op;
  }
  auto far_apart = [&](size_t a, size_t b) {
    return options.reuse_distance > 0 && !is_output[a] && !is_input[b] && last_access[a] >= 0 &&
           first_write[b] >= 0 && first_write[b] - last_access[a] >= options.reuse_distance;
  };
  auto add_edge = [&](int32_t from, int32_t to) {
    auto& children = nodes[static_cast<size_t>(from)].children;
    if (std::find(children.begin(), children.end(), to) != children.end()) return;
    children.push_back(to);
    ++nodes[static_cast<size_t>(to)].parent_count;
    ++plan.added_edges;
  };

  // Greedy best-fit placement against the already placed tensors that may
  // still be in use while this one is written.
  std::vector<uint64_t> sizes(count);
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  std::vector<size_t> orderable;  // placed tensors B may share bytes with, given edges
  for (size_t bi = 0; bi < count; ++bi) {
    const TensorInfo& info = graph.tensors[static_cast<size_t>(order[bi])];
    sizes[bi] = align_up(static_cast<uint64_t>(shape_numel(info.shape)) * dtype_size(info.dtype));
    busy.clear();
    orderable.clear();
    for (size_t ai = 0; ai < bi; ++ai) {
      if (finished_before[ai][bi]) continue;
      if (far_apart(static_cast<size_t>(order[ai]), static_cast<size_t>(order[bi]))) {
        orderable.push_back(ai);
        continue;
      }
      busy.emplace_back(plan.offsets[static_cast<size_t>(order[ai])],
                        plan.offsets[static_cast<size_t>(order[ai])] + sizes[ai]);
    }
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
    // The orderable tensors B actually overlaps: every access to them must
    // finish before B is written.
    for (size_t ai : orderable) {
      const uint64_t a_begin = plan.offsets[static_cast<size_t>(order[ai])];
      if (a_begin >= offset + sizes[bi] || offset >= a_begin + sizes[ai]) continue;
      for (int32_t x : accessors[static_cast<size_t>(order[ai])])
        for (int32_t y : writers[static_cast<size_t>(order[bi])]) add_edge(x, y);
    }
  }
  if (plan.added_edges > 0) {
    // Longest path from a source again (the ready pool's depth priority).
    for (TileNode& node : nodes) node.depth = 0;
    for (const TileNode& node : nodes)
      for (int32_t c : node.children)
        nodes[static_cast<size_t>(c)].depth =
            std::max(nodes[static_cast<size_t>(c)].depth, node.depth + 1);
  }
  for (size_t t = 0; t < tensor_count; ++t)
    if (plan.alias_of[t] >= 0)
      plan.offsets[t] = plan.offsets[static_cast<size_t>(plan.alias_of[t])];
  return plan;
}

}  // namespace tessera::graph
