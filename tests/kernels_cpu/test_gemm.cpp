// Every SGEMM microkernel of kernels/cpu/gemm_microkernels.inc against a
// naive double-precision reference, through gemm_tile(): the named edges
// (m < MR, n < NR, remainders, K = 1, K across cache blocks, tiles at
// unaligned offsets, strided A and C, transposed B, every epilogue), then
// random shapes, A in place, packed and through a table of k offsets
// (gemm_tile_indirect). Every element outside the tile is a sentinel that
// must survive. Seeds: TESSERA_TEST_SEED=<n> replays a run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "test_random.hpp"

namespace {

using namespace tessera::kernels::cpu;

uint64_t base_seed() {
  return tessera::test::base_seed("test_cpu_gemm");
}

constexpr float kSentinel = -12345.5f;

struct GemmCase {
  int64_t rows = 1, cols = 1, k = 1;  // the whole C is rows × cols
  GemmTile tile;                      // the part computed
  int64_t lda_pad = 0, ldb_pad = 0, ldc_pad = 0;
  bool transposed = false;
  bool accumulate = false;
  GemmBias bias_kind = GemmBias::kNone;
  GemmActivation activation = GemmActivation::kNone;
  bool residual = false;
  GemmResidual residual_position = GemmResidual::kBeforeActivation;
  float clip_min = -0.5f, clip_max = 0.75f;
  float leaky_alpha = 0.2f;
  bool zero_b = false;
  int64_t next_b_k = 0;       // > 0: a next_b of [next_b_k, cols] to fetch (C must not change)
  GemmBlocking blocking;      // run() sets pack_a_min_columns to force A packed or in place
  bool own_blocking = false;  // the kernel's own blocking instead of `blocking`
  // > 0: gemm_tile_indirect() with this row stride and random k offsets into
  // a span of 3K + 5 floats per row (rows overlap, offsets repeat).
  int64_t indirect_stride = 0;

  std::string describe() const {
    std::ostringstream s;
    s << "C " << rows << "x" << cols << " K " << k << " tile [" << tile.m0 << "," << tile.m1
      << ")x[" << tile.n0 << "," << tile.n1 << ") pads " << lda_pad << "/" << ldb_pad << "/"
      << ldc_pad << " transposed " << transposed << " accumulate " << accumulate << " bias "
      << static_cast<int>(bias_kind) << " act " << static_cast<int>(activation) << " residual "
      << residual << " after " << (residual_position == GemmResidual::kAfterActivation)
      << " zero_b " << zero_b << " next_b K " << next_b_k << " indirect stride " << indirect_stride;
    if (own_blocking)
      s << " the kernel's own blocking";
    else
      s << " blocking kc " << blocking.kc << " mc " << blocking.mc << " nc " << blocking.nc
        << " pack A from " << blocking.pack_a_min_columns << " columns, panels outer up to "
        << blocking.l1_panel_bytes << " bytes";
    return s.str();
  }
};

GemmCase whole(int64_t m, int64_t n, int64_t k) {
  GemmCase c;
  c.rows = m;
  c.cols = n;
  c.k = k;
  c.tile = {0, m, 0, n};
  return c;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Runs one case on `kernel` and checks every element of C.
void check_case(const GemmMicrokernel& kernel, const GemmCase& gc, uint64_t seed) {
  INFO(kernel.name, " seed ", seed, ": ", gc.describe());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t m = gc.rows, n = gc.cols, k = gc.k;
  const int64_t lda = k + gc.lda_pad, ldc = n + gc.ldc_pad;
  const int64_t ldb = (gc.transposed ? k : n) + gc.ldb_pad;
  // Exact sizes (the last row without its padding), so that a read past the
  // matrices is caught by AddressSanitizer.
  auto exact = [](int64_t count, int64_t ld, int64_t width) {
    return static_cast<size_t>(count == 0 ? 0 : (count - 1) * ld + width);
  };
  const int64_t span = 3 * k + 5;
  std::vector<float> a(gc.indirect_stride > 0 ? exact(m, gc.indirect_stride, span)
                                              : exact(m, lda, k)),
      b(exact(gc.transposed ? n : k, ldb, gc.transposed ? k : n));
  for (float& x : a) x = dist(rng);
  std::vector<int32_t> offsets(static_cast<size_t>(gc.indirect_stride > 0 ? k : 0));
  for (int32_t& o : offsets)
    o = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, span - 1)(rng));
  auto a_at = [&](int64_t i, int64_t kk) {
    return gc.indirect_stride > 0 ? a[i * gc.indirect_stride + offsets[kk]] : a[i * lda + kk];
  };
  for (float& x : b) x = gc.zero_b ? 0.0f : 2.0f * dist(rng);
  std::vector<float> bias;
  if (gc.bias_kind == GemmBias::kPerColumn) bias.resize(static_cast<size_t>(n));
  if (gc.bias_kind == GemmBias::kPerRow) bias.resize(static_cast<size_t>(m));
  for (float& x : bias) x = dist(rng);
  const int64_t ldr = n + 3;
  std::vector<float> residual(gc.residual ? exact(m, ldr, n) : 0);
  for (float& x : residual) x = dist(rng);

  std::vector<float> c(static_cast<size_t>(m * ldc), kSentinel);
  const GemmTile& t = gc.tile;
  for (int64_t i = t.m0; i < t.m1; ++i)
    for (int64_t j = t.n0; j < t.n1; ++j) c[i * ldc + j] = gc.accumulate ? dist(rng) : kSentinel;
  const std::vector<float> c_before = c;
  double c_tile_max = 0;  // the initial tile values (the sentinel is no part of the sum)
  if (gc.accumulate)
    for (int64_t i = t.m0; i < t.m1; ++i)
      for (int64_t j = t.n0; j < t.n1; ++j)
        c_tile_max = std::max(c_tile_max, static_cast<double>(std::fabs(c[i * ldc + j])));

  const PackedMatrix packed = pack_b(b.data(), k, n, ldb, gc.transposed, kernel);
  REQUIRE(&packed.microkernel() == &kernel);
  GemmEpilogue ep;
  ep.accumulate = gc.accumulate;
  ep.bias = bias.empty() ? nullptr : bias.data();
  ep.bias_kind = gc.bias_kind;
  ep.activation = gc.activation;
  ep.clip_min = gc.clip_min;
  ep.clip_max = gc.clip_max;
  ep.leaky_alpha = gc.leaky_alpha;
  ep.residual = gc.residual ? residual.data() : nullptr;
  ep.ld_residual = ldr;
  ep.residual_position = gc.residual_position;
  // The B of a next call, only ever prefetched; packed from B's own values
  // (wrapping) so that it is no larger than needed.
  std::vector<float> next(static_cast<size_t>(gc.next_b_k * n));
  for (size_t i = 0; i < next.size(); ++i) next[i] = b.empty() ? 0.0f : b[i % b.size()];
  const PackedMatrix next_packed =
      gc.next_b_k > 0 ? pack_b(next.data(), gc.next_b_k, n, n, false, kernel) : PackedMatrix();
  if (!gc.own_blocking) set_gemm_blocking(gc.blocking);
  if (gc.indirect_stride > 0)
    gemm_tile_indirect(a.data(), gc.indirect_stride, offsets.data(), packed, c.data(), ldc, t, ep);
  else
    gemm_tile(a.data(), lda, packed, c.data(), ldc, t, ep,
              gc.next_b_k > 0 ? &next_packed : nullptr);
  reset_gemm_blocking();

  const double eps = std::numeric_limits<float>::epsilon();
  const double tol = 2.0 * eps *
                         (static_cast<double>(k) * max_abs(a) * max_abs(b) + 1.0 + max_abs(bias) +
                          max_abs(residual) + max_abs(c_before)) +
                     1e-30;
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (i < t.m0 || i >= t.m1 || j < t.n0 || j >= t.n1) {
        if (got != kSentinel && bad++ < 5) FAIL_CHECK("wrote outside the tile at ", i, ",", j);
        continue;
      }
      double x = gc.accumulate ? c_before[i * ldc + j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk)
        x += static_cast<double>(a_at(i, kk)) * (gc.transposed ? b[j * ldb + kk] : b[kk * ldb + j]);
      if (gc.bias_kind == GemmBias::kPerColumn) x += bias[j];
      if (gc.bias_kind == GemmBias::kPerRow) x += bias[i];
      const double r = gc.residual ? residual[i * ldr + j] : 0.0;
      if (gc.residual_position == GemmResidual::kBeforeActivation) x += r;
      switch (gc.activation) {
        case GemmActivation::kNone:
          break;
        case GemmActivation::kRelu:
          x = std::max(x, 0.0);
          break;
        case GemmActivation::kClip:
          x = std::clamp<double>(x, gc.clip_min, gc.clip_max);
          break;
        case GemmActivation::kSigmoid:
          x = 1.0 / (1.0 + std::exp(-x));
          break;
        case GemmActivation::kGelu:
          x = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
          break;
        case GemmActivation::kGeluTanh:
          x = 0.5 * x *
              (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
          break;
        case GemmActivation::kSilu:
          x = x / (1.0 + std::exp(-x));
          break;
        case GemmActivation::kLeakyRelu:
          x = x >= 0.0 ? x : gc.leaky_alpha * x;
          break;
      }
      if (gc.residual_position == GemmResidual::kAfterActivation) x += r;
      if (!(std::fabs(got - x) <= tol) && bad++ < 5)
        FAIL_CHECK("C[", i, ",", j, "] = ", got, ", expected ", x, " (tolerance ", tol, ")");
    }
  }
  CHECK(bad == 0);
}

// The named edges for one microkernel, then every epilogue, then random
// shapes: XNNPACK's tester habit.
void test_microkernel(const GemmMicrokernel& kernel) {
  if (!gemm_isa_supported(kernel.isa)) {
    MESSAGE("skipped: this CPU cannot run ", kernel.name);
    return;
  }
  const int64_t mr = kernel.mr, nr = kernel.nr;
  uint64_t seed = base_seed() * 1000003u + std::hash<std::string_view>{}(kernel.name);
  // Every case three times: A read in place and A packed into micro-panels
  // (with the given blocking; B panels outer when a slice fits
  // l1_panel_bytes), then with the kernel's own blocking.
  auto run = [&](GemmCase gc) {
    for (int64_t pack_from : {int64_t{1} << 40, int64_t{0}}) {
      gc.blocking.pack_a_min_columns = pack_from;
      check_case(kernel, gc, seed);
    }
    gc.own_blocking = true;
    check_case(kernel, gc, seed);
    ++seed;
  };

  SUBCASE("exact microtile, sizes 1, K = 1") {
    run(whole(1, 1, 1));
    run(whole(mr, nr, 1));
    run(whole(mr, nr, 7));
    run(whole(1, nr, 13));
    run(whole(mr, 1, 13));
  }
  SUBCASE("m < MR, n < NR, and remainders") {
    for (int64_t m = 1; m <= mr; ++m) run(whole(m, nr, 5));
    for (int64_t n = 1; n <= nr; n += n < 8 ? 1 : 7) run(whole(mr, n, 5));
    run(whole(3 * mr + 1, 2 * nr + 3, 31));
    run(whole(2 * mr - 1, 3 * nr - 1, 17));
    run(whole(13, 37, 29));  // primes
  }
  SUBCASE("K across cache blocks, wide tiles (A packed) and narrow ones") {
    for (int64_t k : {2, 3, 16, 17, 255, 319, 320, 321, 641, 1000}) run(whole(mr + 2, nr + 5, k));
    run(whole(2 * mr + 3, 300, 333));  // wide: A is packed
    run(whole(5, 4 * nr + 1, 700));
    run(whole(800, 9, 40));  // more rows than one row block
    run(whole(7, 530, 20));  // more columns than one column block
    // Small blocks: many K slices, row blocks and column blocks in one tile.
    GemmCase small_blocks = whole(5 * mr + 2, 5 * nr + 3, 77);
    small_blocks.tile = {1, 5 * mr + 1, 2, 5 * nr + 3};
    small_blocks.accumulate = true;
    small_blocks.activation = GemmActivation::kSigmoid;
    small_blocks.blocking = {.kc = 8, .mc = 2 * mr, .nc = 2 * nr};
    run(small_blocks);
    small_blocks.blocking = {.kc = 1, .mc = 1, .nc = 1};
    run(small_blocks);
    // B panels outer, rows inner (slices of ≤ 16 k steps fit 64·NR bytes).
    small_blocks.blocking = {.kc = 16, .mc = 3 * mr, .nc = 2 * nr, .l1_panel_bytes = 64 * nr};
    run(small_blocks);
  }
  SUBCASE("the kernel's own blocking: K in equal slices, wide tiles packed") {
    const GemmBlocking own = gemm_blocking_for(kernel);
    MESSAGE(kernel.name, " blocking: kc ", own.kc, " mc ", own.mc, " nc ", own.nc, " pack A from ",
            own.pack_a_min_columns, " columns");
    CHECK(own.kc >= 8);
    CHECK(own.nc % nr == 0);
    CHECK(own.mc % mr == 0);
    // Sized from this machine's caches: the MR×kc panel of A within L1d, the
    // kc×nc block of B panels within L2 (unless a single panel exceeds it).
    const CacheSizes& caches = cache_sizes();
    CHECK(mr * own.kc * 4 <= caches.l1d);
    if (own.nc > nr) CHECK(own.kc * own.nc * 4 <= caches.l2);
    for (int64_t k : {own.kc - 1, own.kc + 1, 2 * own.kc + 5}) {
      GemmCase gc = whole(2 * mr + 1, nr + 3, k);
      gc.accumulate = true;
      gc.bias_kind = GemmBias::kPerColumn;
      run(gc);
    }
    // Wide enough that the own blocking packs A, with a partial first panel.
    GemmCase wide = whole(mr + 2, own.pack_a_min_columns + nr + 5, 37);
    wide.tile = {1, mr + 2, 3, own.pack_a_min_columns + nr + 5};
    run(wide);
  }
  SUBCASE("tiles at unaligned offsets, strided A, B and C, transposed B") {
    for (bool transposed : {false, true}) {
      GemmCase gc = whole(5 * mr + 3, 4 * nr + 7, 37);
      gc.transposed = transposed;
      gc.lda_pad = 3;
      gc.ldb_pad = 5;
      gc.ldc_pad = 7;
      for (GemmTile t : {GemmTile{1, 2, 3, 4}, GemmTile{3, 3 + mr, 5, 5 + nr},
                         GemmTile{mr, 2 * mr, nr, 2 * nr}, GemmTile{2, 5 * mr + 1, 1, 4 * nr + 6},
                         GemmTile{mr - 1, 4 * mr + 2, nr - 1, 3 * nr + 2},
                         GemmTile{0, 5 * mr + 3, 4 * nr + 6, 4 * nr + 7}}) {
        gc.tile = t;
        run(gc);
      }
    }
  }
  SUBCASE("every epilogue, on whole and edge microtiles, with K blocks") {
    for (int64_t k : {9, 400}) {
      for (GemmBias bias : {GemmBias::kNone, GemmBias::kPerColumn, GemmBias::kPerRow}) {
        for (GemmActivation act :
             {GemmActivation::kNone, GemmActivation::kRelu, GemmActivation::kClip,
              GemmActivation::kSigmoid, GemmActivation::kGelu, GemmActivation::kGeluTanh,
              GemmActivation::kSilu, GemmActivation::kLeakyRelu}) {
          for (int residual = 0; residual < 3; ++residual) {
            GemmCase gc = whole(2 * mr + 1, 2 * nr + 1, k);
            gc.tile = {1, 2 * mr + 1, 1, 2 * nr + 1};  // whole microtiles and edges
            gc.ldc_pad = 2;
            gc.bias_kind = bias;
            gc.activation = act;
            gc.residual = residual > 0;
            gc.residual_position =
                residual == 2 ? GemmResidual::kAfterActivation : GemmResidual::kBeforeActivation;
            gc.accumulate = (static_cast<int>(act) + residual) % 2 == 1;
            run(gc);
          }
        }
      }
    }
    GemmCase zero = whole(mr + 1, nr + 1, 5);  // all-zero weights: epilogue only
    zero.zero_b = true;
    zero.bias_kind = GemmBias::kPerColumn;
    zero.activation = GemmActivation::kSigmoid;
    run(zero);
  }
  SUBCASE("short K (1 to 40) with the common epilogues the microkernel specialises") {
    // Per-column bias without residual and no/ReLU/Clip activation take the
    // microkernel's constant-folded store path; Sigmoid and a per-row bias
    // beside them take the generic one. Rows and columns not multiples of
    // MR, NR or the vector width.
    for (int64_t k = 1; k <= 40; ++k) {
      for (GemmActivation act : {GemmActivation::kNone, GemmActivation::kRelu,
                                 GemmActivation::kClip, GemmActivation::kSigmoid}) {
        GemmCase gc = whole(2 * mr + 3, nr + 16 + (k % 3) * 8 + k % 2, k);
        gc.tile = {k % 2, gc.rows, 0, gc.cols};
        gc.bias_kind = k % 7 == 0 ? GemmBias::kPerRow : GemmBias::kPerColumn;
        gc.activation = act;
        gc.accumulate = k % 5 == 0;
        run(gc);
      }
    }
  }
  SUBCASE("edge blocks written in place: m < MR rows, whole vectors of a part panel") {
    // N a multiple of the vector width but not of NR (MobileNet's 24, 96,
    // 144 channels), rows not a multiple of MR, with every epilogue input:
    // the microkernel writes only the valid rows and vectors straight to C.
    for (int64_t n : {int64_t{4}, int64_t{8}, int64_t{16}, int64_t{24}, int64_t{48}, int64_t{96},
                      int64_t{144}, nr + 16}) {
      for (int64_t m : {int64_t{1}, mr - 1, mr + 1, 3 * mr + 2}) {
        if (m < 1) continue;
        GemmCase gc = whole(m, n, 23);
        gc.ldc_pad = 3;
        gc.bias_kind = GemmBias::kPerColumn;
        gc.activation = GemmActivation::kClip;
        gc.residual = true;
        gc.accumulate = m % 2 == 1;
        run(gc);
        gc.tile = {0, m, 0, std::min<int64_t>(n, 16)};  // a tile ending inside the panel
        run(gc);
      }
    }
  }
  SUBCASE("A through a table of k offsets (gemm_tile_indirect: implicit GEMM)") {
    // Convolution-like: row strides 1 to 3 over overlapping rows, K short
    // (a 3×3 stem over 3 channels: 27) and across K slices, every bias and
    // the common activations, tiles at unaligned offsets.
    for (int64_t k : {1, 7, 27, 147, 400}) {
      for (int64_t stride : {1, 2, 3}) {
        GemmCase gc = whole(2 * mr + 3, nr + 5, k);
        gc.indirect_stride = stride;
        gc.tile = {stride - 1, gc.rows, 2, gc.cols};
        gc.ldc_pad = 1;
        gc.bias_kind = static_cast<GemmBias>(k % 3);
        gc.activation = k % 2 ? GemmActivation::kClip : GemmActivation::kRelu;
        gc.residual = stride == 2;
        gc.accumulate = stride == 3;
        gc.blocking.kc = k == 400 ? 128 : 1000;
        run(gc);
      }
    }
  }
  SUBCASE("random shapes and tiles") {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    for (int iteration = 0; iteration < 24; ++iteration) {
      GemmCase gc = whole(pick(1, 120), pick(1, 300), pick(1, 400));
      gc.tile.m0 = pick(0, gc.rows - 1);
      gc.tile.m1 = pick(gc.tile.m0 + 1, gc.rows);
      gc.tile.n0 = pick(0, gc.cols - 1);
      gc.tile.n1 = pick(gc.tile.n0 + 1, gc.cols);
      gc.lda_pad = pick(0, 3);
      gc.ldb_pad = pick(0, 3);
      gc.ldc_pad = pick(0, 3);
      gc.transposed = pick(0, 1) == 1;
      gc.accumulate = pick(0, 1) == 1;
      gc.bias_kind = static_cast<GemmBias>(pick(0, 2));
      gc.activation = static_cast<GemmActivation>(pick(0, 3));
      gc.residual = pick(0, 1) == 1;
      gc.residual_position = static_cast<GemmResidual>(pick(0, 1));
      gc.blocking.kc = pick(1, 400);
      gc.blocking.l1_panel_bytes = pick(0, 1) == 1 ? int64_t{1} << 40 : 0;
      gc.next_b_k = pick(0, 1) == 1 ? pick(1, 500) : 0;
      gc.indirect_stride = pick(0, 3) == 3 ? pick(1, 4) : 0;
      run(gc);
    }
  }
}

// The A packer alone: every row count 1..MR, k counts around its 4-wide
// vector steps, a padded leading dimension; element (k, i) of the packed
// micro-panel must be A[i][k] for i < rows and 0 after.
void test_pack_a(const GemmMicrokernel& kernel) {
  if (!gemm_isa_supported(kernel.isa)) return;
  const uint64_t seed = base_seed() + std::hash<std::string_view>{}(kernel.name);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t mr = kernel.mr;
  for (int64_t kc : {1, 3, 4, 5, 8, 13, 64, 67}) {
    const int64_t lda = kc + 3;
    for (int64_t rows = 1; rows <= mr; ++rows) {
      INFO(kernel.name, " pack_a seed ", seed, " rows ", rows, " kc ", kc);
      std::vector<float> a(static_cast<size_t>((rows - 1) * lda + kc));
      for (float& x : a) x = dist(rng);
      std::vector<float> out(static_cast<size_t>(kc * mr), kSentinel);
      kernel.pack_a(a.data(), lda, rows, kc, out.data());
      int64_t bad = 0;
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < mr; ++i) {
          const float want = i < rows ? a[i * lda + k] : 0.0f;
          if (out[k * mr + i] != want && bad++ < 5)
            FAIL_CHECK("packed[", k, "][", i, "] = ", out[k * mr + i], ", expected ", want);
        }
      CHECK(bad == 0);
    }
  }
}

const GemmMicrokernel& microkernel_named(std::string_view name) {
  for (std::span<const GemmMicrokernel> list : {gemm_microkernels(), gemm_edge_microkernels()})
    for (const GemmMicrokernel& k : list)
      if (k.name == name) return k;
  throw std::logic_error("no microkernel " + std::string(name));
}

}  // namespace

// One test case per manifest entry.
#define TESSERA_GEMM_MICROKERNEL(isa_, function_, pack_a_, mr_, nr_)               \
  TEST_CASE("SGEMM microkernel " #function_ " (" #mr_ "x" #nr_ ") vs reference") { \
    const GemmMicrokernel& kernel = microkernel_named(#function_);                 \
    CHECK(kernel.isa == GemmIsa::isa_);                                            \
    CHECK(kernel.mr == mr_);                                                       \
    CHECK(kernel.nr == nr_);                                                       \
    CHECK((kernel.pack_a == &pack_a_));                                            \
    test_pack_a(kernel);                                                           \
    test_microkernel(kernel);                                                      \
  }
#include "kernels/cpu/gemm_edge_microkernels.inc"
#include "kernels/cpu/gemm_microkernels.inc"
#undef TESSERA_GEMM_MICROKERNEL

TEST_CASE("gemm_edge_microkernel: the fewest rows that cover the edge, same ISA and NR") {
  for (const GemmMicrokernel& k : gemm_microkernels())
    for (int64_t rows = 1; rows < k.mr; ++rows) {
      INFO(k.name, " rows ", rows);
      const GemmMicrokernel& e = gemm_edge_microkernel(k, rows);
      CHECK(e.isa == k.isa);
      CHECK(e.nr == k.nr);
      CHECK(e.mr >= rows);
      CHECK(e.mr <= k.mr);
      for (const GemmMicrokernel& other : gemm_edge_microkernels())
        if (other.isa == k.isa && other.nr == k.nr && other.mr >= rows) CHECK(e.mr <= other.mr);
      const int64_t m = 3 * k.mr + rows;
      CHECK(gemm_computed_rows(k, m) == 3 * k.mr + e.mr);
    }
  // Every edge kernel serves some main kernel with more rows.
  for (const GemmMicrokernel& e : gemm_edge_microkernels()) {
    INFO(e.name);
    bool serves = false;
    for (const GemmMicrokernel& k : gemm_microkernels())
      serves = serves || (k.isa == e.isa && k.nr == e.nr && k.mr > e.mr &&
                          &gemm_edge_microkernel(k, e.mr) == &e);
    CHECK(serves);
  }
}

// gemm_tile with every row count against each main kernel's packed B: the
// edge rows run on the edge kernel, A packed (wide tiles) or in place.
TEST_CASE("gemm_tile: tiles whose rows end inside a block, every main kernel") {
  std::mt19937 rng(0x3d6e);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmMicrokernel& kernel : gemm_microkernels()) {
    if (!gemm_isa_supported(kernel.isa)) continue;
    for (int64_t n : {kernel.nr - 3, 17 * kernel.nr + 5})
      for (int64_t m = 1; m <= 2 * kernel.mr + 1; ++m) {
        const int64_t k = 37, m0 = 2;
        INFO(kernel.name, " m ", m, " n ", n);
        std::vector<float> a(static_cast<size_t>((m0 + m) * k)), b(static_cast<size_t>(k * n));
        for (float& x : a) x = dist(rng);
        for (float& x : b) x = dist(rng);
        const PackedMatrix packed = pack_b(b.data(), k, n, n, false, kernel);
        std::vector<float> c(static_cast<size_t>((m0 + m) * n), kSentinel);
        gemm_tile(a.data(), k, packed, c.data(), n, {.m0 = m0, .m1 = m0 + m, .n0 = 0, .n1 = n});
        int64_t bad = 0;
        for (int64_t i = 0; i < m0 + m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float want = kSentinel;
            if (i >= m0) {
              double sum = 0;
              for (int64_t kk = 0; kk < k; ++kk)
                sum += static_cast<double>(a[i * k + kk]) * b[kk * n + j];
              want = static_cast<float>(sum);
            }
            const float got = c[static_cast<size_t>(i * n + j)];
            const bool ok = i < m0 ? got == kSentinel : std::abs(got - want) <= 1e-4f;
            if (!ok && bad++ < 5) FAIL_CHECK("C[", i, "][", j, "] = ", got, ", expected ", want);
          }
        CHECK(bad == 0);
      }
  }
}

TEST_CASE("the ISA is chosen once; set_gemm_isa forces each supported one") {
  const GemmIsa chosen = gemm_isa();
  MESSAGE("SGEMM microkernel chosen at start-up: ", gemm_default_microkernel().name);
  CHECK(gemm_isa_supported(chosen));
  CHECK(gemm_isa_supported(GemmIsa::kPortable));
  // The best supported ISA wins.
  for (GemmIsa better : {GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (better == chosen) break;
    CHECK_FALSE(gemm_isa_supported(better));
  }
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) {
      CHECK_THROWS_AS(set_gemm_isa(isa), std::invalid_argument);
      continue;
    }
    set_gemm_isa(isa);
    CHECK(gemm_isa() == isa);
    CHECK(gemm_default_microkernel().isa == isa);
    const std::vector<float> b(6 * 5, 1.0f);
    const PackedMatrix packed = pack_b(b.data(), 6, 5, 5, false);
    CHECK(packed.microkernel().isa == isa);
    const std::vector<float> a(3 * 6, 0.5f);
    std::vector<float> c(3 * 5, kSentinel);
    gemm_tile(a.data(), 6, packed, c.data(), 5, {.m0 = 0, .m1 = 3, .n0 = 0, .n1 = 5});
    for (float x : c) CHECK(x == 3.0f);
  }
  set_gemm_isa(chosen);
}

TEST_CASE("gemm_microkernel_for_shape: the fewest computed rows times the column cost") {
  const GemmIsa chosen = gemm_isa();
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    set_gemm_isa(isa);
    for (int64_t m : {1, 5, 49, 128, 196, 2048})
      for (int64_t n : {1, 48, 64, 96, 768, 1000, 3072}) {
        INFO(gemm_isa_name(isa), " m ", m, " n ", n);
        const GemmMicrokernel& k = gemm_microkernel_for_shape(m, n);
        CHECK(k.isa == isa);
        const auto cost = [&](const GemmMicrokernel& kernel) {
          return gemm_computed_rows(kernel, m) * gemm_microkernel_column_cost(kernel, n);
        };
        for (const GemmMicrokernel& other : gemm_microkernels())
          if (other.isa == isa) CHECK(cost(k) <= cost(other));
      }
  }
  if (gemm_isa_supported(GemmIsa::kAvx512)) {
    set_gemm_isa(GemmIsa::kAvx512);
    // BERT's 128 tokens: 8x48 computes 16 blocks of 8 rows, 6x64 21 blocks
    // of 6 and 2 rows on its edge kernel, the same count: the default wins.
    CHECK(gemm_microkernel_for_shape(128, 768).name == "gemm_6x64__avx512");
    CHECK(gemm_microkernel_for_shape(128, 3072).name == "gemm_6x64__avx512");
    // n a multiple of 48, not of 64: 8x48.
    CHECK(gemm_microkernel_for_shape(128, 1200).name == "gemm_8x48__avx512");
    // Square, one row, and N not a multiple of 48: the default.
    CHECK(gemm_microkernel_for_shape(2048, 2048).name == "gemm_6x64__avx512");
    CHECK(gemm_microkernel_for_shape(1, 1000).name == "gemm_6x64__avx512");
    CHECK(gemm_microkernel_for_shape(49, 512).name == "gemm_6x64__avx512");
    // A tie of 12x32 and 8x48 (196 rows either way): the wider.
    CHECK(gemm_microkernel_for_shape(196, 96).name == "gemm_8x48__avx512");
  }
  set_gemm_isa(chosen);
}

TEST_CASE(
    "gemm_microkernel_for_columns: the lowest column cost, the default or the widest NR on ties") {
  const GemmIsa chosen = gemm_isa();
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!gemm_isa_supported(isa)) continue;
    set_gemm_isa(isa);
    const GemmMicrokernel& fallback = gemm_default_microkernel();
    for (int64_t n = 1; n <= 300; ++n) {
      INFO(gemm_isa_name(isa), " n ", n);
      const GemmMicrokernel& k = gemm_microkernel_for_columns(n);
      CHECK(k.isa == isa);
      const int64_t cost = gemm_microkernel_column_cost(k, n);
      // The cost is the padded column count, weighted for one-vector kernels.
      const int64_t padded = (n + k.nr - 1) / k.nr * k.nr;
      CHECK(cost == padded * (k.nr == gemm_isa_vector_floats(isa) ? 5 : 4));
      for (const GemmMicrokernel& other : gemm_microkernels())
        if (other.isa == isa) CHECK(cost <= gemm_microkernel_column_cost(other, n));
      if (gemm_microkernel_column_cost(fallback, n) == cost) {
        CHECK(&k == &fallback);  // the default wins its ties
        continue;
      }
      // Among other equal costs, the widest NR, then the most rows.
      for (const GemmMicrokernel& other : gemm_microkernels())
        if (other.isa == isa && gemm_microkernel_column_cost(other, n) == cost) {
          CHECK(k.nr >= other.nr);
          if (k.nr == other.nr) CHECK(k.mr >= other.mr);
        }
    }
  }
  if (gemm_isa_supported(GemmIsa::kAvx512)) {
    set_gemm_isa(GemmIsa::kAvx512);
    CHECK(gemm_microkernel_for_columns(16).nr == 16);  // 16 columns, not 32
    CHECK(gemm_microkernel_for_columns(24).nr == 32);  // 32 either way: two vectors
    CHECK(gemm_microkernel_for_columns(32).name == "gemm_14x32__avx512");  // not 12x32
    CHECK(gemm_microkernel_for_columns(64).nr == 64);                      // the default
    CHECK(gemm_microkernel_for_columns(112).nr != 16);  // 112 vs 128 saves only 1/8
    // 96: 12x32 and 8x48 tie; 8x48 ran MobileNetV2's projections faster.
    CHECK(gemm_microkernel_for_columns(96).name == "gemm_8x48__avx512");
  }
  if (gemm_isa_supported(GemmIsa::kAvx2)) {
    set_gemm_isa(GemmIsa::kAvx2);
    CHECK(gemm_microkernel_for_columns(8).name == "gemm_12x8__avx2");   // one vector, no padding
    CHECK(gemm_microkernel_for_columns(24).name == "gemm_4x24__avx2");  // not 32 or 12x8's 3 panels
    CHECK(gemm_microkernel_for_columns(32).name == "gemm_6x16__avx2");  // the default
    CHECK(gemm_microkernel_for_columns(64).name == "gemm_6x16__avx2");  // 4x24 pads to 72
    CHECK(gemm_microkernel_for_columns(72).name == "gemm_4x24__avx2");  // 72 against 80
    CHECK(gemm_microkernel_for_columns(96).name == "gemm_6x16__avx2");  // a tie: the default
  }
  set_gemm_isa(chosen);
}

TEST_CASE("cache_sizes: this machine's per-core data caches, as the C library sees them") {
  const CacheSizes& caches = cache_sizes();
  MESSAGE("L1d ", caches.l1d, " B, L2 ", caches.l2, " B (", caches.source, ")");
  CHECK(&caches == &cache_sizes());  // queried once
  CHECK(caches.l1d >= 4 * 1024);
  CHECK(caches.l1d <= 1024 * 1024);
  CHECK(caches.l2 > caches.l1d);
  CHECK(!caches.source.empty());
  // glibc reads its figures from CPUID, hwloc from sysfs/CPUID: a per-core
  // share is never more than the one cache glibc reports (0: not known).
  const long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l1d > 0) CHECK(caches.l1d <= l1d);
  if (l2 > 0) CHECK(caches.l2 <= l2);
}

TEST_CASE("gemm_tile rejects tiles outside the matrices and unpacked B") {
  const std::vector<float> b(4 * 4, 1.0f), a(4 * 4, 1.0f);
  std::vector<float> c(4 * 4, 0.0f);
  const PackedMatrix packed = pack_b(b.data(), 4, 4, 4, false);
  CHECK_THROWS_AS(gemm_tile(a.data(), 4, packed, c.data(), 4, {0, 4, 0, 5}), std::invalid_argument);
  CHECK_THROWS_AS(gemm_tile(a.data(), 4, packed, c.data(), 4, {3, 2, 0, 4}), std::invalid_argument);
  CHECK_THROWS_AS(gemm_tile(a.data(), 4, PackedMatrix{}, c.data(), 4, {0, 4, 0, 4}),
                  std::invalid_argument);
  CHECK_THROWS_AS(pack_b(b.data(), 4, 4, 3, false), std::invalid_argument);
  GemmEpilogue no_bias;
  no_bias.bias_kind = GemmBias::kPerRow;
  CHECK_THROWS_AS(gemm_tile(a.data(), 4, packed, c.data(), 4, {0, 4, 0, 4}, no_bias),
                  std::invalid_argument);
  // An empty tile writes nothing.
  gemm_tile(a.data(), 4, packed, c.data(), 4, {2, 2, 0, 4});
  for (float x : c) CHECK(x == 0.0f);
}

TEST_CASE("gemm_tile_leading_rows: gemm_tile's bits on B's first rows packed alone, every kernel") {
  // cpu.attention multiplies by V's first `live` rows without repacking
  // them: the same sums as packing those rows on their own, bit for bit,
  // over several panels and over K long enough for two slices.
  std::mt19937 rng(0x1ead);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmMicrokernel& kernel : gemm_microkernels()) {
    if (!gemm_isa_supported(kernel.isa)) continue;
    for (int64_t k : {1, 37, 700, 2600})
      for (int64_t k_rows : {int64_t{0}, int64_t{1}, k / 2 + 1, k}) {
        const int64_t m = 2 * kernel.mr + 3, n = 2 * kernel.nr + 5;
        INFO(kernel.name, " k ", k, " k_rows ", k_rows);
        std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
        for (float& x : a) x = dist(rng);
        for (float& x : b) x = dist(rng);
        const PackedMatrix whole = pack_b(b.data(), k, n, n, false, kernel);
        std::vector<float> got(static_cast<size_t>(m * n), kSentinel), want = got;
        const GemmTile tile{.m0 = 1, .m1 = m, .n0 = 2, .n1 = n};
        gemm_tile_leading_rows(a.data(), k, whole, k_rows, got.data(), n, tile);
        if (k_rows > 0) {
          const PackedMatrix leading = pack_b(b.data(), k_rows, n, n, false, kernel);
          gemm_tile(a.data(), k, leading, want.data(), n, tile);
        } else {
          for (int64_t i = tile.m0; i < tile.m1; ++i)  // an empty sum
            std::fill(want.begin() + i * n + tile.n0, want.begin() + i * n + tile.n1, 0.0f);
        }
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i)
          differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
        CHECK(differ == 0);
      }
  }
  const std::vector<float> b(4 * 4, 1.0f), a(4 * 4, 1.0f);
  std::vector<float> c(4 * 4, 0.0f);
  const PackedMatrix packed = pack_b(b.data(), 4, 4, 4, false);
  CHECK_THROWS_AS(gemm_tile_leading_rows(a.data(), 4, packed, 5, c.data(), 4, {0, 4, 0, 4}),
                  std::invalid_argument);
}

TEST_CASE(
    "pack_b_into: reused storage, growing and shrinking, and the k scale give pack_b's bits") {
  // The run path repacks into one PackedMatrix per thread (attention's K^T and
  // V, batched MatMul's B, a 1x1 conv's weights times its input scale): each
  // repack must be the matrix it was last given, whatever was there before.
  std::mt19937 rng(0x9ac6);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmMicrokernel& kernel : gemm_microkernels()) {
    if (!gemm_isa_supported(kernel.isa)) continue;
    PackedMatrix reused;
    for (const auto& [k, n, transposed] :
         {std::tuple<int64_t, int64_t, bool>{300, 3 * kernel.nr + 7, true},
          {5, 1, false},
          {64, kernel.nr, true},
          {700, 2 * kernel.nr + 1, false}}) {
      INFO(kernel.name, " k ", k, " n ", n, " transposed ", transposed);
      const int64_t m = kernel.mr + 2;
      std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
      std::vector<float> scale(static_cast<size_t>(k)), scaled_b(b.size());
      for (float& x : a) x = dist(rng);
      for (float& x : b) x = dist(rng);
      for (float& x : scale) x = dist(rng);
      const int64_t ldb = transposed ? k : n;
      for (int64_t r = 0; r < (transposed ? n : k); ++r)
        for (int64_t c = 0; c < ldb; ++c)
          scaled_b[r * ldb + c] = b[r * ldb + c] * scale[transposed ? c : r];
      const GemmTile tile{.m0 = 0, .m1 = m, .n0 = 0, .n1 = n};
      for (const bool with_scale : {false, true}) {
        pack_b_into(reused, b.data(), k, n, ldb, transposed, kernel,
                    with_scale ? scale.data() : nullptr);
        const PackedMatrix fresh =
            pack_b(with_scale ? scaled_b.data() : b.data(), k, n, ldb, transposed, kernel);
        CHECK(reused.k() == k);
        CHECK(reused.n() == n);
        std::vector<float> got(static_cast<size_t>(m * n), kSentinel), want = got;
        gemm_tile(a.data(), k, reused, got.data(), n, tile);
        gemm_tile(a.data(), k, fresh, want.data(), n, tile);
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i)
          differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
        CHECK(differ == 0);
      }
    }
  }
}
