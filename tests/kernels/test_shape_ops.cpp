// Flatten, Reshape and Concat reference kernels vs. naive index arithmetic;
// tiling.
#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

TEST_CASE("Flatten, Reshape reference: same row-major data; tiling") {
  for (int trial = 0; trial < 80; ++trial) {
    const uint64_t seed = base_seed() + 7000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    Shape in_shape(static_cast<size_t>(rng.uniform(1, 4)));
    for (int64_t& d : in_shape) d = rng.size(7);
    const bool flatten = trial % 2 == 0;
    graph::Operator op = make_op(flatten ? OpType::Flatten : OpType::Reshape);
    Shape out_shape;
    if (flatten) {
      op.attrs.axis = rng.uniform(0, static_cast<int64_t>(in_shape.size()));
      int64_t outer = 1;
      for (int64_t d = 0; d < op.attrs.axis; ++d) outer *= in_shape[d];
      out_shape = {outer, graph::shape_numel(in_shape) / outer};
    } else {
      // Regroup the prime factors of the element count into 1-4 new dims.
      std::vector<int64_t> factors;
      int64_t n = graph::shape_numel(in_shape);
      for (int64_t p = 2; n > 1; ++p)
        while (n % p == 0) {
          factors.push_back(p);
          n /= p;
        }
      out_shape.assign(static_cast<size_t>(rng.uniform(1, 4)), 1);
      for (int64_t f : factors) out_shape[rng.engine() % out_shape.size()] *= f;
    }
    op.attrs.new_shape = out_shape;
    const Tensor x = random_tensor(in_shape, rng);
    check_kernel(op, {x}, out_shape, std::vector<double>(x.data.begin(), x.data.end()), rng);
  }
}

TEST_CASE("Reshape/Flatten reference: an aliased output (the memory plan's) is left as is") {
  // graph/memory_plan.hpp gives a Reshape's output its input's bytes: the
  // kernel must neither copy nor clobber them; NHWC there is a plan bug.
  for (OpType type : {OpType::Reshape, OpType::Flatten}) {
    graph::Operator op = make_op(type);
    op.attrs.axis = 1;
    const Shape in_shape{2, 3, 2, 2}, out_shape{2, 12};
    op.attrs.new_shape = out_shape;
    std::vector<float> bytes(24);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<float>(i) * 0.5f;
    const std::vector<float> before = bytes;
    const ConstTensorView in{bytes.data(), &in_shape};
    const Region tile{{1, 5}, {2, 11}};
    TileArgs args;
    args.op = &op;
    args.inputs = &in;
    args.input_count = 1;
    args.output = {bytes.data(), &out_shape};
    args.region = &tile;
    find_tile_kernel(type, "reference")(args);
    CHECK(bytes == before);
    const ConstTensorView nhwc{bytes.data(), &in_shape, graph::Layout::NHWC};
    args.inputs = &nhwc;
    CHECK_THROWS_WITH_AS(find_tile_kernel(type, "reference")(args),
                         doctest::Contains("aliased reshape needs NCHW"), tessera::Error);
  }
}

TEST_CASE("Concat reference: any axis, 1-4 inputs vs naive; tiling") {
  for (int trial = 0; trial < 120; ++trial) {
    const uint64_t seed = base_seed() + 8000 + trial;
    INFO("seed " << seed << " (set TESSERA_TEST_SEED to replay)");
    Rng rng(seed);
    Shape out_shape(static_cast<size_t>(rng.uniform(1, 4)));
    for (int64_t& d : out_shape) d = rng.size(7);
    graph::Operator op = make_op(OpType::Concat);
    const size_t axis =
        static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(out_shape.size()) - 1));
    op.attrs.axis = static_cast<int64_t>(axis);
    std::vector<Tensor> inputs;
    out_shape[axis] = 0;
    const int64_t count = rng.uniform(1, 4);
    for (int64_t i = 0; i < count; ++i) {
      Shape s = out_shape;
      s[axis] = rng.size(5);
      out_shape[axis] += s[axis];
      inputs.push_back(random_tensor(s, rng));
    }
    std::vector<double> expected;
    for (int64_t flat = 0; flat < graph::shape_numel(out_shape); ++flat) {
      std::vector<int64_t> index = unravel(flat, out_shape);
      size_t i = 0;
      while (index[axis] >= inputs[i].shape[axis]) index[axis] -= inputs[i++].shape[axis];
      expected.push_back(inputs[i].data[ravel(index, inputs[i].shape)]);
    }
    check_kernel(op, inputs, out_shape, expected, rng);
  }
}

TEST_CASE("Shape ops reference: hand-computed cases") {
  // Concat [[1,2]] and [[3],[4]]... along axis 1: [[1,2],[3,4]] ++ [[5],[6]]
  // -> [[1,2,5],[3,4,6]].
  graph::Operator op = make_op(OpType::Concat);
  op.attrs.axis = 1;
  const TileKernel concat = find_tile_kernel(OpType::Concat, "reference");
  CHECK(run_whole(concat, op, {{{2, 2}, {1, 2, 3, 4}}, {{2, 1}, {5, 6}}}, {2, 3}) ==
        std::vector<float>{1, 2, 5, 3, 4, 6});
  op.attrs.axis = 0;
  CHECK(run_whole(concat, op, {{{1, 2}, {1, 2}}, {{2, 2}, {3, 4, 5, 6}}}, {3, 2}) ==
        std::vector<float>{1, 2, 3, 4, 5, 6});
  // Reshape [2,3] -> [3,2]: the data is unchanged.
  const TileKernel reshape = find_tile_kernel(OpType::Reshape, "reference");
  CHECK(run_whole(reshape, make_op(OpType::Reshape), {{{2, 3}, {1, 2, 3, 4, 5, 6}}}, {3, 2}) ==
        std::vector<float>{1, 2, 3, 4, 5, 6});
}

}  // namespace
}  // namespace tessera::kernels::test
