// kernels/cpu/gemm_int8.hpp against its definition (per-column symmetric B,
// per-row A with zero point 128, written out here in double arithmetic) and
// against float32 within the stated error bound, on every ISA path the CPU
// runs, random shapes (1, primes, non-multiples of 4, 16 and the 6-row
// block) and random tiles and epilogues.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm_int8.hpp"
#include "test_random.hpp"

namespace {

using namespace tessera::kernels::cpu;
using tessera::test::pick;

struct IsaGuard {
  Int8Isa saved = int8_isa();
  ~IsaGuard() { set_int8_isa(saved); }
};

std::vector<Int8Isa> isas() {
  std::vector<Int8Isa> out{Int8Isa::kPortable};
  for (Int8Isa isa : {Int8Isa::kAvx2, Int8Isa::kAvx512Vnni})
    if (int8_isa_supported(isa)) out.push_back(isa);
  return out;
}

// Every ISA the CPU runs, each with both B layouts.
std::vector<std::pair<Int8Isa, Int8Layout>> isa_layouts() {
  std::vector<std::pair<Int8Isa, Int8Layout>> out;
  for (Int8Isa isa : isas())
    for (Int8Layout layout : {Int8Layout::kDense, Int8Layout::kBlocks32})
      out.emplace_back(isa, layout);
  return out;
}

std::vector<float> random_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols, bool zero_rows) {
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float& v : m) v = value(rng);
  if (zero_rows && rows > 1)  // an all-zero row: scale 0, the zero point only
    std::fill(m.begin(), m.begin() + cols, 0.0f);
  return m;
}

// The definition in gemm_int8.hpp, element by element.
double quantized_product(const float* a_row, const float* b, int64_t k, int64_t n, int64_t ldb,
                         bool transposed) {
  const auto bv = [&](int64_t kk) { return transposed ? b[n * ldb + kk] : b[kk * ldb + n]; };
  float amax = 0.0f, bmax = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) {
    amax = std::max(amax, std::fabs(a_row[kk]));
    bmax = std::max(bmax, std::fabs(bv(kk)));
  }
  const float a_inv = amax > 0 ? 127.0f / amax : 0.0f, b_inv = bmax > 0 ? 127.0f / bmax : 0.0f;
  int64_t sum = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const auto qa =
        static_cast<int64_t>(std::clamp(std::nearbyint(a_row[kk] * a_inv), -127.0f, 127.0f));
    const auto qb =
        static_cast<int64_t>(std::clamp(std::nearbyint(bv(kk) * b_inv), -127.0f, 127.0f));
    sum += qa * qb;
  }
  return static_cast<double>(sum) * (amax / 127.0) * (bmax / 127.0);
}

GemmEpilogue random_epilogue(std::mt19937_64& rng, const std::vector<float>& bias,
                             const std::vector<float>& residual, int64_t ld) {
  GemmEpilogue ep;
  ep.activation =
      pick(rng, {GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kClip,
                 GemmActivation::kSigmoid, GemmActivation::kGelu, GemmActivation::kSilu});
  ep.clip_min = -0.5f;
  ep.clip_max = 1.5f;
  if (rng() % 2) {
    ep.bias = bias.data();
    ep.bias_kind = GemmBias::kPerColumn;
  }
  if (rng() % 2) {
    ep.residual = residual.data();
    ep.ld_residual = ld;
    ep.residual_position =
        rng() % 2 ? GemmResidual::kBeforeActivation : GemmResidual::kAfterActivation;
  }
  return ep;
}

TEST_CASE(
    "int8 GEMM tiles: definition, float32 bound, epilogue, every ISA and layout the same bits") {
  IsaGuard guard;
  std::mt19937_64 rng(tessera::test::base_seed("test_gemm_int8"));
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t m = pick<int64_t>(rng, {1, 2, 5, 6, 7, 13, 31, 97, 100});
    const int64_t k = pick<int64_t>(rng, {1, 3, 4, 5, 17, 32, 33, 64, 129, 257});
    const int64_t n = pick<int64_t>(rng, {1, 7, 15, 16, 17, 32, 33, 64, 65, 100});
    const bool transposed = rng() % 2;
    CAPTURE(trial);
    CAPTURE(m);
    CAPTURE(k);
    CAPTURE(n);
    CAPTURE(transposed);
    const std::vector<float> a = random_matrix(rng, m, k, rng() % 3 == 0);
    const std::vector<float> b =
        transposed ? random_matrix(rng, n, k, false) : random_matrix(rng, k, n, false);
    const int64_t ldb = transposed ? k : n;
    const std::vector<float> bias = random_matrix(rng, 1, n, false);
    const std::vector<float> residual = random_matrix(rng, m, n, false);
    const GemmEpilogue ep = random_epilogue(rng, bias, residual, n);
    const int64_t m0 = rng() % m, m1 = m0 + 1 + rng() % (m - m0);
    const int64_t n0 = rng() % n, n1 = n0 + 1 + rng() % (n - n0);
    const GemmTile tile{.m0 = m0, .m1 = m1, .n0 = n0, .n1 = n1};
    const float sentinel = std::numeric_limits<float>::quiet_NaN();

    std::vector<std::vector<float>> results;
    for (const auto& [isa, layout] : isa_layouts()) {
      CAPTURE(int8_isa_name(isa));
      CAPTURE(layout == Int8Layout::kBlocks32);
      set_int8_isa(isa);
      const QuantizedMatrix q = quantize_b(b.data(), k, n, ldb, transposed, layout);
      CHECK(q.isa() == isa);
      if (layout == Int8Layout::kBlocks32)
        CHECK(q.stored_blocks() <=
              std::llround(int8_block_coverage(b.data(), k, n, ldb, transposed) *
                           static_cast<double>(((k + 31) / 32) * ((n + 31) / 32))));
      std::vector<float> plain(static_cast<size_t>(m * n), sentinel);
      std::vector<float> fused(static_cast<size_t>(m * n), sentinel);
      int8_gemm_tile(a.data(), k, q, plain.data(), n, tile);
      int8_gemm_tile(a.data(), k, q, fused.data(), n, tile, ep);
      // The whole matrix in one tile gives the tile's cells the same bits.
      std::vector<float> whole(static_cast<size_t>(m * n), sentinel);
      int8_gemm_tile(a.data(), k, q, whole.data(), n, {.m0 = 0, .m1 = m, .n0 = 0, .n1 = n});
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = static_cast<size_t>(i * n + j);
          const bool inside = i >= m0 && i < m1 && j >= n0 && j < n1;
          if (!inside) {
            REQUIRE(std::isnan(plain[at]));
            REQUIRE(std::isnan(fused[at]));
            continue;
          }
          const double defined =
              quantized_product(a.data() + i * k, b.data(), k, j, ldb, transposed);
          REQUIRE(plain[at] == doctest::Approx(defined).epsilon(1e-5).scale(1e-30));
          double exact = 0.0;
          for (int64_t kk = 0; kk < k; ++kk)
            exact += double{a[static_cast<size_t>(i * k + kk)]} *
                     (transposed ? b[static_cast<size_t>(j * ldb + kk)]
                                 : b[static_cast<size_t>(kk * ldb + j)]);
          const double bound = int8_error_bound(a.data() + i * k, b.data(), k, j, ldb, transposed);
          REQUIRE(std::fabs(plain[at] - exact) <= bound);
          REQUIRE(fused[at] == apply_epilogue_scalar(plain[at], ep, i, j));
          REQUIRE(whole[at] == plain[at]);
        }
      }
      results.push_back(fused);
    }
    for (size_t r = 1; r < results.size(); ++r)
      CHECK(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)) ==
            0);
  }
}

TEST_CASE("int8 GEMM: the error bound is tight enough to catch a wrong scale") {
  // A kernel off by one quantization step per product would exceed the
  // bound: the test above would see it. Here: the bound is below 2% of
  // Σ|a·b| for a typical row, so it is a real check, not a formality.
  std::mt19937_64 rng(7);
  const int64_t k = 256, n = 1;
  const std::vector<float> a = random_matrix(rng, 1, k, false);
  const std::vector<float> b = random_matrix(rng, k, n, false);
  double magnitude = 0.0;
  for (int64_t kk = 0; kk < k; ++kk) magnitude += std::fabs(double{a[kk]} * b[kk]);
  CHECK(int8_error_bound(a.data(), b.data(), k, 0, n, false) < 0.02 * magnitude);
}

TEST_CASE("int8 GEMM: block coverage counts 32x32 blocks holding a nonzero") {
  std::vector<float> b(static_cast<size_t>(70 * 40), 0.0f);  // 3 x 2 blocks, edges partial
  b[0] = 1.0f;                                               // block (0, 0)
  b[static_cast<size_t>(65 * 40 + 39)] = -2.0f;              // block (2, 1), the corner
  CHECK(int8_block_coverage(b.data(), 70, 40, 40, false) == doctest::Approx(2.0 / 6.0));
  // The same matrix read as B^T [N, K] = [40, 70]: rows are columns.
  CHECK(int8_block_coverage(b.data(), 40, 70, 40, true) == doctest::Approx(2.0 / 6.0));
  const QuantizedMatrix q = quantize_b(b.data(), 70, 40, 40, false, Int8Layout::kBlocks32);
  CHECK(q.stored_blocks() == 2);
  CHECK(q.strips() == 2);
  CHECK(q.strip_blocks()[1] - q.strip_blocks()[0] == 1);
  CHECK(q.block_group()[1] == 16);  // k block 2 starts at group 2·32/4
}

TEST_CASE("int8 GEMM: bad arguments are refused") {
  const std::vector<float> b = {1.0f, std::numeric_limits<float>::infinity(), 0.0f, 2.0f};
  CHECK_THROWS_AS(quantize_b(b.data(), 2, 2, 2, false), std::invalid_argument);
  CHECK_THROWS_AS(quantize_b(b.data(), 0, 2, 2, false), std::invalid_argument);
  CHECK_THROWS_AS(quantize_b(b.data(), 2, 2, 1, false), std::invalid_argument);
  const std::vector<float> ok = {1.0f, -1.0f, 0.5f, 2.0f};
  const QuantizedMatrix q = quantize_b(ok.data(), 2, 2, 2, false);
  std::vector<float> c(4);
  CHECK_THROWS_AS(
      int8_gemm_tile(ok.data(), 2, q, c.data(), 2, {.m0 = 0, .m1 = 2, .n0 = 0, .n1 = 3}),
      std::invalid_argument);
  CHECK_THROWS_AS(int8_gemm_tile(ok.data(), 2, q, c.data(), 2, {.m0 = 0, .m1 = 2, .n0 = 0, .n1 = 2},
                                 GemmEpilogue{.accumulate = true}),
                  std::invalid_argument);
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni))
    CHECK_THROWS_AS(set_int8_isa(Int8Isa::kAvx512Vnni), std::invalid_argument);
}

}  // namespace
