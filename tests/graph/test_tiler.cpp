// Tiler: tiles partition each output, numbering is topological, edges are
// exactly the overlaps of dependency boxes with producer tiles and include
// every element-level read, depths and parent counts are consistent.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>

#include "brute_force_reads.hpp"
#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/tiler.hpp"
#include "graph_builder.hpp"
#include "random_graphs.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

std::vector<Shape> shapes_of(const Graph& g, const Operator& op) {
  std::vector<Shape> s;
  for (int32_t t : op.inputs) s.push_back(g.tensors[static_cast<size_t>(t)].shape);
  return s;
}

void check_tile_graph(const Graph& g, const std::vector<TileNode>& nodes) {
  std::vector<int32_t> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i)
    producer[static_cast<size_t>(g.ops[i].outputs[0])] = static_cast<int32_t>(i);
  std::vector<std::vector<int32_t>> op_nodes(g.ops.size());
  std::vector<std::set<int32_t>> parents(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    op_nodes[static_cast<size_t>(nodes[n].op)].push_back(static_cast<int32_t>(n));
    if (n > 0) CHECK(nodes[n].op >= nodes[n - 1].op);  // op order, then tile order
    std::set<int32_t> seen;
    for (int32_t c : nodes[n].children) {
      CHECK(c > static_cast<int32_t>(n));  // topological numbering
      CHECK_MESSAGE(seen.insert(c).second, "duplicate edge");
      parents[static_cast<size_t>(c)].insert(static_cast<int32_t>(n));
    }
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    CHECK(nodes[n].parent_count == static_cast<int32_t>(parents[n].size()));
    int32_t depth = 0;
    for (int32_t p : parents[n]) depth = std::max(depth, nodes[static_cast<size_t>(p)].depth + 1);
    CHECK(nodes[n].depth == depth);
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Operator& op = g.ops[i];
    const Shape& out = g.tensors[static_cast<size_t>(op.outputs[0])].shape;
    // Tiles partition the output.
    REQUIRE(!op_nodes[i].empty());
    int64_t total = 0;
    for (int32_t a : op_nodes[i]) {
      const Region& ra = nodes[static_cast<size_t>(a)].region;
      CHECK(region_inside(ra, out));
      CHECK(!ra.empty());
      total += ra.numel();
      for (int32_t b : op_nodes[i])
        if (a < b) CHECK(!regions_overlap(ra, nodes[static_cast<size_t>(b)].region));
      // Column tiles: all channels of a run of rows; only a conv with few
      // pixels per image cuts channels, over all its rows or runs of rows
      // of at least 32 pixels (tiler.cpp's kMinConvPixelsPerTile), 16 where
      // there are more threads than whole channel panels.
      if (op.type == OpType::Conv && (ra.begin[1] != 0 || ra.end[1] != out[1]))
        CHECK((ra.extent(2) == out[2] || ra.extent(2) * out[3] >= 16));
      if (op.type == OpType::Softmax)
        CHECK(ra.extent(static_cast<size_t>(op.attrs.axis)) ==
              out[static_cast<size_t>(op.attrs.axis)]);
    }
    CHECK(total == shape_numel(out));
    auto in = shapes_of(g, op);
    for (int32_t b : op_nodes[i]) {
      const TileNode& nb = nodes[static_cast<size_t>(b)];
      // Expected parents from the dependency boxes.
      std::set<int32_t> expected;
      for (const auto& dep : tile_dependencies(op, in, out, nb.region)) {
        int32_t p = producer[static_cast<size_t>(op.inputs[static_cast<size_t>(dep.operand)])];
        if (p < 0) continue;
        for (int32_t a : op_nodes[static_cast<size_t>(p)])
          if (regions_overlap(dep.region, nodes[static_cast<size_t>(a)].region)) expected.insert(a);
      }
      CHECK(expected == parents[static_cast<size_t>(b)]);
      // Every element actually read from a produced tensor comes from a parent.
      for_each_coord(nb.region, [&](const Coord& o) {
        brute_force_reads(op, in, o, [&](int32_t operand, const Coord& at) {
          int32_t p = producer[static_cast<size_t>(op.inputs[static_cast<size_t>(operand)])];
          if (p < 0) return;
          Region point{at, at};
          for (auto& e : point.end) ++e;
          for (int32_t a : op_nodes[static_cast<size_t>(p)])
            if (regions_overlap(point, nodes[static_cast<size_t>(a)].region))
              CHECK_MESSAGE(parents[static_cast<size_t>(b)].count(a), "missing edge ", a, "->", b);
        });
      });
    }
  }
}

}  // namespace

TEST_CASE("tiler: random graphs give exact, consistent tile graphs") {
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    Graph g = seed % 3 == 0 ? random_matrix_graph(rng) : random_cnn(rng);
    TilerOptions options;
    options.tiles = static_cast<int32_t>(std::vector<int64_t>{0, 1, 2, 3, 5, 7}[seed % 6]);
    options.threads = std::vector<int32_t>{1, 2, 3, 16}[seed % 4];
    auto nodes = build_tile_nodes(g, options);
    check_tile_graph(g, nodes);
  }
}

TEST_CASE("tiler: tile counts follow --tiles, capped by the splittable extent") {
  GraphBuilder b;
  int32_t x = b.input("x", {2, 3, 7, 5});
  int32_t w = b.weight("w", {4, 3, 3, 3});
  int32_t c = b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
  OpAttributes sa;
  sa.axis = 1;
  sa.softmax_coerce_2d = true;
  int32_t s = b.op(OpType::Softmax, {c}, sa);  // normalises [C,H,W] per image
  b.g.outputs = {s};
  auto count = [&](int32_t tiles, int32_t op) {
    auto nodes = build_tile_nodes(b.g, TilerOptions{tiles, 1});
    return std::count_if(nodes.begin(), nodes.end(), [&](const TileNode& n) { return n.op == op; });
  };
  CHECK(count(3, 0) == 4);     // 2 images x ceil(3/2) = 2 row runs each
  CHECK(count(6, 0) == 6);     // 2 images x 3 row runs
  CHECK(count(100, 0) == 14);  // capped at 7 rows per image
  CHECK(count(1, 0) == 2);     // images always get their own tiles
  CHECK(count(100, 1) == 2);   // softmax: only the batch dim may be cut
  // Every softmax tile of an image depends on all conv tiles of that image.
  auto nodes = build_tile_nodes(b.g, TilerOptions{6, 1});
  CHECK(nodes[6].parent_count == 3);
  CHECK(nodes[7].parent_count == 3);
  CHECK(nodes[6].depth == 1);
}

TEST_CASE("tiler: automatic tile count respects the minimum work per tile") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 2, 4, 4});
  b.g.outputs = {b.op(OpType::Relu, {x})};  // 32 elements: one tile is enough
  CHECK(build_tile_nodes(b.g, TilerOptions{0, 8}).size() == 1);
  GraphBuilder big;
  int32_t y = big.input("y", {1, 64, 56, 56});
  int32_t w = big.weight("w", {64, 64, 3, 3});
  big.g.outputs = {
      big.op(OpType::Conv, {y, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
  CHECK(build_tile_nodes(big.g, TilerOptions{0, 4}).size() == 8);  // 2 x threads
  // Weights of 512 KiB or more: one tile per thread.
  GraphBuilder heavy;
  int32_t h = heavy.input("h", {1, 128, 56, 56});
  int32_t hw = heavy.weight("w", {128, 128, 3, 3});  // 576 KiB
  heavy.g.outputs = {
      heavy.op(OpType::Conv, {h, hw}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
  CHECK(build_tile_nodes(heavy.g, TilerOptions{0, 4}).size() == 4);
}

TEST_CASE("tiler: convs with few pixels per image cut channels, not 1-row runs") {
  // ResNet's 7x7 stage: 49 pixels per image. With 2 threads (4 tiles
  // wanted) rows would give runs of 1-2 rows; the automatic rule keeps all
  // 7 rows (49 >= 32 pixels) and cuts the 64 channels in 4.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 32, 7, 7});
  int32_t w = b.weight("w", {64, 32, 3, 3});
  int32_t c = b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
  int32_t w2 = b.weight("w2", {64, 64, 1, 1});
  b.g.outputs = {b.op(OpType::Conv, {c, w2}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}))};
  auto nodes = build_tile_nodes(b.g, TilerOptions{0, 2});
  check_tile_graph(b.g, nodes);
  REQUIRE(nodes.size() == 8);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(nodes[i].region.begin[1] == static_cast<int64_t>(i) * 16);
    CHECK(nodes[i].region.end[1] == static_cast<int64_t>(i + 1) * 16);
    CHECK(nodes[i].region.begin[2] == 0);
    CHECK(nodes[i].region.end[2] == 7);
    // A 1x1 conv's channel tile reads every channel of its input.
    CHECK(nodes[4 + i].parent_count == 4);
  }
  // 14x14 (196 pixels) keeps runs of rows with all channels: 4 runs of 3-4
  // rows are 42-56 pixels each (a 1x1 conv, and a 3x3 one of stride 2).
  for (const auto& [kernel, stride, size] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 14}, {3, 2, 28}}) {
    CAPTURE(kernel);
    GraphBuilder big;
    int32_t y = big.input("y", {1, 32, size, size});
    int32_t wy = big.weight("w", {64, 32, kernel, kernel});
    const int64_t pad = kernel / 2;
    big.g.outputs = {
        big.op(OpType::Conv, {y, wy},
               spatial_attrs({kernel, kernel}, {stride, stride}, {pad, pad, pad, pad}, {1, 1}))};
    auto rows = build_tile_nodes(big.g, TilerOptions{0, 2});
    REQUIRE(rows.size() == 4);
    for (const TileNode& n : rows) CHECK(n.region.end[1] - n.region.begin[1] == 64);
  }
  // --tiles keeps the row tiling: 4 runs of 1-2 rows of the 7x7 output.
  auto forced = build_tile_nodes(b.g, TilerOptions{4, 2});
  for (size_t i = 0; i < 4; ++i) CHECK(forced[i].region.end[1] - forced[i].region.begin[1] == 64);

  // Channel runs are whole 64-wide GEMM panels where there are enough
  // (MobileNetV2's 7x7 projection to 320 channels: never runs of 80 that each
  // span two panels), else whole 16-channel vectors where there is only one
  // panel; and runs of rows join them where whole panels would not go round
  // the threads evenly (192 channels: 64 + 128 left one core idle a third of
  // the time). Whatever the cut, the busiest of the two cores (each taking
  // the next tile as it comes free) gets at most 10% more than an even
  // share; 20% for 160 channels (2.5 panels: whole panels cannot be shared
  // more evenly); 40 channels are left out (smaller tiles would fall under
  // the minimum work per tile).
  for (const auto& [channels, align, tenths] : {std::tuple<int64_t, int64_t, int64_t>{320, 64, 11},
                                                {192, 64, 11},
                                                {160, 64, 12},
                                                {96, 16, 11},
                                                {40, 16, 0}}) {
    CAPTURE(channels);
    GraphBuilder p;
    const int32_t in = p.input("x", {1, 32, 7, 7});
    const int32_t wp = p.weight("w", {channels, 32, 1, 1});
    p.g.outputs = {
        p.op(OpType::Conv, {in, wp}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}))};
    const auto tiles = build_tile_nodes(p.g, TilerOptions{0, 2});
    check_tile_graph(p.g, tiles);
    CHECK(tiles.size() >= 2);
    std::vector<int64_t> costs;
    for (const TileNode& t : tiles) {
      CAPTURE(t.region.begin[1]);
      CHECK(t.region.begin[1] % align == 0);
      costs.push_back((t.region.end[1] - t.region.begin[1]) *
                      (t.region.end[2] - t.region.begin[2]));
    }
    int64_t load[2] = {0, 0};  // each core takes the next tile as it comes free
    for (int64_t c : costs) (load[0] <= load[1] ? load[0] : load[1]) += c;
    if (tenths > 0) CHECK(std::max(load[0], load[1]) * 10 <= channels * 7 * tenths / 2);
  }
  // EfficientNet-B0's 7x7 projection to 192 channels, its weights large
  // enough for one tile per thread: two runs of rows x three panels.
  GraphBuilder e;
  const int32_t ex = e.input("x", {1, 1152, 7, 7});
  const int32_t ew = e.weight("w", {192, 1152, 1, 1});
  e.g.outputs = {e.op(OpType::Conv, {ex, ew}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}))};
  const auto projection = build_tile_nodes(e.g, TilerOptions{0, 2});
  REQUIRE(projection.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(projection[i].region.begin[2] == (i < 3 ? 0 : 3));
    CHECK(projection[i].region.begin[1] == static_cast<int64_t>(i % 3) * 64);
    CHECK(projection[i].region.end[1] == static_cast<int64_t>(i % 3 + 1) * 64);
  }
}

TEST_CASE("tiler: 3x3 stride-1 convs on maps of 14 to 27 rows cut channels over whole maps") {
  // cpu.conv_winograd's 4x4 blocks: runs of 3-7 rows hold too few of them.
  for (int64_t size : {14, 20, 27, 28, 13}) {
    CAPTURE(size);
    GraphBuilder b;
    int32_t x = b.input("x", {2, 32, size, size + 3});
    int32_t w = b.weight("w", {128, 32, 3, 3});
    b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
    auto nodes = build_tile_nodes(b.g, TilerOptions{0, 2});
    if (size == 14) check_tile_graph(b.g, nodes);
    const bool whole_maps = size >= 14 && size <= 27;
    // 4 tiles wanted, 2 images: two per image, by channels (0:64, 64:128)
    // or by rows.
    REQUIRE(nodes.size() == 4);
    for (size_t i = 0; i < nodes.size(); ++i) {
      CAPTURE(i);
      const Region& r = nodes[i].region;
      CHECK(r.begin[0] == static_cast<int64_t>(i / 2));
      if (whole_maps) {
        CHECK(r.begin[1] == static_cast<int64_t>(i % 2) * 64);
        CHECK(r.end[1] == static_cast<int64_t>(i % 2) * 64 + 64);
        CHECK(r.begin[2] == 0);
        CHECK(r.end[2] == size);
      } else {
        CHECK(r.end[1] - r.begin[1] == 128);
        CHECK(r.end[2] - r.begin[2] < size);
      }
    }
    // --tiles keeps rows.
    for (const TileNode& n : build_tile_nodes(b.g, TilerOptions{4, 2}))
      CHECK(n.region.end[1] - n.region.begin[1] == 128);
  }
  // One image: at most one channel tile per thread, not the 2 x threads
  // runs of rows would get.
  GraphBuilder one;
  int32_t x = one.input("x", {1, 32, 14, 14});
  int32_t w = one.weight("w", {256, 32, 3, 3});
  one.g.outputs = {
      one.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
  for (int32_t threads : {2, 3}) {
    CAPTURE(threads);
    auto nodes = build_tile_nodes(one.g, TilerOptions{0, threads});
    check_tile_graph(one.g, nodes);
    CHECK(nodes.size() == static_cast<size_t>(threads));
    for (const TileNode& n : nodes) CHECK(n.region.end[2] - n.region.begin[2] == 14);
  }
}

TEST_CASE("tiler: a conv the kernel forecast does not give Winograd is cut in plain runs of rows") {
  // A sparse 3x3 conv runs cpu.conv_sparse, whose channel tiles would each
  // stack the whole map's input again: the forecast says so, and the
  // tiler then cuts rows as for any conv (and not in 4-row blocks).
  struct Forecast final : KernelForecast {
    bool winograd = false;
    mutable int asked = 0;
    bool runs_winograd(const Graph&, int32_t) const override {
      ++asked;
      return winograd;
    }
  };
  for (const auto& [size, threads] : {std::pair<int64_t, int32_t>{14, 2}, {28, 2}, {56, 16}}) {
    CAPTURE(size);
    CAPTURE(threads);
    GraphBuilder b;
    int32_t x = b.input("x", {1, 256, size, size});
    int32_t w = b.weight("w", {256, 256, 3, 3});
    b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
    Forecast forecast;
    // Told Winograd: the same tiles as without a forecast.
    forecast.winograd = true;
    const auto shape_rule = build_tile_nodes(b.g, TilerOptions{0, threads});
    const auto told_winograd = build_tile_nodes(b.g, TilerOptions{0, threads, &forecast});
    REQUIRE(told_winograd.size() == shape_rule.size());
    for (size_t i = 0; i < shape_rule.size(); ++i)
      CHECK(told_winograd[i].region == shape_rule[i].region);
    CHECK(forecast.asked > 0);
    // Told otherwise: every tile holds all channels of a run of rows, the
    // runs as many as the rule wants (one per thread: the weight is large)
    // and not rounded to 4-row blocks.
    forecast.winograd = false;
    const auto nodes = build_tile_nodes(b.g, TilerOptions{0, threads, &forecast});
    if (size <= 28) check_tile_graph(b.g, nodes);
    REQUIRE(nodes.size() == static_cast<size_t>(threads));
    int64_t next_row = 0;
    for (const TileNode& n : nodes) {
      CHECK(n.region.begin[1] == 0);
      CHECK(n.region.end[1] == 256);
      CHECK(n.region.begin[2] == next_row);
      next_row = n.region.end[2];
    }
    CHECK(next_row == size);
    if (size == 56) CHECK(nodes[0].region.end[2] % 4 != 0);  // 56 / 16: runs of 3-4 rows
    // --tiles never asks.
    forecast.asked = 0;
    build_tile_nodes(b.g, TilerOptions{4, threads, &forecast});
    CHECK(forecast.asked == 0);
  }
}

TEST_CASE("tiler: 3x3 stride-1 convs on maps of 28 to 55 rows get one run of rows per thread") {
  // Winograd's GEMMs have one row per 4x4 block: runs of 7 rows of 28 would
  // give 14-row GEMMs. Under 32 channels (no Winograd) and from 56 rows on,
  // two runs per thread as usual.
  for (const auto& [size, channels, runs] :
       {std::tuple<int64_t, int64_t, size_t>{28, 32, 2}, {55, 64, 2}, {56, 32, 4}, {28, 16, 4}}) {
    CAPTURE(size);
    CAPTURE(channels);
    GraphBuilder b;
    int32_t x = b.input("x", {1, channels, size, size});
    int32_t w = b.weight("w", {channels, channels, 3, 3});
    b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
    auto nodes = build_tile_nodes(b.g, TilerOptions{0, 2});
    CHECK(nodes.size() == runs);
    for (const TileNode& n : nodes) CHECK(n.region.end[1] - n.region.begin[1] == channels);
  }
}

TEST_CASE("tiler: Winograd convs get whole 4-row blocks, and rows past the channel panels") {
  // cpu.conv_winograd covers a tile with 4x4 blocks from its first row: a run
  // of 1-2 rows computes a whole block row. {size, channels, threads}, then
  // the expected row runs and channel runs per image.
  struct Case {
    int64_t size, channels;
    int32_t threads;
    std::vector<int64_t> rows, channels_at;
  };
  for (const Case& c : {
           // One run per thread, in whole blocks (28 = 12 + 16, not 14 + 14).
           Case{28, 128, 2, {0, 12, 28}, {0, 128}},
           // 7 block rows for 16 threads: 7 runs x 2 panels.
           Case{28, 128, 16, {0, 4, 8, 12, 16, 20, 24, 28}, {0, 64, 128}},
           // 56 rows: at most one run per block row.
           Case{56, 64, 16, {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56}, {0, 64}},
           // 14x14: whole maps by channels while panels go round ...
           Case{14, 256, 2, {0, 14}, {0, 128, 256}},
           // ... past them runs of block rows as well.
           Case{14, 256, 16, {0, 4, 8, 12, 14}, {0, 64, 128, 192, 256}},
           Case{14, 256, 8, {0, 8, 14}, {0, 64, 128, 192, 256}},
       }) {
    CAPTURE(c.size);
    CAPTURE(c.threads);
    GraphBuilder b;
    int32_t x = b.input("x", {1, c.channels, c.size, c.size});
    int32_t w = b.weight("w", {c.channels, c.channels, 3, 3});
    b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
    auto nodes = build_tile_nodes(b.g, TilerOptions{0, c.threads});
    if (c.size <= 28) check_tile_graph(b.g, nodes);
    const size_t row_runs = c.rows.size() - 1, channel_runs = c.channels_at.size() - 1;
    REQUIRE(nodes.size() == row_runs * channel_runs);
    for (size_t i = 0; i < nodes.size(); ++i) {
      CAPTURE(i);
      const Region& r = nodes[i].region;
      CHECK(r.begin[2] == c.rows[i / channel_runs]);
      CHECK(r.end[2] == c.rows[i / channel_runs + 1]);
      CHECK(r.begin[1] == c.channels_at[i % channel_runs]);
      CHECK(r.end[1] == c.channels_at[i % channel_runs + 1]);
    }
  }
}

TEST_CASE("tiler: a small map with more threads than channel panels runs half as many pixels") {
  // ResNet-50's 7x7x512 3x3 convs: 8 panels of 64 channels for 16 threads;
  // two runs of rows (21 and 28 pixels) as well. At 2 threads: whole maps.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 512, 7, 7});
  int32_t w = b.weight("w", {512, 512, 3, 3});
  b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}))};
  auto many = build_tile_nodes(b.g, TilerOptions{0, 16});
  check_tile_graph(b.g, many);
  REQUIRE(many.size() == 16);
  for (size_t i = 0; i < many.size(); ++i) {
    CAPTURE(i);
    CHECK(many[i].region.begin[2] == (i < 8 ? 0 : 3));
    CHECK(many[i].region.end[2] == (i < 8 ? 3 : 7));
    CHECK(many[i].region.end[1] - many[i].region.begin[1] == 64);
  }
  for (const TileNode& n : build_tile_nodes(b.g, TilerOptions{0, 2}))
    CHECK(n.region.end[2] - n.region.begin[2] == 7);
}

TEST_CASE("tiler: a conv whose large weights outweigh its map is cut by channels") {
  // The YOLO-style head's 13x13 convs: more output channels than pixels and
  // 512 KiB or more of weights. Two runs of rows (7 and 6 rows) would each
  // stream all the weights and leave one core 17% more; two runs of 512
  // channels over the whole map are even and read each weight once.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 256, 13, 13});
  int32_t w = b.weight("w", {1024, 256, 1, 1});
  b.g.outputs = {b.op(OpType::Conv, {x, w}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}))};
  auto nodes = build_tile_nodes(b.g, TilerOptions{0, 2});
  check_tile_graph(b.g, nodes);
  REQUIRE(nodes.size() == 2);
  for (size_t i = 0; i < nodes.size(); ++i) {
    CAPTURE(i);
    CHECK(nodes[i].region.begin[2] == 0);
    CHECK(nodes[i].region.end[2] == 13);
    CHECK(nodes[i].region.begin[1] == static_cast<int64_t>(i) * 512);
    CHECK(nodes[i].region.end[1] == static_cast<int64_t>(i + 1) * 512);
  }
  // Fewer channels than pixels (B smaller than A), or weights under 512 KiB:
  // runs of rows, as before.
  for (const auto& [in_channels, out_channels] :
       {std::pair<int64_t, int64_t>{1024, 128}, std::pair<int64_t, int64_t>{64, 1024}}) {
    CAPTURE(out_channels);
    GraphBuilder r;
    int32_t rx = r.input("x", {1, in_channels, 13, 13});
    int32_t rw = r.weight("w", {out_channels, in_channels, 1, 1});
    r.g.outputs = {
        r.op(OpType::Conv, {rx, rw}, spatial_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}))};
    auto rows = build_tile_nodes(r.g, TilerOptions{0, 2});
    REQUIRE(rows.size() >= 2);
    for (const TileNode& n : rows) {
      CHECK(n.region.begin[1] == 0);
      CHECK(n.region.end[1] == out_channels);
    }
  }
}

TEST_CASE("tiler: a global average pool gets one tile per image") {
  for (int64_t images : {1, 3}) {
    CAPTURE(images);
    GraphBuilder b;
    int32_t x = b.input("x", {images, 96, 28, 28});
    b.g.outputs = {b.op(OpType::GlobalAveragePool, {x})};
    auto nodes = build_tile_nodes(b.g, TilerOptions{0, 4});
    check_tile_graph(b.g, nodes);
    REQUIRE(nodes.size() == static_cast<size_t>(images));
    for (size_t i = 0; i < nodes.size(); ++i) {
      CHECK(nodes[i].region.begin[0] == static_cast<int64_t>(i));
      CHECK(nodes[i].region.end[1] - nodes[i].region.begin[1] == 96);
    }
    // --tiles still cuts it (the first dim of 2 or more: channels of one
    // image, else the images).
    CHECK(build_tile_nodes(b.g, TilerOptions{6, 4}).size() == (images == 1 ? 6u : 3u));
  }
}

TEST_CASE("tiler: a channel Concat of maps takes row tiles even after grid-tiled inputs") {
  // YOLO's route: a map from a grid-tiled op (here a Transpose) beside a
  // conv's, concatenated along channels. Each tile holds every channel of
  // a run of rows; the Transpose keeps its channel grid.
  GraphBuilder b;
  int32_t x = b.input("x", {1, 8, 16, 16});
  OpAttributes perm;
  perm.perm = {0, 1, 2, 3};
  int32_t t = b.op(OpType::Transpose, {x}, perm);
  int32_t c = b.op(OpType::Conv, {x, b.weight("w", {8, 8, 3, 3})},
                   spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
  OpAttributes channels;
  channels.axis = 1;
  b.g.outputs = {b.op(OpType::Concat, {t, c}, channels)};
  auto nodes = build_tile_nodes(b.g, TilerOptions{4, 2});
  check_tile_graph(b.g, nodes);
  int concat_tiles = 0, transpose_channel_cuts = 0;
  for (const TileNode& n : nodes) {
    if (n.op == 0) transpose_channel_cuts += n.region.extent(1) < 8;
    if (n.op != 2) continue;
    ++concat_tiles;
    CHECK(n.region.extent(1) == 16);
    CHECK(n.region.extent(2) == 4);
  }
  CHECK(concat_tiles == 4);
  CHECK(transpose_channel_cuts == 4);
}

TEST_CASE("tiler: elementwise ops on a conv's map take its row tiles, whatever their op type") {
  // HardSwish (MobileNetV3) and LeakyRelu where they are not fused: the
  // ops past BatchNormalization in OpType otherwise take the transformers'
  // grid tiles, which cut a map's channels. A Transpose's output keeps them.
  for (OpType type : {OpType::HardSwish, OpType::LeakyRelu, OpType::Relu}) {
    CAPTURE(op_type_name(type));
    GraphBuilder b;
    int32_t x = b.input("x", {1, 8, 16, 16});
    int32_t c = b.op(OpType::Conv, {x, b.weight("w", {32, 8, 3, 3})},
                     spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
    int32_t a = b.op(type, {c});
    OpAttributes perm;
    perm.perm = {0, 1, 2, 3};
    int32_t t = b.op(OpType::Transpose, {a}, perm);
    b.g.outputs = {b.op(type, {t})};
    auto nodes = build_tile_nodes(b.g, TilerOptions{4, 2});
    check_tile_graph(b.g, nodes);
    int after_conv = 0, after_transpose = 0;
    for (const TileNode& n : nodes) {
      if (n.op == 1) {
        ++after_conv;
        CHECK(n.region.extent(1) == 32);  // every channel of a run of rows
        CHECK(n.region.extent(2) == 4);
      }
      if (n.op == 3) after_transpose += n.region.extent(1) < 32;  // the grid's channel cuts
    }
    CHECK(after_conv == 4);
    CHECK(after_transpose == 4);
  }
}

TEST_CASE("tiler: at one thread the automatic rule keeps ops whole, one tile per image") {
  GraphBuilder b;
  int32_t x = b.input("x", {2, 8, 28, 28});
  int32_t w = b.weight("w", {8, 8, 3, 3});
  int32_t c = b.op(OpType::Conv, {x, w}, spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
  b.g.outputs = {b.op(OpType::Relu, {c})};
  auto nodes = build_tile_nodes(b.g, TilerOptions{0, 1});
  check_tile_graph(b.g, nodes);
  REQUIRE(nodes.size() == 4);  // conv and Relu, one tile per image each
  for (const TileNode& n : nodes) {
    CHECK(n.region.end[0] - n.region.begin[0] == 1);
    CHECK(n.region.end[2] - n.region.begin[2] == 28);
  }
  CHECK(build_tile_nodes(b.g, TilerOptions{0, 2}).size() == 8);  // 2 x threads per op
  CHECK(build_tile_nodes(b.g, TilerOptions{3, 1}).size() == 8);  // --tiles still cuts
}

TEST_CASE("tiler: a MatMul whose shared B is larger than A is cut by columns of 64") {
  // A transformer projection in small: [1, 16, 8] x [8, N], N > 16 rows:
  // column runs, so that each tile reads its own slice of B once.
  for (const int64_t n : {128, 200, 1000}) {
    CAPTURE(n);
    GraphBuilder b;
    const int32_t x = b.input("x", {1, 16, 8});
    const int32_t w = b.weight("w", {8, n});
    b.g.outputs = {b.op(OpType::MatMul, {x, w})};
    const auto nodes = build_tile_nodes(b.g, TilerOptions{4, 2});
    check_tile_graph(b.g, nodes);
    REQUIRE(nodes.size() == static_cast<size_t>(std::min<int64_t>(4, n / 64)));
    for (size_t i = 0; i < nodes.size(); ++i) {
      CAPTURE(i);
      const Region& r = nodes[i].region;
      CHECK(r.begin[1] == 0);
      CHECK(r.end[1] == 16);  // every row
      CHECK(r.begin[2] % 64 == 0);
      if (i + 1 < nodes.size()) CHECK(r.end[2] % 64 == 0);
      CHECK(r.end[2] - r.begin[2] >= 64);
    }
    CHECK(nodes.back().region.end[2] == n);
  }
  // More rows than columns (a batch of long sequences): rows, as before.
  GraphBuilder tall;
  const int32_t x = tall.input("x", {1, 300, 8});
  const int32_t w = tall.weight("w", {8, 128});
  tall.g.outputs = {tall.op(OpType::MatMul, {x, w})};
  const auto rows = build_tile_nodes(tall.g, TilerOptions{4, 2});
  check_tile_graph(tall.g, rows);
  REQUIRE(rows.size() == 4);
  for (const TileNode& node : rows) {
    CHECK(node.region.begin[2] == 0);
    CHECK(node.region.end[2] == 128);
  }
  // Fewer column runs than threads: runs of 32+ rows as well. BERT-base's
  // 768-wide projections of 128 tokens at 16 threads: 2 x 12 tiles; at 2
  // threads whole columns; a batch of sequences (rows over two dims) keeps
  // whole columns too.
  for (const auto& [batch, threads, row_runs] :
       {std::tuple<int64_t, int32_t, size_t>{1, 16, 2}, {1, 2, 1}, {2, 16, 1}}) {
    CAPTURE(batch);
    CAPTURE(threads);
    GraphBuilder bert;
    const int32_t h = bert.input("h", {batch, 128, 768});
    const int32_t wq = bert.weight("w", {768, 768});
    bert.g.outputs = {bert.op(OpType::MatMul, {h, wq})};
    const auto nodes = build_tile_nodes(bert.g, TilerOptions{0, threads});
    if (threads == 2) check_tile_graph(bert.g, nodes);
    const size_t columns = threads == 2 ? 2 : 12;  // 2: weights of 2.25 MiB, a tile per thread
    REQUIRE(nodes.size() == row_runs * columns);
    for (size_t i = 0; i < nodes.size(); ++i) {
      CAPTURE(i);
      const Region& r = nodes[i].region;
      const int64_t rows = 128 / static_cast<int64_t>(row_runs);
      CHECK(r.begin[1] == static_cast<int64_t>(i / columns) * rows);
      CHECK(r.end[1] == static_cast<int64_t>(i / columns + 1) * rows);
      CHECK(r.end[2] - r.begin[2] == 768 / static_cast<int64_t>(columns));
      CHECK(r.end[0] - r.begin[0] == batch);
    }
  }
  // The same in small, with every edge checked: [1, 64, 8] x [8, 256] at 16
  // threads is 2 runs of 32 rows x 4 of 64 columns.
  GraphBuilder grid;
  const int32_t g_in = grid.input("x", {1, 64, 8});
  const int32_t g_w = grid.weight("w", {8, 256});
  const int32_t g_mm = grid.op(OpType::MatMul, {g_in, g_w});
  grid.g.outputs = {grid.op(OpType::Relu, {g_mm})};
  const auto grid_nodes = build_tile_nodes(grid.g, TilerOptions{0, 16});
  check_tile_graph(grid.g, grid_nodes);
  CHECK(std::count_if(grid_nodes.begin(), grid_nodes.end(),
                      [](const TileNode& n) { return n.op == 0; }) == 8);
  // Attention (B batched per head) keeps its per-head grid.
  GraphBuilder attention;
  const int32_t q = attention.input("q", {1, 4, 16, 8});
  const int32_t k = attention.input("k", {1, 4, 8, 160});
  attention.g.outputs = {attention.op(OpType::MatMul, {q, k})};
  for (const TileNode& node : build_tile_nodes(attention.g, TilerOptions{4, 2})) {
    CHECK(node.region.begin[3] == 0);
    CHECK(node.region.end[3] == 160);
  }
}

TEST_CASE("tiler: rejects a tensor whose shape disagrees with its op") {
  GraphBuilder b;
  int32_t x = b.input("x", {1, 2, 4, 4});
  int32_t r = b.op(OpType::Relu, {x});
  b.g.tensors[static_cast<size_t>(r)].shape = {1, 2, 4, 5};
  b.g.outputs = {r};
  CHECK_THROWS_AS(build_tile_nodes(b.g, TilerOptions{}), tessera::Error);
}

TEST_CASE("tiler: attention is cut per batch x head, then per block of queries") {
  // scores = Q K^T over [batch 2, heads 3, tokens 8, d 4]; Softmax; context = P V.
  GraphBuilder b;
  int32_t q = b.input("q", {2, 3, 8, 4});
  int32_t kt = b.input("kt", {2, 3, 4, 8});
  int32_t v = b.input("v", {2, 3, 8, 4});
  int32_t scores = b.op(OpType::MatMul, {q, kt});
  OpAttributes last;
  last.axis = 3;
  int32_t p = b.op(OpType::Softmax, {scores}, last);
  int32_t context = b.op(OpType::MatMul, {p, v});
  OpAttributes ln;
  ln.axis = 3;
  int32_t gamma = b.weight("gamma", {4});
  b.g.outputs = {b.op(OpType::LayerNormalization, {context, gamma}, ln)};
  auto tiles_of = [&](int32_t tiles, int32_t op) {
    std::vector<Region> out;
    for (const TileNode& n : build_tile_nodes(b.g, TilerOptions{tiles, 1}))
      if (n.op == op) out.push_back(n.region);
    return out;
  };
  // 6 tiles: one per (batch, head), all tokens and all columns.
  auto six = tiles_of(6, 0);
  REQUIRE(six.size() == 6);
  for (const Region& r : six) {
    CHECK(r.extent(0) == 1);
    CHECK(r.extent(1) == 1);
    CHECK(r.extent(2) == 8);
    CHECK(r.extent(3) == 8);
  }
  // 12 tiles: then halves of the queries; the columns are never cut.
  auto twelve = tiles_of(12, 0);
  REQUIRE(twelve.size() == 12);
  for (const Region& r : twelve) {
    CHECK(r.extent(2) == 4);
    CHECK(r.extent(3) == 8);
  }
  // Heads stay independent paths: a context tile of one (batch, head) has
  // parents only in that head's softmax tiles (and those in its scores).
  auto nodes = build_tile_nodes(b.g, TilerOptions{6, 1});
  for (const TileNode& n : nodes) {
    for (int32_t c : n.children) {
      const TileNode& child = nodes[static_cast<size_t>(c)];
      if (child.op == 3) continue;  // LayerNorm over d only: per (batch, head) too
      CHECK(child.region.begin[0] == n.region.begin[0]);
      CHECK(child.region.begin[1] == n.region.begin[1]);
    }
  }
  // LayerNormalization never cuts the normalised dims.
  for (const Region& r : tiles_of(100, 3)) CHECK(r.extent(3) == 4);
}
