// Dependency functions against brute force: the returned box of each operand
// must equal the bounding box of the elements the op's definition reads.
#include <doctest/doctest.h>

#include <random>

#include "brute_force_reads.hpp"
#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "random_ops.hpp"

using namespace tessera::graph;
using namespace tessera::graph::test;

TEST_CASE("dependency boxes equal brute-force bounding boxes") {
  for (OpType type : all_op_types()) {
    for (uint32_t iter = 0; iter < 300; ++iter) {
      uint32_t seed = 1000u * static_cast<uint32_t>(type) + iter;
      std::mt19937 rng(seed);
      OpCase c = random_op(rng, type);
      Region out = rnd(rng, 0, 3) ? random_region(rng, c.out) : Region::whole(c.out);
      CAPTURE(seed);
      INFO(op_type_name(type), " in0 ", shape_to_string(c.in[0]), " out ", shape_to_string(c.out),
           " region ", region_to_string(out));
      auto deps = tile_dependencies(c.op, c.in, c.out, out);
      auto boxes = brute_force_boxes(c.op, c.in, out);
      std::vector<const Region*> got(c.in.size(), nullptr);
      for (const auto& d : deps) {
        REQUIRE(d.operand >= 0);
        REQUIRE(static_cast<size_t>(d.operand) < c.in.size());
        CHECK_MESSAGE(got[static_cast<size_t>(d.operand)] == nullptr, "operand listed twice");
        got[static_cast<size_t>(d.operand)] = &d.region;
        CHECK(!d.region.empty());
        CHECK(region_inside(d.region, c.in[static_cast<size_t>(d.operand)]));
      }
      for (size_t i = 0; i < c.in.size(); ++i) {
        INFO("operand ", i, " brute ", region_to_string(boxes[i]));
        // Conv weights are listed whole per output channel even when every
        // tap of the region lands in padding (the kernel may still load them).
        if (boxes[i].empty() && !(type == OpType::Conv && i == 1)) {
          CHECK_MESSAGE(got[i] == nullptr, "operand read nothing but is listed");
          continue;
        }
        REQUIRE_MESSAGE(got[i] != nullptr, "operand is read but missing");
        if (type == OpType::Conv && i == 1) {
          if (boxes[i].empty()) boxes[i] = *got[i];
          // Conv weights: the box covers the output channels' filters whole.
          CHECK(region_intersection(*got[i], boxes[i]) == boxes[i]);
          CHECK(got[i]->begin[0] == out.begin[1]);
          CHECK(got[i]->end[0] == out.end[1]);
        } else {
          CHECK_MESSAGE(*got[i] == boxes[i], "got " << region_to_string(*got[i]));
        }
      }
    }
  }
}

TEST_CASE("conv dependency: worked example") {
  // 3x3 conv, stride 2, pad 1 on 8x8; output rows [1,3) read rows 1..5.
  Operator op = make_op(OpType::Conv, spatial_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}));
  op.attrs.group = 2;
  std::vector<Shape> in = {{2, 4, 8, 8}, {6, 2, 3, 3}, {6}};
  Region out{{1, 2, 1, 0}, {2, 4, 3, 4}};  // output channels 2,3 span both groups
  auto deps = tile_dependencies(op, in, {2, 6, 4, 4}, out);
  REQUIRE(deps.size() == 3);
  CHECK(deps[0].region == Region{{1, 0, 1, 0}, {2, 4, 6, 8}});
  CHECK(deps[1].region == Region{{2, 0, 0, 0}, {4, 2, 3, 3}});
  CHECK(deps[2].region == Region{{2}, {4}});
  out = Region{{0, 0, 0, 0}, {1, 3, 1, 1}};  // group 0 only; row 0 reads rows 0..1
  deps = tile_dependencies(op, in, {2, 6, 4, 4}, out);
  CHECK(deps[0].region == Region{{0, 0, 0, 0}, {1, 2, 2, 2}});
}

TEST_CASE("dependency rejects regions outside the output") {
  Operator op = make_op(OpType::Relu, {}, "r");
  CHECK_THROWS_AS(tile_dependencies(op, {{2, 3}}, {2, 3}, Region{{0, 0}, {3, 3}}), tessera::Error);
  CHECK_THROWS_AS(tile_dependencies(op, {{2, 3}}, {2, 3}, Region{{1, 0}, {1, 3}}), tessera::Error);
}
