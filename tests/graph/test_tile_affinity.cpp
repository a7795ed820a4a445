// main_parents: each tile's parent is the producer tile it reads the most
// elements of, checked against brute-force counts of the reads.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "brute_force_reads.hpp"

#include "graph/dependency.hpp"
#include "graph/tile_affinity.hpp"
#include "graph/tiler.hpp"
#include "graph_builder.hpp"
#include "random_graphs.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

TileGraph tile_graph_of(const Graph& g, const TilerOptions& options) {
  TileGraph tiles;
  tiles.ops = g.ops;
  for (const TensorInfo& t : g.tensors) {
    CompiledTensor c;
    c.name = t.name;
    c.shape = t.shape;
    tiles.tensors.push_back(c);
  }
  tiles.nodes = build_tile_nodes(g, options);
  return tiles;
}

}  // namespace

TEST_CASE("main_parents: a row tile's main parent is the tile over the same rows") {
  // Two 3x3 convs over 16 rows cut in 4: tile i of the second reads rows
  // 4i-1 .. 4i+4 of the first, so tiles i-1 and i+1 give one row each and
  // tile i four.
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 8, 16, 16});
  const int32_t w1 = b.weight("w1", {8, 8, 3, 3});
  const int32_t w2 = b.weight("w2", {8, 8, 3, 3});
  const auto attrs = spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  const int32_t c1 = b.op(OpType::Conv, {x, w1}, attrs);
  b.g.outputs = {b.op(OpType::Conv, {c1, w2}, attrs)};
  const TileGraph tiles = tile_graph_of(b.g, TilerOptions{4, 2});
  REQUIRE(tiles.nodes.size() == 8);
  const std::vector<int32_t> main = main_parents(tiles);
  REQUIRE(main.size() == 8);
  for (int32_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(main[static_cast<size_t>(i)] == -1);     // sources
    CHECK(main[static_cast<size_t>(4 + i)] == i);  // same rows, not the first parent
    CHECK(tiles.nodes[static_cast<size_t>(4 + i)].parent_count == (i == 0 || i == 3 ? 2 : 3));
  }
}

TEST_CASE("main_parents: random graphs, against brute-force counts of the elements read") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    const Graph g = seed % 3 == 0 ? random_matrix_graph(rng) : random_cnn(rng);
    const TileGraph tiles = tile_graph_of(
        g, TilerOptions{static_cast<int32_t>(seed % 5), static_cast<int32_t>(seed % 3 + 1)});
    const std::vector<int32_t> main = main_parents(tiles);
    REQUIRE(main.size() == tiles.nodes.size());
    std::vector<std::vector<int32_t>> parents(tiles.nodes.size());
    for (size_t p = 0; p < tiles.nodes.size(); ++p)
      for (const int32_t c : tiles.nodes[p].children)
        parents[static_cast<size_t>(c)].push_back(static_cast<int32_t>(p));
    for (size_t c = 0; c < tiles.nodes.size(); ++c) {
      CAPTURE(c);
      if (parents[c].empty()) {
        CHECK(main[c] == -1);
        continue;
      }
      // Distinct input elements read from each parent's region, element by element.
      const TileNode& node = tiles.nodes[c];
      const Operator& op = g.ops[static_cast<size_t>(node.op)];
      std::vector<Shape> in;
      for (const int32_t t : op.inputs) in.push_back(g.tensors[static_cast<size_t>(t)].shape);
      std::vector<std::set<std::pair<int32_t, int64_t>>> read(parents[c].size());
      for_each_coord(node.region, [&](const Coord& o) {
        brute_force_reads(op, in, o, [&](int32_t operand, const Coord& at) {
          const int32_t tensor = op.inputs[static_cast<size_t>(operand)];
          for (size_t k = 0; k < parents[c].size(); ++k) {
            const TileNode& parent = tiles.nodes[static_cast<size_t>(parents[c][k])];
            if (g.ops[static_cast<size_t>(parent.op)].outputs[0] != tensor) continue;
            bool inside = true;
            for (size_t d = 0; d < at.size(); ++d)
              inside = inside && at[d] >= parent.region.begin[d] && at[d] < parent.region.end[d];
            if (inside) read[k].insert({tensor, flatten(at, in[static_cast<size_t>(operand)])});
          }
        });
      });
      size_t most = 0;
      for (size_t k = 1; k < read.size(); ++k)
        if (read[k].size() > read[most].size()) most = k;
      REQUIRE(std::find(parents[c].begin(), parents[c].end(), main[c]) != parents[c].end());
      const size_t chosen = static_cast<size_t>(
          std::find(parents[c].begin(), parents[c].end(), main[c]) - parents[c].begin());
      // Dependency boxes may over-cover what is read (e.g. dilation gaps), so
      // the chosen parent must be the brute-force maximum or tie with it.
      CHECK(read[chosen].size() == read[most].size());
    }
  }
}

TEST_CASE("depth_first_nodes: walk into an op unless reloading its weights per tile costs more") {
  // conv_a: 8 -> 8 channels 1x1 on a 32x32 map (256 B of weights, 32 KiB of
  // input): depth first. conv_b: 8 -> 512 channels 3x3 on the same map
  // (147 KiB of weights, 3 extra loads, 32 KiB of input): op by op. A
  // single-tile op reloads nothing: depth first.
  GraphBuilder b;
  const int32_t x = b.input("x", {1, 8, 32, 32});
  const int32_t wa = b.weight("wa", {8, 8, 1, 1});
  const int32_t wb = b.weight("wb", {512, 8, 3, 3});
  const int32_t a =
      b.op(OpType::Conv, {x, wa}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}));
  b.g.outputs = {b.op(OpType::Conv, {a, wb}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
  const auto with_storage = [&](TileGraph tiles) {
    for (size_t t = 0; t < tiles.tensors.size(); ++t)
      if (b.g.tensors[t].is_weight) tiles.tensors[t].storage = TensorStorage::Weight;
    return tiles;
  };
  const TileGraph tiles = with_storage(tile_graph_of(b.g, TilerOptions{4, 2}));
  REQUIRE(tiles.nodes.size() == 8);
  const std::vector<uint8_t> walk = depth_first_nodes(tiles);
  for (size_t n = 0; n < 8; ++n) {
    CAPTURE(n);
    CHECK(walk[n] == (n < 4 ? 1 : 0));
  }
  for (const uint8_t w : depth_first_nodes(with_storage(tile_graph_of(b.g, TilerOptions{1, 1}))))
    CHECK(w == 1);
}

TEST_CASE("long_nodes: tiles of at least kLongNodeWork multiply-adds, by their share of the op") {
  // A MatMul [1024, 256] x [256, 256] (2^26 multiply-adds) cut in row
  // tiles, then a Relu over its output (one op per element) and a small
  // MatMul [1024, 256] x [256, 8] (2M in all): in 4 or 16 tiles (2^24 and
  // exactly 2^22 = kLongNodeWork each) the big MatMul's tiles are long, in
  // 32 (2^21) none is.
  GraphBuilder b;
  const int32_t x = b.input("x", {1024, 256});
  const int32_t y = b.op(OpType::MatMul, {x, b.weight("w", {256, 256})});
  const int32_t r = b.op(OpType::Relu, {y});
  b.g.outputs = {b.op(OpType::MatMul, {r, b.weight("v", {256, 8})})};
  for (const int32_t tiles : {4, 16, 32}) {
    CAPTURE(tiles);
    const TileGraph graph = tile_graph_of(b.g, TilerOptions{tiles, 2});
    const std::vector<uint8_t> long_node = long_nodes(graph);
    REQUIRE(long_node.size() == graph.nodes.size());
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      CAPTURE(n);
      if (graph.nodes[n].op == 0) CHECK(graph.nodes[n].region.numel() * tiles == 1024 * 256);
      const bool big = graph.nodes[n].op == 0 && tiles <= 16;
      CHECK(long_node[n] == (big ? 1 : 0));
    }
  }
}
