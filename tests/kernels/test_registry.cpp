// The registry: every op type has a reference kernel, listed first; unknown
// variants are nullptr.
#include "kernel_test_util.hpp"

namespace tessera::kernels::test {
namespace {

TEST_CASE("Registry: a reference kernel for every op type, unknown variants are null") {
  for (uint16_t i = 0; i <= static_cast<uint16_t>(graph::kLastOpType); ++i) {
    const auto type = static_cast<OpType>(i);
    INFO(graph::op_type_name(type));
    CHECK(static_cast<bool>(find_tile_kernel(type, "reference")));
    CHECK(!find_tile_kernel(type, "no-such-variant"));
    CHECK(!find_tile_kernel(type, ""));
    const std::vector<std::string> variants = tile_kernel_variants(type);
    REQUIRE(!variants.empty());
    CHECK(variants.front() == "reference");
    for (const std::string& v : variants) CHECK(static_cast<bool>(find_tile_kernel(type, v)));
  }
  // Distinct ops get distinct kernels (a mis-wired table row shows up here).
  const bool add_is_mul =
      find_tile_kernel(OpType::Add, "reference") == find_tile_kernel(OpType::Mul, "reference");
  const bool relu_is_sigmoid =
      find_tile_kernel(OpType::Relu, "reference") == find_tile_kernel(OpType::Sigmoid, "reference");
  CHECK(!add_is_mul);
  CHECK(!relu_is_sigmoid);
  // An out-of-range op type (e.g. from a newer file) finds nothing.
  CHECK(!find_tile_kernel(static_cast<OpType>(999), "reference"));
  CHECK(tile_kernel_variants(static_cast<OpType>(999)).empty());
}

TEST_CASE("Reference kernels reject a region outside the output with tessera::Error") {
  const graph::Operator op = make_op(OpType::Relu);
  const std::vector<Tensor> in{{{2}, {1, 2}}};
  CHECK_THROWS_AS(
      run_region(find_tile_kernel(OpType::Relu, "reference"), op, in, {2}, Region{{0}, {3}}),
      tessera::Error);
}

}  // namespace
}  // namespace tessera::kernels::test
