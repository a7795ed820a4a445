// Shape functions against ONNX's formulas, computed by hand in each case.
#include <doctest/doctest.h>

#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "graph_builder.hpp"

using namespace tessera::graph;
using tessera::graph::test::make_op;
using tessera::graph::test::spatial_attrs;

namespace {

// Checks the shape function throws tessera::Error whose message names the op
// and contains `needle`.
void expect_error(const Operator& op, const std::vector<Shape>& in, const std::string& needle) {
  try {
    infer_output_shape(op, in);
    FAIL("expected an error containing '" << needle << "'");
  } catch (const tessera::Error& e) {
    std::string msg = e.what();
    CHECK_MESSAGE(msg.find(op.name) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(std::string(op_type_name(op.type))) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
  }
}

}  // namespace

TEST_CASE("Conv output shape: pads, strides, dilation, groups") {
  auto conv = make_op(OpType::Conv, spatial_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}), "c1");
  // (7 + 1 + 1 - 3) / 2 + 1 = 4
  CHECK(infer_output_shape(conv, {{1, 3, 7, 7}, {8, 3, 3, 3}}) == Shape{1, 8, 4, 4});
  CHECK(infer_output_shape(conv, {{1, 3, 7, 7}, {8, 3, 3, 3}, {8}}) == Shape{1, 8, 4, 4});
  // Dilation 2: extent 5; H: (7 + 0 + 2 - 5) / 1 + 1 = 5, W: (11 + 3 + 0 - 5) / 3 + 1 = 4.
  conv.attrs = spatial_attrs({3, 3}, {1, 3}, {0, 3, 2, 0}, {2, 2});
  CHECK(infer_output_shape(conv, {{2, 3, 7, 11}, {4, 3, 3, 3}}) == Shape{2, 4, 5, 4});
  // Non-square kernel, groups: C = 6 = 3 * 2, M = 4; H: (10-3)/1+1 = 8, W: (9-2)/1+1 = 8.
  conv.attrs = spatial_attrs({3, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  conv.attrs.group = 2;
  CHECK(infer_output_shape(conv, {{2, 6, 10, 9}, {4, 3, 3, 2}}) == Shape{2, 4, 8, 8});
  // Depthwise: group = C = M.
  conv.attrs.group = 6;
  CHECK(infer_output_shape(conv, {{1, 6, 10, 9}, {6, 1, 3, 2}}) == Shape{1, 6, 8, 8});
  // Kernel as large as the padded input: one output.
  conv.attrs = spatial_attrs({5, 5}, {1, 1}, {1, 1, 1, 1}, {1, 1});
  CHECK(infer_output_shape(conv, {{1, 1, 3, 3}, {1, 1, 5, 5}}) == Shape{1, 1, 1, 1});
}

TEST_CASE("Conv errors") {
  auto conv = make_op(OpType::Conv, spatial_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}), "cbad");
  expect_error(conv, {{1, 4, 8, 8}, {8, 3, 3, 3}}, "input channels");
  conv.attrs.group = 2;
  expect_error(conv, {{1, 6, 8, 8}, {5, 3, 3, 3}}, "not divisible by group");
  conv.attrs.group = 0;
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "group must be >= 1");
  conv.attrs.group = int64_t{1} << 62;  // would overflow C / group arithmetic
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "group");
  conv.attrs.group = 1;
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}, {7}}, "bias");
  expect_error(conv, {{1, 3, 8, 8}}, "inputs");
  expect_error(conv, {{3, 8, 8}, {8, 3, 3, 3}}, "rank 4");
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 2}}, "kernel_shape");
  expect_error(conv, {{1, 3, 0, 8}, {8, 3, 3, 3}}, "dimension 0");
  conv.attrs.strides = {1, 0};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "strides");
  conv.attrs.strides = {1};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "strides must have 2");
  conv.attrs.strides = {1, 1};
  conv.attrs.dilations = {0, 1};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "dilations");
  conv.attrs.dilations = {1, 1};
  conv.attrs.pads = {0, -1, 0, 0};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "pads");
  conv.attrs.pads = {0, 0, 0};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "pads must have 4");
  conv.attrs.pads = {0, 0, 0, 0};
  conv.attrs.dilations = {4, 1};  // extent 9 > 8
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, 3, 3}}, "kernel extent");
  conv.attrs.dilations = {int64_t{1} << 39, 1};  // (k-1)*d would overflow in int64 if unchecked
  conv.attrs.kernel_shape = {int64_t{1} << 30, 3};
  expect_error(conv, {{1, 3, 8, 8}, {8, 3, int64_t{1} << 30, 3}}, "kernel extent");
}

TEST_CASE("Pool output shape: floor, ceil_mode and the last-window rule") {
  auto pool = make_op(OpType::MaxPool, spatial_attrs({3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}), "p");
  // floor((6 - 3) / 2) + 1 = 2
  CHECK(infer_output_shape(pool, {{1, 2, 6, 6}}) == Shape{1, 2, 2, 2});
  pool.attrs.ceil_mode = true;
  // ceil(3 / 2) + 1 = 3; last window starts at 4 < 6: kept.
  CHECK(infer_output_shape(pool, {{1, 2, 6, 6}}) == Shape{1, 2, 3, 3});
  // k=2, s=2, pads 1,1 on H=5: ceil((5+2-2)/2)+1 = 4, but (4-1)*2 = 6 >= 5+1: 3.
  // W=4, pads 0: ceil((4-2)/2)+1 = 2.
  pool.attrs = spatial_attrs({2, 2}, {2, 2}, {1, 0, 1, 0}, {1, 1});
  pool.attrs.ceil_mode = true;
  CHECK(infer_output_shape(pool, {{1, 1, 5, 4}}) == Shape{1, 1, 3, 2});
  pool.attrs.ceil_mode = false;
  // floor(5/2)+1 = 3
  CHECK(infer_output_shape(pool, {{1, 1, 5, 4}}) == Shape{1, 1, 3, 2});
  // Dilated average pool: extent 5, (9 + 2 + 2 - 5) / 2 + 1 = 5.
  auto avg = make_op(OpType::AveragePool, spatial_attrs({3, 3}, {2, 2}, {2, 2, 2, 2}, {2, 2}), "a");
  CHECK(infer_output_shape(avg, {{3, 4, 9, 9}}) == Shape{3, 4, 5, 5});
  // A window entirely in padding is rejected.
  auto bad =
      make_op(OpType::AveragePool, spatial_attrs({1, 1}, {1, 1}, {1, 0, 0, 0}, {1, 1}), "pb");
  expect_error(bad, {{1, 1, 3, 3}}, "padding");
  bad.attrs.pads = {0, 0, 2, 0};  // windows 3, 4 lie in the end padding
  expect_error(bad, {{1, 1, 3, 3}}, "padding");
  // Dilation 3, k 2, pad 2 on H=2: window 0 taps -2 and 1: hits row 1.
  bad.attrs = spatial_attrs({2, 1}, {1, 1}, {2, 0, 0, 0}, {3, 1});
  CHECK(infer_output_shape(bad, {{1, 1, 2, 3}}) == Shape{1, 1, 1, 3});
  // Dilation 3, k 2, pad 1 on H=1: window 0 taps -1 and 2: both outside.
  bad.attrs.pads = {1, 0, 2, 0};
  expect_error(bad, {{1, 1, 1, 3}}, "padding");
  expect_error(pool, {{1, 1, 5}}, "rank 4");
}

TEST_CASE("GlobalAveragePool, unary ops, BatchNormalization") {
  auto gap = make_op(OpType::GlobalAveragePool, {}, "g");
  CHECK(infer_output_shape(gap, {{2, 5, 7, 3}}) == Shape{2, 5, 1, 1});
  expect_error(gap, {{2, 5}}, "rank");
  for (OpType t : {OpType::Relu, OpType::Sigmoid, OpType::Clip}) {
    auto op = make_op(t, {}, "u");
    CHECK(infer_output_shape(op, {{3, 1, 4}}) == Shape{3, 1, 4});
    expect_error(op, {{3}, {3}}, "inputs");
  }
  auto bn = make_op(OpType::BatchNormalization, {}, "bn");
  CHECK(infer_output_shape(bn, {{2, 3, 4, 4}, {3}, {3}, {3}, {3}}) == Shape{2, 3, 4, 4});
  expect_error(bn, {{2, 3, 4, 4}, {3}, {3}, {4}, {3}}, "mean");
  expect_error(bn, {{2, 3, 4, 4}, {3}, {3}, {3}}, "inputs");
}

TEST_CASE("Gemm shapes and C broadcasting") {
  auto gemm = make_op(OpType::Gemm, {}, "fc");
  CHECK(infer_output_shape(gemm, {{4, 3}, {3, 5}}) == Shape{4, 5});
  gemm.attrs.trans_a = true;
  gemm.attrs.trans_b = true;
  CHECK(infer_output_shape(gemm, {{3, 4}, {5, 3}}) == Shape{4, 5});
  for (Shape c : {Shape{5}, Shape{1}, Shape{4, 1}, Shape{1, 5}, Shape{4, 5}, Shape{}})
    CHECK(infer_output_shape(gemm, {{3, 4}, {5, 3}, c}) == Shape{4, 5});
  expect_error(gemm, {{3, 4}, {5, 3}, {4}}, "broadcastable");
  expect_error(gemm, {{3, 4}, {5, 2}}, "inner");
  expect_error(gemm, {{3, 4, 1}, {5, 3}}, "rank 2");
}

TEST_CASE("MatMul: numpy rules, 1-D operands, batch broadcast") {
  auto mm = make_op(OpType::MatMul, {}, "mm");
  CHECK(infer_output_shape(mm, {{4, 3}, {3, 5}}) == Shape{4, 5});
  CHECK(infer_output_shape(mm, {{3}, {3, 5}}) == Shape{5});
  CHECK(infer_output_shape(mm, {{4, 3}, {3}}) == Shape{4});
  CHECK(infer_output_shape(mm, {{3}, {3}}) == Shape{});
  CHECK(infer_output_shape(mm, {{2, 1, 4, 3}, {5, 3, 6}}) == Shape{2, 5, 4, 6});
  CHECK(infer_output_shape(mm, {{7, 4, 3}, {3, 2}}) == Shape{7, 4, 2});
  CHECK(infer_output_shape(mm, {{3}, {7, 3, 2}}) == Shape{7, 2});
  expect_error(mm, {{4, 3}, {2, 5}}, "inner");
  expect_error(mm, {{2, 4, 3}, {3, 3, 5}}, "broadcast");
}

TEST_CASE("Add/Mul multidirectional broadcast") {
  for (OpType t : {OpType::Add, OpType::Mul}) {
    auto op = make_op(t, {}, "bc");
    CHECK(infer_output_shape(op, {{3, 1, 5}, {4, 1}}) == Shape{3, 4, 5});
    CHECK(infer_output_shape(op, {{1}, {2, 3}}) == Shape{2, 3});
    CHECK(infer_output_shape(op, {{2, 3}, {2, 3}}) == Shape{2, 3});
    expect_error(op, {{3}, {4}}, "broadcast");
  }
}

TEST_CASE("Flatten, Reshape, Concat, Softmax") {
  auto flat = make_op(OpType::Flatten, {}, "f");
  flat.attrs.axis = 2;
  flat.attrs.new_shape = {6, 20};
  CHECK(infer_output_shape(flat, {{2, 3, 4, 5}}) == Shape{6, 20});
  flat.attrs.new_shape = {2, 60};
  expect_error(flat, {{2, 3, 4, 5}}, "flattening");
  flat.attrs.axis = 5;
  expect_error(flat, {{2, 3, 4, 5}}, "axis");
  auto reshape = make_op(OpType::Reshape, {}, "r");
  reshape.attrs.new_shape = {4, 30};
  CHECK(infer_output_shape(reshape, {{2, 3, 4, 5}}) == Shape{4, 30});
  reshape.attrs.new_shape = {4, 31};
  expect_error(reshape, {{2, 3, 4, 5}}, "element count");
  reshape.attrs.new_shape = {-1, 120};
  expect_error(reshape, {{2, 3, 4, 5}}, "new_shape");

  auto cat = make_op(OpType::Concat, {}, "cat");
  cat.attrs.axis = 1;
  CHECK(infer_output_shape(cat, {{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}) == Shape{2, 9, 4});
  expect_error(cat, {{2, 3, 4}, {2, 5, 5}}, "outside the axis");
  expect_error(cat, {{2, 3, 4}, {2, 5}}, "rank");
  cat.attrs.axis = 3;
  expect_error(cat, {{2, 3, 4}}, "axis");

  auto sm = make_op(OpType::Softmax, {}, "sm");
  sm.attrs.axis = 1;
  CHECK(infer_output_shape(sm, {{2, 7}}) == Shape{2, 7});
  sm.attrs.axis = 2;
  expect_error(sm, {{2, 7}}, "axis");
  sm.attrs.axis = -1;
  expect_error(sm, {{2, 7}}, "axis");
}

TEST_CASE("Transformer ops: output shapes by hand and invalid attributes named") {
  auto t = make_op(OpType::Transpose, {}, "t1");
  t.attrs.perm = {0, 2, 1, 3};
  CHECK(infer_output_shape(t, {{2, 3, 5, 7}}) == Shape{2, 5, 3, 7});
  t.attrs.perm = {0, 2, 2, 3};
  expect_error(t, {{2, 3, 5, 7}}, "not a permutation");

  auto g = make_op(OpType::Gather, {}, "g1");
  g.attrs.axis = 1;
  // data [2, 9, 4], indices [3, 5]: [2] + [3, 5] + [4].
  CHECK(infer_output_shape(g, {{2, 9, 4}, {3, 5}}) == Shape{2, 3, 5, 4});
  g.attrs.indices = {0, -9, 8};
  g.attrs.indices_shape = {3};
  CHECK(infer_output_shape(g, {{2, 9, 4}}) == Shape{2, 3, 4});
  g.attrs.indices = {0, 9, 1};
  expect_error(g, {{2, 9, 4}}, "index 9 is out of range for axis 1 of size 9");

  auto rm = make_op(OpType::ReduceMean, {}, "rm1");
  rm.attrs.axes = {0, 2};
  CHECK(infer_output_shape(rm, {{2, 3, 4}}) == Shape{1, 3, 1});
  rm.attrs.keepdims = false;
  CHECK(infer_output_shape(rm, {{2, 3, 4}}) == Shape{3});
  rm.attrs.axes = {2, 0};
  expect_error(rm, {{2, 3, 4}}, "sorted, unique");

  auto ln = make_op(OpType::LayerNormalization, {}, "ln1");
  ln.attrs.axis = 1;
  CHECK(infer_output_shape(ln, {{2, 3, 4}, {3, 4}, {3, 4}}) == Shape{2, 3, 4});
  expect_error(ln, {{2, 3, 4}, {4}}, "Scale must have shape [3,4]");

  auto sl = make_op(OpType::Slice, {}, "s1");
  sl.attrs.starts = {4, 0};
  sl.attrs.steps = {-2, 3};
  sl.attrs.new_shape = {3, 2};  // rows 4, 2, 0; columns 0, 3
  CHECK(infer_output_shape(sl, {{5, 6}}) == Shape{3, 2});
  sl.attrs.new_shape = {3, 3};  // column 6 is past the end
  expect_error(sl, {{5, 6}}, "overrun dim 1");

  auto ex = make_op(OpType::Expand, {}, "e1");
  ex.attrs.new_shape = {2, 3, 4};
  CHECK(infer_output_shape(ex, {{3, 1}}) == Shape{2, 3, 4});
  expect_error(ex, {{2, 4}}, "cannot be broadcast");
  expect_error(ex, {{1, 1, 1, 4}}, "does not broadcast to new_shape");

  auto w = make_op(OpType::Where, {}, "w1");
  CHECK(infer_output_shape(w, {{4, 1}, {1, 5}, {}}) == Shape{4, 5});
  auto d = make_op(OpType::Div, {}, "d1");
  expect_error(d, {{3}, {4}}, "cannot be broadcast");
}

TEST_CASE("Shapes of Pad, Resize, Max/Min and the new activations; their bad attributes") {
  auto pad = make_op(OpType::Pad, {}, "p1");
  pad.attrs.pads = {1, -1, 2, 0};  // [3, 4] -> [3 + 1 + 2, 4 - 1 + 0]
  CHECK(infer_output_shape(pad, {{3, 4}}) == Shape{6, 3});
  pad.attrs.pads = {1, 2};
  expect_error(pad, {{3, 4}}, "needs 2 per dim");
  pad.attrs.pads = {0, -4, 0, 0};
  expect_error(pad, {{3, 4}}, "output has dimension 0");
  pad.attrs.pads = {0, 0, 0, 0};
  pad.attrs.pad_mode = static_cast<PadMode>(7);  // e.g. from a corrupt .tess file
  expect_error(pad, {{3, 4}}, "pad mode 7 is unknown");

  auto rs = make_op(OpType::Resize, {}, "r1");
  rs.attrs.new_shape = {1, 2, 10, 3};
  rs.attrs.scales = {1, 1, 2, 0.5f};
  CHECK(infer_output_shape(rs, {{1, 2, 5, 6}}) == Shape{1, 2, 10, 3});
  expect_error(rs, {{2, 5, 6}}, "one entry per input dim");
  rs.attrs.scales = {1, 1, 2, -0.5f};
  expect_error(rs, {{1, 2, 5, 6}}, "scales must be positive");
  rs.attrs.scales = {1, 1, 2, 0.5f};
  rs.attrs.coordinate_mode = static_cast<CoordinateMode>(9);
  expect_error(rs, {{1, 2, 5, 6}}, "is unknown");

  auto mx = make_op(OpType::Max, {}, "m1");
  CHECK(infer_output_shape(mx, {{4, 1}, {5}}) == Shape{4, 5});
  expect_error(mx, {{3}, {4}}, "cannot be broadcast");
  auto lr = make_op(OpType::LeakyRelu, {}, "l1");
  CHECK(infer_output_shape(lr, {{2, 7}}) == Shape{2, 7});
}

TEST_CASE("Operand element types: float32 everywhere but Gather's int64 indices") {
  auto g = make_op(OpType::Gather, {}, "g2");
  CHECK_NOTHROW(check_operand_dtypes(g, {DType::Float32, DType::Int64}, DType::Float32));
  CHECK_THROWS_WITH_AS(check_operand_dtypes(g, {DType::Float32, DType::Float32}, DType::Float32),
                       doctest::Contains("input 1 is float32 but must be int64"), tessera::Error);
  auto a = make_op(OpType::Add, {}, "a2");
  CHECK_THROWS_WITH_AS(check_operand_dtypes(a, {DType::Int64, DType::Float32}, DType::Float32),
                       doctest::Contains("input 0 is int64 but must be float32"), tessera::Error);
}
