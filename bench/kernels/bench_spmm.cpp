// Single-thread sparse-weight GEMM, Y = A·B with A dense [M, K] and B sparse
// [K, N] (SparTA Fig. 16/18: 1024³), beside Tessera's dense SGEMM and
// oneDNN's dnnl_sgemm in the same run:
//   - B unstructured at 50/90/95/99% sparsity (CSR);
//   - B in 32×32 blocks at 70/80/90% sparsity, alone and plus 1% scattered
//     nonzeros (BSR + CSR summed, the SparTA §3.3 decomposition, next to
//     BSR alone covering the scattered ones with whole blocks);
//   - mixed structure (10% density: 60% of the nonzeros in 32×32 blocks,
//     30% in aligned 16×1 rows, 10% scattered): the weighted block cover's
//     choice beside one block shape + CSR, a forced three-part cover and
//     CSR alone; and the time the cover takes on a BERT-base FFN weight
//     (3072×768: compile time, 72 of them per model);
//   - the floor: copying A into C, the memory traffic no layout of B
//     avoids (A read once, C written once), which bounds every speedup;
//   - `--loop-limit`: the CSR kernel's inner step timed alone in L1 (and
//     three variants of it) and the speedup over dense it allows at each
//     unstructured density: the ceiling of the CSR formulation here;
//   - `--crossover`: density sweeps per format, to set the crossovers in
//     kernels/sparse/sparse_gemm.cpp.
//
//   bench_spmm [--size N] [--reps R] [--crossover] [--loop-limit] [--min]
//              [--only LABEL-SUBSTRING]
//
// Times are per second of this thread's CPU time (the machine is shared),
// the median of R repetitions; B is packed outside the timed loop (weights
// are packed at model load). GFLOP/s are dense-equivalent (2·M·N·K / t).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "csr_loop_limit.hpp"
#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/sparse/block_cover.hpp"
#include "kernels/sparse/sparse_gemm.hpp"
#include "openmp_one_thread.hpp"
#include "thread_seconds.hpp"

#if TESSERA_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

using namespace tessera::kernels;

// Median (or, with --min, fastest) seconds of `reps` runs (after one
// warm-up): on a machine shared with other jobs the fastest run is the one
// least disturbed by their cache traffic.
bool g_report_min = false;
double time_median(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = tessera::bench::thread_seconds();
    fn();
    t.push_back(tessera::bench::thread_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return g_report_min ? t.front() : t[t.size() / 2];
}

std::vector<float> random_values(size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// B [K, N]: unstructured at `density`, or `block`×`block` blocks kept with
// probability `density` plus `extra` scattered nonzeros.
std::vector<float> sparse_b(int64_t k, int64_t n, double density, int block, double extra,
                            std::mt19937_64& rng) {
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<float> b = random_values(static_cast<size_t>(k * n), rng);
  if (block <= 1) {
    for (float& x : b)
      if (coin(rng) >= density) x = 0.0f;
    return b;
  }
  // Exactly round(density · blocks) blocks kept, at random places.
  const int64_t bk = (k + block - 1) / block, bn = (n + block - 1) / block;
  std::vector<char> keep(static_cast<size_t>(bk * bn), 0);
  std::fill(keep.begin(), keep.begin() + static_cast<int64_t>(density * bk * bn + 0.5), 1);
  std::shuffle(keep.begin(), keep.end(), rng);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      if (!keep[(kk / block) * bn + j / block] && coin(rng) >= extra) b[kk * n + j] = 0.0f;
  return b;
}

// B [K, N] at `density`: `f32` of its nonzeros in whole 32×32 blocks,
// `f16` in whole aligned 16×1 rows (outside the blocks), the rest scattered.
std::vector<float> mixed_b(int64_t k, int64_t n, double density, double f32, double f16,
                           std::mt19937_64& rng) {
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> b(static_cast<size_t>(k * n), 0.0f);
  const double total = density * static_cast<double>(k * n);
  const int64_t bk = k / 32, bn = n / 32;
  std::vector<char> block(static_cast<size_t>(bk * bn), 0);
  std::fill(block.begin(), block.begin() + static_cast<int64_t>(total * f32 / 1024 + 0.5), 1);
  std::shuffle(block.begin(), block.end(), rng);
  for (int64_t kk = 0; kk < bk * 32; ++kk)
    for (int64_t j = 0; j < bn * 32; ++j)
      if (block[(kk / 32) * bn + j / 32]) b[kk * n + j] = value(rng);
  auto in_block = [&](int64_t kk, int64_t j) {
    return kk < bk * 32 && j < bn * 32 && block[(kk / 32) * bn + j / 32];
  };
  for (int64_t rows = static_cast<int64_t>(total * f16 / 16 + 0.5); rows > 0;) {
    const int64_t kk = static_cast<int64_t>(rng() % static_cast<uint64_t>(k));
    const int64_t j0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(n / 16)) * 16;
    if (in_block(kk, j0) || b[kk * n + j0] != 0.0f) continue;
    for (int64_t j = j0; j < j0 + 16; ++j) b[kk * n + j] = value(rng);
    --rows;
  }
  for (int64_t left = static_cast<int64_t>(total * (1.0 - f32 - f16) + 0.5); left > 0;) {
    const uint64_t i = rng() % static_cast<uint64_t>(k * n);
    if (b[i] != 0.0f) continue;
    b[i] = value(rng);
    --left;
  }
  return b;
}

struct Result {
  std::string label;
  double density = 1.0, seconds = 0;
  std::string layout;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t size = 1024;
  int reps = 5;
  bool crossover = false;
  bool loop_limit = false;
  std::string only;  // run only the sparse cases whose label contains this
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--size") && i + 1 < argc)
      size = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--crossover"))
      crossover = true;
    else if (!std::strcmp(argv[i], "--loop-limit"))
      loop_limit = true;
    else if (!std::strcmp(argv[i], "--min"))
      g_report_min = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bench_spmm [--size N] [--reps R] [--crossover] [--loop-limit] [--min] "
                   "[--only LABEL-SUBSTRING]\n");
      return 2;
    }
  }
  tessera::bench::limit_openmp_to_one_thread();

  const int64_t m = size, k = size, n = size;
  const double flop = 2.0 * static_cast<double>(m) * n * k;
  std::mt19937_64 rng(42);
  const std::vector<float> a = random_values(static_cast<size_t>(m * k), rng);
  std::vector<float> c(static_cast<size_t>(m * n));
  const cpu::GemmTile whole{.m0 = 0, .m1 = m, .n0 = 0, .n1 = n};
  std::printf("bench_spmm: %lldx%lldx%lld, 1 thread, SGEMM ISA %.*s, L1d %lld KiB, %s of %d\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
              static_cast<int>(cpu::gemm_isa_name(cpu::gemm_isa()).size()),
              cpu::gemm_isa_name(cpu::gemm_isa()).data(),
              static_cast<long long>(cpu::cache_sizes().l1d / 1024),
              g_report_min ? "fastest" : "median", reps);

  // The dense baselines on a dense B.
  const std::vector<float> b_dense = random_values(static_cast<size_t>(k * n), rng);
  const cpu::PackedMatrix packed = cpu::pack_b(b_dense.data(), k, n, n, false);
  const double dense_s =
      time_median(reps, [&] { cpu::gemm_tile(a.data(), k, packed, c.data(), n, whole); });
  double onednn_s = 0;
#if TESSERA_BENCH_HAVE_DNNL
  onednn_s = time_median(reps, [&] {
    dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.data(), k, b_dense.data(), n, 0.0f, c.data(), n);
  });
#endif
  std::printf("%-40s %8s %9s %10s %9s %9s %8s  %s\n", "case", "density", "ms", "GFLOP/s-eq",
              "vs dense", "vs oneDNN", "target", "layout");
  auto row = [&](const std::string& label, double density, double s, const std::string& layout,
                 bool with_target) {
    char target[16] = "";
    if (with_target && density > 0) std::snprintf(target, sizeof target, "%.1fx", 0.7 / density);
    std::printf("%-40s %7.2f%% %9.3f %10.1f %8.2fx %8.2fx %8s  %s\n", label.c_str(),
                100.0 * density, 1e3 * s, flop / s * 1e-9, dense_s / s,
                onednn_s > 0 ? onednn_s / s : 0.0, target, layout.c_str());
  };
  row("tessera dense SGEMM", 1.0, dense_s, "packed panels", false);
  if (onednn_s > 0) row("oneDNN dnnl_sgemm", 1.0, onednn_s, "dense", false);
  // The traffic every kernel pays whatever B is: A read once, C written
  // once (A and C do not fit L2). dense / this bounds any sparse speedup.
  std::vector<float> c_copy(static_cast<size_t>(m * n));
  const double floor_s = time_median(reps, [&] {
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(c_copy.data() + i * n, a.data() + i * k, static_cast<size_t>(std::min(k, n)) * 4);
  });
  row("floor: read A + write C (memcpy)", 0.0, floor_s, "bounds the speedup of any B", false);

  if (loop_limit) {
    // The CSR kernel runs its inner step once per nonzero of B per 64-row
    // panel of A (4 AVX-512 vectors, sparse_gemm_impl.hpp): with that step
    // at its hot-L1 speed and nothing else (no transposes, no per-column
    // sums loaded and stored) the speedup over dense is at most
    // dense / (panels · nonzeros · step).
    const auto step_times = tessera::bench::csr_loop_step_times();
    if (step_times.empty()) {
      std::printf("--loop-limit: the measured step is the AVX-512 kernel's; this CPU has none\n");
      return 0;
    }
    std::printf("\nCSR inner step, operands in L1, one nonzero x 64 rows of A (best of 200):\n");
    for (const auto& t : step_times)
      std::printf("  %-50s %6.3f ns/step\n", t.label.c_str(), t.ns_per_step);
    const double panels = static_cast<double>((m + 63) / 64);
    std::printf("bound on the CSR speedup over dense at that step time, unstructured B:\n");
    std::printf("  %-8s %12s %12s %10s\n", "density", "steps", "bound", "target");
    for (double d : {0.5, 0.1, 0.05, 0.01}) {
      const double steps = panels * d * static_cast<double>(k * n);
      std::printf("  %6.1f%% %12.0f %11.2fx %9.1fx\n", 100.0 * d, steps,
                  dense_s / (steps * step_times.front().ns_per_step * 1e-9), 0.7 / d);
    }
    return 0;
  }

  auto run_sparse = [&](const std::string& label, const std::vector<float>& b,
                        const sparse::SparseLayout* forced, bool with_target) {
    if (!only.empty() && label.find(only) == std::string::npos) return;
    const sparse::SparseLayoutChoice choice =
        sparse::choose_sparse_layout(b.data(), k, n, n, false);
    const sparse::SparseLayout layout = forced ? *forced : choice.layout;
    const sparse::SparseMatrix sm = sparse::pack_sparse_b(b.data(), k, n, n, false, layout);
    const double s =
        time_median(reps, [&] { sparse::sparse_gemm_tile(a.data(), k, sm, c.data(), n, whole); });
    const double density = static_cast<double>(sm.nonzeros()) / static_cast<double>(k * n);
    char layout_text[96];
    std::snprintf(layout_text, sizeof layout_text, "%s (stores %.1f%%; model est. %.2fx dense)",
                  sparse::layout_name(layout).c_str(),
                  100.0 * static_cast<double>(sm.stored_elements()) / static_cast<double>(k * n),
                  choice.relative_cost);
    row(label, density, s, layout_text, with_target);
  };

  if (crossover) {
    const sparse::SparseLayout csr{.block = -1};
    for (double d : {0.3, 0.4, 0.5, 0.6, 0.7})
      run_sparse("crossover csr " + std::to_string(d).substr(0, 4), sparse_b(k, n, d, 1, 0, rng),
                 &csr, false);
    for (int block = 0; block < sparse::kSparseBlockShapeCount; ++block) {
      const sparse::SparseLayout bsr{.block = block, .min_block_nonzeros = 1};
      const int bn = sparse::kSparseBlockShapes[block].n;
      for (double d : {0.3, 0.5, 0.7, 0.9}) {
        // Whole blocks: 32x32 for the 32x32 shape, else bn-wide vectors (k = 1).
        const std::vector<float> b = block == 3 ? sparse_b(k, n, d, 32, 0, rng) : [&] {
          std::vector<float> v = sparse_b(k, n, 1.0, 1, 0, rng);
          std::uniform_real_distribution<double> coin(0.0, 1.0);
          for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t j0 = 0; j0 < n; j0 += bn)
              if (coin(rng) >= d)
                std::fill(v.begin() + kk * n + j0, v.begin() + kk * n + j0 + bn, 0.0f);
          return v;
        }();
        run_sparse("crossover bsr" + sparse::block_shape_name(block) + " " +
                       std::to_string(d).substr(0, 4),
                   b, &bsr, false);
      }
    }
    return 0;
  }

  for (double sparsity : {0.5, 0.9, 0.95, 0.99})
    run_sparse("unstructured " + std::to_string(static_cast<int>(sparsity * 100)) + "%",
               sparse_b(k, n, 1.0 - sparsity, 1, 0, rng), nullptr, true);
  for (double sparsity : {0.7, 0.8, 0.9}) {
    const std::string pct = std::to_string(static_cast<int>(sparsity * 100 + 0.5)) + "%";
    run_sparse("32x32 blocks " + pct, sparse_b(k, n, 1.0 - sparsity, 32, 0, rng), nullptr, true);
    const std::vector<float> mixed = sparse_b(k, n, 1.0 - sparsity, 32, 0.01, rng);
    run_sparse("32x32 blocks " + pct + " + 1% unstructured", mixed, nullptr, true);
    const sparse::SparseLayout blocks_only{.block = 3, .min_block_nonzeros = 1};
    run_sparse("  same, BSR 32x32 only (no CSR part)", mixed, &blocks_only, false);
    // Half-full blocks or more as BSR, the scattered 1% as CSR, whatever the cover chose.
    const sparse::SparseLayout blocks_and_csr{.block = 3, .min_block_nonzeros = 512};
    run_sparse("  same, BSR 32x32 + CSR", mixed, &blocks_and_csr, false);
  }
  {
    // Mixed structure: the cover's choice against single-shape layouts.
    const std::vector<float> mixed = mixed_b(k, n, 0.10, 0.6, 0.3, rng);
    run_sparse("mixed 32x32+16x1+scattered, cover", mixed, nullptr, true);
    const sparse::SparseLayout one_shape{.block = 3, .min_block_nonzeros = 512};
    run_sparse("mixed, bsr32x32 + csr (one shape)", mixed, &one_shape, false);
    sparse::SparseCosts cheap16 = sparse::builtin_sparse_costs();
    cheap16.block[2] = 1.2;  // forces the 16x1 rows into their own part
    cheap16.extra_part = 0.0;
    const sparse::SparseLayout three{
        .cover = std::make_shared<sparse::BlockCover>(
            sparse::weighted_block_cover(mixed.data(), k, n, n, false, cheap16))};
    run_sparse("mixed, forced " + sparse::layout_name(three), mixed, &three, false);
    const sparse::SparseLayout csr_only{.block = -1};
    run_sparse("mixed, csr only", mixed, &csr_only, false);
  }
  {
    // Compile time: the cover and the packing of one BERT-base FFN weight
    // (W [3072, 768] as Gemm transB), wall time.
    const int64_t bert_k = 768, bert_n = 3072;
    const std::vector<float> b_kn = mixed_b(bert_k, bert_n, 0.10, 0.6, 0.3, rng);
    std::vector<float> w(b_kn.size());  // stored [N, K]
    for (int64_t kk = 0; kk < bert_k; ++kk)
      for (int64_t j = 0; j < bert_n; ++j) w[j * bert_k + kk] = b_kn[kk * bert_n + j];
    auto wall = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
    const double t0 = wall();
    const sparse::SparseLayoutChoice choice =
        sparse::choose_sparse_layout(w.data(), bert_k, bert_n, bert_k, true);
    const double t1 = wall();
    const sparse::SparseMatrix packed =
        sparse::pack_sparse_b(w.data(), bert_k, bert_n, bert_k, true, choice.layout);
    const double t2 = wall();
    std::printf("cover of a 3072x768 weight (transB): choose %.1f ms, pack %.1f ms: %s\n",
                1e3 * (t1 - t0), 1e3 * (t2 - t1), choice.summary.c_str());
    if (packed.empty()) return 1;
  }
  std::printf("block costs: %s\n", sparse::sparse_costs().source.c_str());
  std::printf(
      "target: SparTA's >= 0.7 x (1/density) over dense at 90%%+ sparsity, faster than dense "
      "from 50%%\n");
  return 0;
}
