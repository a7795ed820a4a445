// Squeeze pools in two stages (graph/split_global_pool.hpp): the row means
// are an AveragePool the compiler's shape rules accept, the GlobalAveragePool
// reads them, inputs and one-row or one-column maps are left alone, and the
// row means' tiles follow the producer's runs of rows one to one (each
// waits for its own rows only). The numbers are checked end to end against
// ONNX Runtime by the conformance networks with squeeze pools
// (net_classifier_head, the exported EfficientNet blocks).
#include <doctest/doctest.h>

#include "graph/compiler.hpp"
#include "graph/split_global_pool.hpp"
#include "graph/tiler.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

namespace {

// in [n, 4, h, w] -> Conv 3x3 (8 channels) -> GlobalAveragePool "pool".
GraphBuilder conv_then_pool(int64_t n, int64_t h, int64_t w) {
  GraphBuilder b;
  const int32_t x = b.op(OpType::Conv, {b.input("in", {n, 4, h, w}), b.weight("w", {8, 4, 3, 3})},
                         spatial_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), "conv");
  b.g.outputs = {b.op(OpType::GlobalAveragePool, {x}, {}, "pool")};
  return b;
}

}  // namespace

TEST_CASE("split_global_pools: an AveragePool over each row, then the pool over the row means") {
  GraphBuilder b = conv_then_pool(2, 12, 9);
  const int32_t map = b.g.ops[0].outputs[0];
  const std::vector<RewrittenPattern> split = split_global_pools(b.g);
  REQUIRE(split.size() == 1);
  CHECK(split[0].op == "pool");
  check_graph(b.g);  // shapes agree with the ops' own shape rules
  REQUIRE(b.g.ops.size() == 3);
  const Operator& rows = b.g.ops[1];
  CHECK(rows.type == OpType::AveragePool);
  CHECK(rows.name == "pool_row_means");
  CHECK(rows.inputs == std::vector<int32_t>{map});
  CHECK(rows.attrs.kernel_shape == std::vector<int64_t>{1, 9});
  CHECK(rows.attrs.strides == std::vector<int64_t>{1, 9});
  CHECK_FALSE(rows.attrs.count_include_pad);
  CHECK(b.g.tensors[static_cast<size_t>(rows.outputs[0])].shape == Shape{2, 8, 12, 1});
  const Operator& pool = b.g.ops[2];
  CHECK(pool.type == OpType::GlobalAveragePool);
  CHECK(pool.inputs == rows.outputs);
  CHECK(b.g.outputs == pool.outputs);  // the model's output is unchanged
}

TEST_CASE("split_global_pools leaves model inputs and maps of one row or column alone") {
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{1, 9}, {12, 1}, {1, 1}}) {
    CAPTURE(h);
    CAPTURE(w);
    GraphBuilder b = conv_then_pool(1, h, w);
    CHECK(split_global_pools(b.g).empty());
    CHECK(b.g.ops.size() == 2);
  }
  GraphBuilder input;
  input.g.outputs = {
      input.op(OpType::GlobalAveragePool, {input.input("in", {1, 4, 8, 8})}, {}, "pool")};
  CHECK(split_global_pools(input.g).empty());
  GraphBuilder rank3;
  rank3.g.outputs = {rank3.op(OpType::GlobalAveragePool,
                              {rank3.op(OpType::Relu, {rank3.input("in", {1, 4, 8})})}, {}, "p")};
  CHECK(split_global_pools(rank3.g).empty());
}

TEST_CASE("split_global_pools: each run of row means waits for its own rows only") {
  // 56x56 at 2 threads: the conv and the row means are both cut into four
  // runs of 14 rows, so each row-means tile has one parent, and the pool one
  // tile reading them all.
  GraphBuilder b = conv_then_pool(1, 56, 56);
  split_global_pools(b.g);
  const std::vector<TileNode> nodes = build_tile_nodes(b.g, TilerOptions{0, 2});
  std::vector<const TileNode*> conv, rows, pool;
  for (const TileNode& n : nodes) (n.op == 0 ? conv : n.op == 1 ? rows : pool).push_back(&n);
  REQUIRE(conv.size() == 4);
  REQUIRE(rows.size() == 4);
  REQUIRE(pool.size() == 1);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(rows[i]->region.begin[2] == conv[i]->region.begin[2]);
    CHECK(rows[i]->region.end[2] == conv[i]->region.end[2]);
    CHECK(rows[i]->parent_count == 1);
    const std::vector<int32_t>& children = conv[i]->children;
    CHECK(std::find(children.begin(), children.end(), 4 + static_cast<int32_t>(i)) !=
          children.end());
  }
  CHECK(pool[0]->parent_count == 4);
}

TEST_CASE("compile_graph splits squeeze pools unless told not to or for one thread, and says so") {
  GraphBuilder b = conv_then_pool(1, 8, 8);
  CompileReport report;
  CompileOptions on;
  on.threads = 2;
  const TileGraph split = compile_graph(b.g, on, &report);
  CHECK(split.ops.size() == 3);
  bool noted = false;
  for (const std::string& note : report.notes)
    noted = noted || note.find("split into row means") != std::string::npos;
  CHECK(noted);
  CompileOptions off = on;
  off.split_global_pools = false;
  CHECK(compile_graph(b.g, off, nullptr).ops.size() == 2);
  CompileOptions one = on;  // one thread: no core waits for the pool
  one.threads = 1;
  CHECK(compile_graph(b.g, one, nullptr).ops.size() == 2);
}
