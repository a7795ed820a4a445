// Memory plan: tensors whose bytes overlap must never be in use at the same
// time under ANY execution order the tile graph allows (checked by brute
// force over all pairs with the transitive closure of the tile graph).
#include <doctest/doctest.h>

#include <random>
#include <set>

#include "brute_force_reads.hpp"
#include "graph/memory_plan.hpp"
#include "graph/tiler.hpp"
#include "random_graphs.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

struct Usage {
  std::vector<std::vector<int32_t>> writers, accessors;
  std::vector<bool> in_arena, is_input, is_output;
};

// Tensors sharing bytes by design (MemoryPlan::alias_of) count as one: their
// accesses are merged into the group root's.
Usage usage_of(const Graph& g, const std::vector<TileNode>& nodes, const MemoryPlan& plan) {
  auto group = [&](int32_t t) {
    const int32_t r = plan.alias_of[static_cast<size_t>(t)];
    return static_cast<size_t>(r >= 0 ? r : t);
  };
  Usage u;
  size_t n = g.tensors.size();
  u.writers.resize(n);
  u.accessors.resize(n);
  u.in_arena.assign(n, false);
  u.is_input.assign(n, false);
  u.is_output.assign(n, false);
  for (int32_t t : g.inputs)
    u.in_arena[static_cast<size_t>(t)] = u.is_input[static_cast<size_t>(t)] = true;
  for (int32_t t : g.outputs) u.is_output[group(t)] = true;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Operator& op = g.ops[static_cast<size_t>(nodes[i].op)];
    u.in_arena[static_cast<size_t>(op.outputs[0])] = true;
    u.writers[group(op.outputs[0])].push_back(static_cast<int32_t>(i));
    u.accessors[group(op.outputs[0])].push_back(static_cast<int32_t>(i));
    for (int32_t t : op.inputs) u.accessors[group(t)].push_back(static_cast<int32_t>(i));
  }
  return u;
}

// ancestor[a][b]: a is a strict ancestor of b.
std::vector<std::vector<bool>> closure(const std::vector<TileNode>& nodes) {
  size_t n = nodes.size();
  std::vector<std::vector<bool>> anc(n, std::vector<bool>(n, false));
  for (size_t b = 0; b < n; ++b)
    for (int32_t c : nodes[b].children) {
      anc[b][static_cast<size_t>(c)] = true;
      for (size_t a = 0; a < n; ++a)
        if (anc[a][b]) anc[a][static_cast<size_t>(c)] = true;
    }
  return anc;
}

bool inside(const Region& region, const Coord& at) {
  for (size_t d = 0; d < at.size(); ++d)
    if (at[d] < region.begin[d] || at[d] >= region.end[d]) return false;
  return true;
}

// x finished (all its accesses) before any byte of y is written.
bool finished_before(const Usage& u, const std::vector<std::vector<bool>>& anc, size_t x,
                     size_t y) {
  if (u.is_output[x] || u.is_input[y]) return false;
  for (int32_t a : u.accessors[x])
    for (int32_t w : u.writers[y])
      if (!anc[static_cast<size_t>(a)][static_cast<size_t>(w)]) return false;
  return true;
}

void check_plan(const Graph& g, const std::vector<TileNode>& nodes, const MemoryPlan& plan) {
  REQUIRE(plan.offsets.size() == g.tensors.size());
  REQUIRE(plan.alias_of.size() == g.tensors.size());
  // Every alias is the output of a Reshape/Flatten of an arena tensor, or of
  // a Softmax written over its input, in the same group, at the same offset,
  // with the same byte count.
  std::vector<int32_t> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i)
    producer[static_cast<size_t>(g.ops[i].outputs[0])] = static_cast<int32_t>(i);
  // The tensor whose values t holds under another shape: back through
  // aliasing Reshapes/Flattens only.
  auto value_of = [&](int32_t t) {
    while (plan.alias_of[static_cast<size_t>(t)] >= 0) {
      const Operator& op = g.ops[static_cast<size_t>(producer[static_cast<size_t>(t)])];
      if (op.type != OpType::Reshape && op.type != OpType::Flatten) break;
      t = op.inputs.at(0);
    }
    return t;
  };
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const int32_t root = plan.alias_of[t];
    if (root < 0) continue;
    CAPTURE(t);
    REQUIRE(producer[t] >= 0);
    const Operator& op = g.ops[static_cast<size_t>(producer[t])];
    const bool over_residual = op.type == OpType::Conv && op.attrs.fused_residual;
    CHECK((op.type == OpType::Reshape || op.type == OpType::Flatten || op.type == OpType::Softmax ||
           over_residual));
    const int32_t in = over_residual ? op.inputs.at(3) : op.inputs.at(0);
    if (over_residual) {
      // Written over its residual: every element another op's tile reads
      // from those bytes, where this conv's tile writes, is read by an
      // ancestor of that tile (brute force over each reader's elements).
      const auto anc = closure(nodes);
      for (size_t j = 0; j < g.ops.size(); ++j) {
        if (static_cast<int32_t>(j) == producer[t]) continue;
        const Operator& reader = g.ops[j];
        std::vector<Shape> shapes;
        for (int32_t x : reader.inputs) shapes.push_back(g.tensors[static_cast<size_t>(x)].shape);
        for (size_t r = 0; r < nodes.size(); ++r) {
          if (static_cast<size_t>(nodes[r].op) != j) continue;
          for_each_coord(nodes[r].region, [&](const Coord& o) {
            brute_force_reads(reader, shapes, o, [&](int32_t operand, const Coord& at) {
              const int32_t x = reader.inputs[static_cast<size_t>(operand)];
              const int32_t xr = plan.alias_of[static_cast<size_t>(x)];
              // The bytes' earlier values: tensors of the group written
              // before this conv's output (later ones are read after it).
              if ((xr >= 0 ? xr : x) != root || producer[static_cast<size_t>(x)] >= producer[t])
                return;
              for (size_t w = 0; w < nodes.size(); ++w)
                if (nodes[w].op == producer[t] && inside(nodes[w].region, at)) CHECK(anc[r][w]);
            });
          });
        }
      }
    }
    if (op.type == OpType::Softmax) {
      // Written over its input: its tiles hold whole rows, and no other op
      // reads the input's values (under any shape), nor is it an input or
      // an output of the graph.
      std::vector<TileNode> tiles;
      for (const TileNode& node : nodes)
        if (node.op == producer[t]) tiles.push_back(node);
      CHECK(writes_over_input(g, op, tiles));
      const int32_t value = value_of(in);
      for (size_t i = 0; i < g.ops.size(); ++i) {
        if (static_cast<int32_t>(i) == producer[t] || is_alias_op(g, g.ops[i])) continue;
        for (int32_t x : g.ops[i].inputs) CHECK(value_of(x) != value);
      }
      for (int32_t x : g.inputs) CHECK(value_of(x) != value);
      for (int32_t x : g.outputs) CHECK(value_of(x) != value);
    }
    CHECK(!g.tensors[static_cast<size_t>(in)].is_weight);
    CHECK(plan.alias_of[static_cast<size_t>(root)] == -1);
    CHECK((in == root || plan.alias_of[static_cast<size_t>(in)] == root));
    CHECK(plan.offsets[t] == plan.offsets[static_cast<size_t>(root)]);
    CHECK(shape_numel(g.tensors[t].shape) == shape_numel(g.tensors[static_cast<size_t>(in)].shape));
  }
  Usage u = usage_of(g, nodes, plan);
  auto anc = closure(nodes);
  auto group = [&](size_t t) {
    return plan.alias_of[t] >= 0 ? static_cast<size_t>(plan.alias_of[t]) : t;
  };
  uint64_t sum = 0;
  std::vector<uint64_t> size(g.tensors.size(), 0);
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    if (!u.in_arena[t]) continue;
    size[t] = (static_cast<uint64_t>(shape_numel(g.tensors[t].shape)) * 4 + 63) / 64 * 64;
    sum += size[t];
    CHECK(plan.offsets[t] % 64 == 0);
    CHECK(plan.offsets[t] + size[t] <= plan.arena_bytes);
  }
  CHECK(plan.bytes_without_reuse == sum);
  CHECK(plan.arena_bytes <= sum);
  for (size_t x = 0; x < g.tensors.size(); ++x)
    for (size_t y = x + 1; y < g.tensors.size(); ++y) {
      if (!u.in_arena[x] || !u.in_arena[y] || group(x) == group(y)) continue;
      bool overlap = plan.offsets[x] < plan.offsets[y] + size[y] &&
                     plan.offsets[y] < plan.offsets[x] + size[x];
      if (!overlap) continue;
      CAPTURE(x);
      CAPTURE(y);
      CHECK((finished_before(u, anc, group(x), group(y)) ||
             finished_before(u, anc, group(y), group(x))));
    }
}

}  // namespace

TEST_CASE("memory plan: overlapping tensors are never live together (random graphs)") {
  int reused = 0, aliased = 0;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    Graph g = seed % 3 == 0 ? random_matrix_graph(rng) : random_cnn(rng);
    auto nodes = build_tile_nodes(g, TilerOptions{static_cast<int32_t>(seed % 5), 2});
    MemoryPlan plan = plan_memory(g, nodes);
    check_plan(g, nodes, plan);
    if (plan.arena_bytes < plan.bytes_without_reuse) ++reused;
    for (int32_t a : plan.alias_of) aliased += a >= 0;
  }
  MESSAGE("graphs with reuse: ", reused, " of 150; aliased tensors: ", aliased);
  CHECK(reused > 10);   // the planner does reuse where it is safe
  CHECK(aliased > 10);  // the random graphs' Reshapes/Flattens alias
}

// The tile graph after the planner added edges: still topologically
// numbered, parent counts equal to the incoming edges, depths the longest
// path from a source.
void check_nodes(const std::vector<TileNode>& nodes) {
  std::vector<int32_t> incoming(nodes.size(), 0), depth(nodes.size(), 0);
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int32_t c : nodes[n].children) {
      REQUIRE(static_cast<size_t>(c) > n);
      ++incoming[static_cast<size_t>(c)];
      depth[static_cast<size_t>(c)] = std::max(depth[static_cast<size_t>(c)], depth[n] + 1);
    }
  for (size_t n = 0; n < nodes.size(); ++n) {
    CAPTURE(n);
    CHECK(nodes[n].parent_count == incoming[n]);
    CHECK(nodes[n].depth == depth[n]);
  }
}

TEST_CASE("memory plan: bounded run-ahead adds ordering edges and stays safe (random graphs)") {
  int with_edges = 0;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    Graph g = seed % 3 == 0 ? random_matrix_graph(rng) : random_cnn(rng);
    auto nodes = build_tile_nodes(g, TilerOptions{static_cast<int32_t>(seed % 5), 2});
    const int32_t distance = 1 + static_cast<int32_t>(seed % 3);
    CAPTURE(distance);
    auto unbounded = nodes;
    const MemoryPlan provable = plan_memory(g, unbounded);
    MemoryPlan plan = plan_memory(g, nodes, MemoryPlanOptions{.reuse_distance = distance});
    check_nodes(nodes);
    check_plan(g, nodes, plan);  // overlaps are ordered by the graph as it now is
    CHECK(plan.arena_bytes <= provable.arena_bytes);
    if (plan.added_edges > 0) ++with_edges;
  }
  MESSAGE("graphs given ordering edges: ", with_edges, " of 120");
  CHECK(with_edges > 10);
}

TEST_CASE("memory plan: independent paths share bytes only with bounded run-ahead") {
  // x [2, 64] through 8 Relus, each cut into its 2 rows: two paths that
  // never join (a batch of 2), so no tensor is provably dead before another
  // is written on the other path. Distance 2 lets t[i + 2] take t[i]'s bytes
  // once both rows of t[i] were read.
  GraphBuilder b;
  int32_t t = b.input("x", {2, 64});
  std::vector<int32_t> chain{t};
  for (int i = 0; i < 8; ++i) chain.push_back(t = b.op(OpType::Relu, {t}));
  b.g.outputs = {t};
  auto nodes = build_tile_nodes(b.g, TilerOptions{2, 2});
  REQUIRE(nodes.size() == 16);
  auto unbounded = nodes;
  const MemoryPlan provable = plan_memory(b.g, unbounded);
  CHECK(provable.added_edges == 0);
  CHECK(provable.arena_bytes == provable.bytes_without_reuse);  // nothing is provable
  MemoryPlan plan = plan_memory(b.g, nodes, MemoryPlanOptions{.reuse_distance = 2});
  check_nodes(nodes);
  check_plan(b.g, nodes, plan);
  CHECK(plan.added_edges > 0);
  CHECK(plan.arena_bytes <= 4 * 512);  // at most the tensors 2 ops apart plus the output
  // Row 0 of op i + 2 now waits for row 1 of op i: the paths stay within 2 ops.
  auto reaches = [&](int32_t from, int32_t to) {
    std::vector<bool> seen(nodes.size(), false);
    std::vector<int32_t> stack{from};
    while (!stack.empty()) {
      const int32_t n = stack.back();
      stack.pop_back();
      if (n == to) return true;
      for (int32_t c : nodes[static_cast<size_t>(n)].children) {
        if (seen[static_cast<size_t>(c)]) continue;
        seen[static_cast<size_t>(c)] = true;
        stack.push_back(c);
      }
    }
    return false;
  };
  CHECK(reaches(1, 2 * 3));        // op 0 row 1 -> op 3 row 0
  CHECK_FALSE(reaches(1, 2 * 1));  // but not op 1 row 0: the paths still overlap
}

TEST_CASE("memory plan: no reuse where only operator-level liveness would allow it") {
  // x -> convA -> t1 -> convB -> t2 -> convC -> t3, all the same size, 4 row
  // tiles each. By operator order t1 is dead once convB ran, so t3 could take
  // its bytes; but convC's top tile does not depend on convB's bottom tile,
  // which may still be reading t1. Likewise x vs t2.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 2, 16, 16});
  auto conv = [&](int32_t in, const std::string& name) {
    int32_t w = b.weight(name + ".w", {2, 2, 3, 3});
    return b.op(OpType::Conv, {in, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), name);
  };
  int32_t t1 = conv(x, "A");
  int32_t t2 = conv(t1, "B");
  int32_t t3 = conv(t2, "C");
  b.g.outputs = {t3};
  auto nodes = build_tile_nodes(b.g, TilerOptions{4, 4});
  MemoryPlan plan = plan_memory(b.g, nodes);
  check_plan(b.g, nodes, plan);
  const uint64_t bytes = 2 * 16 * 16 * 4;
  CHECK(plan.bytes_without_reuse == 4 * bytes);
  CHECK(plan.arena_bytes == 4 * bytes);  // every pair unsafe: no reuse at all
  std::set<uint64_t> offsets = {
      plan.offsets[static_cast<size_t>(x)], plan.offsets[static_cast<size_t>(t1)],
      plan.offsets[static_cast<size_t>(t2)], plan.offsets[static_cast<size_t>(t3)]};
  CHECK(offsets.size() == 4);
}

TEST_CASE("memory plan: reuse behind an all-to-all op") {
  // x -> conv1 -> t1 -> softmax over [C,H,W] (one tile) -> t2 -> conv2 -> t3
  // -> relu -> t4. The softmax writes over t1, its only reader's input; every
  // conv2 tile descends from the softmax tile, which descends from all conv1
  // tiles, so t3 may take x's bytes. t4's relu tiles each follow one conv2
  // tile only, so t4 gets fresh space.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 2, 16, 16});
  int32_t w1 = b.weight("w1", {2, 2, 3, 3});
  int32_t w2 = b.weight("w2", {2, 2, 3, 3});
  auto attrs = spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  int32_t t1 = b.op(OpType::Conv, {x, w1}, attrs);
  OpAttributes sa;
  sa.axis = 1;
  sa.softmax_coerce_2d = true;
  int32_t t2 = b.op(OpType::Softmax, {t1}, sa);
  int32_t t3 = b.op(OpType::Conv, {t2, w2}, attrs);
  int32_t t4 = b.op(OpType::Relu, {t3});
  b.g.outputs = {t4};
  auto nodes = build_tile_nodes(b.g, TilerOptions{4, 4});
  MemoryPlan plan = plan_memory(b.g, nodes);
  check_plan(b.g, nodes, plan);
  const uint64_t bytes = 2 * 16 * 16 * 4;
  CHECK(plan.bytes_without_reuse == 5 * bytes);
  CHECK(plan.arena_bytes == 3 * bytes);
  CHECK(plan.alias_of[static_cast<size_t>(t2)] == t1);
  CHECK(plan.offsets[static_cast<size_t>(t2)] == plan.offsets[static_cast<size_t>(t1)]);
  CHECK(plan.offsets[static_cast<size_t>(t3)] == plan.offsets[static_cast<size_t>(x)]);
}

TEST_CASE("memory plan: a Softmax writes over its input only where nothing else can see it") {
  // scores -> softmax -> p -> relu: p takes the scores' bytes. Not where the
  // scores are read again, are a graph output or input, are the mask, or
  // where p is a graph output; nor through a Reshape of the scores read
  // elsewhere.
  auto build = [&](int variant) {
    GraphBuilder b;
    int32_t x = b.input("x", {1, 4, 32, 32});
    int32_t scores = variant == 3 ? x : b.op(OpType::Relu, {x});
    OpAttributes ra;
    ra.new_shape = {4, 32, 32};
    int32_t view = b.op(OpType::Reshape, {scores}, ra);
    OpAttributes sa3;
    sa3.axis = 2;
    int32_t p = variant == 4 ? b.op(OpType::Softmax, {view, view}, sa3)
                             : b.op(OpType::Softmax, {view}, sa3);
    int32_t y = b.op(OpType::Relu, {p});
    b.g.outputs = {y};
    if (variant == 1) b.g.outputs.push_back(b.op(OpType::Relu, {scores}));  // read again
    if (variant == 2) b.g.outputs.push_back(scores);                        // a graph output
    if (variant == 5) b.g.outputs.push_back(p);                             // p an output
    if (variant == 6) {
      OpAttributes fa;
      fa.new_shape = {4, 1024};
      b.g.outputs.push_back(b.op(OpType::Relu, {b.op(OpType::Reshape, {view}, fa)}));
    }
    return std::make_pair(b.g, std::make_pair(view, p));
  };
  for (int variant = 0; variant <= 6; ++variant) {
    CAPTURE(variant);
    auto [g, tensors] = build(variant);
    auto [view, p] = tensors;
    for (int32_t threads : {1, 2}) {
      auto nodes = build_tile_nodes(g, TilerOptions{0, threads});
      MemoryPlan plan = plan_memory(g, nodes);
      check_plan(g, nodes, plan);
      const bool over = plan.alias_of[static_cast<size_t>(p)] >= 0;
      CHECK(over == (variant == 0));
      if (over)
        CHECK(plan.offsets[static_cast<size_t>(p)] == plan.offsets[static_cast<size_t>(view)]);
    }
  }
  // A tile that cuts the normalised axis reads rows another tile writes.
  auto [g, tensors] = build(0);
  const Operator& softmax = g.ops.at(2);
  REQUIRE(softmax.type == OpType::Softmax);
  TileNode whole, cut;
  whole.region = Region::whole({4, 32, 32});
  cut.region = whole.region;
  cut.region.end[2] = 16;
  CHECK(writes_over_input(g, softmax, std::vector<TileNode>{whole}));
  CHECK(!writes_over_input(g, softmax, std::vector<TileNode>{cut}));
}

TEST_CASE("memory plan: Reshape chains alias their input, live as one buffer") {
  // x -> relu -> t1 -> reshape -> r1 -> flatten -> r2 (a model output), and
  // t1 -> relu -> t3 -> reshape(weight) not aliased. r2 shares t1's bytes, so
  // t1's group lives to the end; a later tensor of the same size that could
  // take t1's bytes by t1's own readers must not.
  GraphBuilder b;
  int32_t x = b.input("x", {2, 3, 4, 5});
  int32_t t1 = b.op(OpType::Relu, {x});
  OpAttributes ra;
  ra.new_shape = {6, 20};
  int32_t r1 = b.op(OpType::Reshape, {t1}, ra);
  OpAttributes fa;
  fa.axis = 1;
  fa.new_shape = {6, 20};
  int32_t r2 = b.op(OpType::Flatten, {r1}, fa);
  int32_t t2 = b.op(OpType::Relu, {r1});
  int32_t t3 = b.op(OpType::Relu, {t2});
  int32_t t4 = b.op(OpType::Relu, {t3});
  // A Reshape of a model input aliases the input as well.
  OpAttributes xa;
  xa.new_shape = {120};
  int32_t rx = b.op(OpType::Reshape, {x}, xa);
  int32_t w = b.weight("w", {4, 30});
  OpAttributes wa;
  wa.new_shape = {120};
  int32_t rw = b.op(OpType::Reshape, {w}, wa);
  int32_t sum = b.op(OpType::Add, {rx, rw});
  b.g.outputs = {r2, t4, sum};
  for (int32_t tiles : {1, 3}) {
    CAPTURE(tiles);
    auto nodes = build_tile_nodes(b.g, TilerOptions{tiles, 2});
    MemoryPlan plan = plan_memory(b.g, nodes);
    check_plan(b.g, nodes, plan);
    CHECK(plan.alias_of[static_cast<size_t>(r1)] == t1);
    CHECK(plan.alias_of[static_cast<size_t>(r2)] == t1);
    CHECK(plan.alias_of[static_cast<size_t>(rx)] == x);
    CHECK(plan.alias_of[static_cast<size_t>(rw)] == -1);  // weights are not in the arena
    CHECK(plan.alias_of[static_cast<size_t>(t2)] == -1);
    CHECK(plan.offsets[static_cast<size_t>(r2)] == plan.offsets[static_cast<size_t>(t1)]);
    // t1 is a model output through r2: nothing else may sit on its bytes.
    for (int32_t t : {x, t2, t3, t4, rw, sum})
      CHECK(plan.offsets[static_cast<size_t>(t)] != plan.offsets[static_cast<size_t>(t1)]);
  }
}

namespace {

// Answers writes_over_residual() with `yes` for every op.
struct ResidualForecast final : KernelForecast {
  bool yes = true;
  bool runs_winograd(const Graph&, int32_t) const override { return false; }
  bool writes_over_residual(const Graph&, int32_t) const override { return yes; }
};

}  // namespace

TEST_CASE("memory plan: a conv writes over its fused residual only where its readers are done") {
  // t = relu(x) -> conv1x1 -> conv3x3 -> conv1x1 + t (fused) = y -> relu:
  // y takes t's bytes. Not where t is read again later, is a graph output,
  // or the forecast says no; and, with row tiles, not where t's other
  // reader is a 3x3 conv whose tile reads rows the residual conv's
  // neighbouring tile overwrites.
  auto build = [&](int variant) {
    GraphBuilder b;
    int32_t x = b.input("x", {1, 8, 16, 16});
    int32_t t = b.op(OpType::Relu, {x});
    auto conv = [&](int32_t in, int64_t k, int32_t residual) {
      OpAttributes a = spatial_attrs({k, k}, {1, 1}, {k / 2, k / 2, k / 2, k / 2}, {1, 1});
      a.fused_residual = residual >= 0;
      const std::string n = std::to_string(b.g.ops.size());
      std::vector<int32_t> inputs = {in, b.weight("w" + n, {8, 8, k, k}), b.weight("b" + n, {8})};
      if (residual >= 0) inputs.push_back(residual);
      return b.op(OpType::Conv, inputs, a);
    };
    const int32_t u = conv(t, variant == 6 ? 3 : 1, -1);
    const int32_t y = conv(variant == 6 ? u : conv(u, 3, -1), 1, t);
    int32_t last = y;
    if (variant == 5) last = conv(conv(y, 1, -1), 1, y);  // a chain of residual blocks
    b.g.outputs = {b.op(OpType::Relu, {last})};
    if (variant == 1) b.g.outputs.push_back(b.op(OpType::Relu, {t}));  // t read again
    if (variant == 2) b.g.outputs.push_back(t);                        // a graph output
    return std::make_tuple(b.g, t, y, last);
  };
  ResidualForecast forecast;
  for (int variant = 0; variant <= 6; ++variant)
    for (int32_t tiles : {1, 4}) {
      CAPTURE(variant);
      CAPTURE(tiles);
      auto [g, t, y, last] = build(variant);
      auto nodes = build_tile_nodes(g, TilerOptions{tiles, 1});
      forecast.yes = variant != 4;
      MemoryPlan plan = plan_memory(g, nodes, {.forecast = variant == 3 ? nullptr : &forecast});
      check_plan(g, nodes, plan);
      const bool over = plan.alias_of[static_cast<size_t>(y)] == t;
      CHECK(over == (variant == 0 || variant == 5 || (variant == 6 && tiles == 1)));
      if (over) CHECK(plan.offsets[static_cast<size_t>(y)] == plan.offsets[static_cast<size_t>(t)]);
      if (variant == 5) CHECK(plan.alias_of[static_cast<size_t>(last)] == t);
    }
}
