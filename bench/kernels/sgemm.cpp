// Single-thread SGEMM: every microkernel of kernels/cpu/gemm_microkernels.inc
// beside oneDNN's dnnl_sgemm on the same shapes, in one run, with the
// machine's FP32 peak for reference.
//
//   bench_sgemm [--blocking=KC,MC,NC] [--benchmark_filter=...]
//               [--benchmark_repetitions=N] [...]
//
// --blocking forces one cache blocking (GemmBlocking's kc, mc, nc) on every
// microkernel instead of each kernel's own, to sweep blockings by shape.
//
// The summary table takes each variant's median repetition (run with
// --benchmark_repetitions=N); on this shared machine compare the ratios to
// oneDNN, measured in the same run, rather than absolute rates.
//
// Tessera's B is packed once outside the timed loop (weights are packed at
// model load); dnnl_sgemm packs internally on every call, which costs it a
// few percent on the small tile shapes. Both run on one thread.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "openmp_one_thread.hpp"
#include "thread_seconds.hpp"

#if TESSERA_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

// The machine is shared: every rate is per second of this thread's CPU time
// (Google Benchmark's default), so time lost to other processes is not
// counted against either side.
using namespace tessera::kernels::cpu;

struct Shape {
  const char* label;
  int64_t m, n, k;
  // > 1: that many different B matrices, used in turn, so that B comes from
  // memory as a model's weights do (each read once per inference), not
  // from the cache the previous iteration left it in.
  int copies = 1;
};

// 2048³; the tiler's tile shapes; ResNet-50 convolutions as im2col GEMMs
// (M = output pixels, N = output channels, K = input channels · kh · kw);
// BERT's tiles.
constexpr Shape kShapes[] = {
    {"square_2048", 2048, 2048, 2048},
    {"tile_64x128x1152", 64, 128, 1152},
    {"tile_256x64x576", 256, 64, 576},
    {"res2_3x3_3136x64x576", 3136, 64, 576},
    {"res3_3x3_784x128x1152", 784, 128, 1152},
    {"res4_3x3_196x256x2304", 196, 256, 2304},
    {"res5_3x3_49x512x4608", 49, 512, 4608},
    {"yolo_3x3_169x1024x4608", 169, 1024, 4608},  // bench/e2e/tiny_yolo.py's 13x13 512->1024
    {"res2_1x1_3136x256x64", 3136, 256, 64},
    // MobileNetV2's 14×14 projection (1×1, 576 → 96) as a 2-thread tile.
    {"mbv2_1x1_56x96x576", 56, 96, 576},
    // The same projection whole, as one thread runs it, and MobileNetV2's
    // other narrow projections (kernel choice on ties: gemm.cpp).
    {"mbv2_1x1_196x96x576", 196, 96, 576},
    {"mbv2_1x1_3136x24x144", 3136, 24, 144},
    {"mbv2_1x1_784x32x192", 784, 32, 192},
    {"mbv2_1x1_49x160x960", 49, 160, 960},
    // Its expansions from 32 and 64 channels: K is a few dozen, so the
    // stores and the epilogue weigh against a short k loop.
    {"mbv2_1x1_784x192x32", 784, 192, 32},
    {"mbv2_1x1_196x384x64", 196, 384, 64},
    // Its first expansion (112×112, 16 -> 96): K = 16.
    {"mbv2_1x1_12544x96x16", 12544, 96, 16},
    // BERT-base at sequence 128 as the 1-thread tiler cuts it (two column
    // tiles per weight matrix): Q/K/V/output, FFN up, FFN down.
    {"bert_128x384x768", 128, 384, 768},
    {"bert_128x1536x768", 128, 1536, 768},
    {"bert_128x384x3072", 128, 384, 3072},
    // BERT-base's whole linear layers at 1 thread with weights from memory
    // (377, 377 and 283 MB of B in turn).
    {"bert_cold_128x3072x768", 128, 3072, 768, 40},
    {"bert_cold_128x768x3072", 128, 768, 3072, 40},
    {"bert_cold_128x768x768", 128, 768, 768, 120},
    // BERT-base's FFN at sequence 384 (batch 1) and at sequence 128 batch 8
    // as one thread runs them (whole ops): more rows than one packed block of
    // A keeps in L2 beside the B panels.
    {"bert_384x3072x768", 384, 3072, 768, 4},
    {"bert_384x768x3072", 384, 768, 3072, 4},
    {"bert_1024x3072x768", 1024, 3072, 768, 2},
    {"bert_1024x768x3072", 1024, 768, 3072, 2},
    // One head of BERT's attention at sequence 128 (cpu.attention): Q·K^T
    // (K = head dim 64) and P·V.
    {"attn_128x128x64", 128, 128, 64},
    {"attn_128x64x128", 128, 64, 128},
};

std::vector<float> random_matrix(int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(size));
  for (float& x : v) x = dist(rng);
  return v;
}

void set_flops(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.n * s.k * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The shape's B matrices (s.copies of them), each K × N row-major.
std::vector<std::vector<float>> b_matrices(const Shape& s) {
  std::vector<std::vector<float>> b;
  for (int i = 0; i < s.copies; ++i)
    b.push_back(random_matrix(s.k * s.n, 2 + static_cast<uint32_t>(i)));
  return b;
}

void bm_tessera(benchmark::State& state, Shape s, const GemmMicrokernel* kernel) {
  const std::vector<float> a = random_matrix(s.m * s.k, 1);
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  std::vector<PackedMatrix> packed;
  for (const std::vector<float>& b : b_matrices(s))
    packed.push_back(pack_b(b.data(), s.k, s.n, s.n, false, *kernel));
  size_t next = 0;
  for (auto _ : state) {
    gemm_tile(a.data(), s.k, packed[next], c.data(), s.n, {.m0 = 0, .m1 = s.m, .n0 = 0, .n1 = s.n});
    next = (next + 1) % packed.size();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

#if TESSERA_BENCH_HAVE_DNNL
void bm_onednn(benchmark::State& state, Shape s) {
  const std::vector<float> a = random_matrix(s.m * s.k, 1);
  const std::vector<std::vector<float>> b = b_matrices(s);
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  size_t next = 0;
  for (auto _ : state) {
    if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.data(), s.k, b[next].data(), s.n, 0.0f,
                   c.data(), s.n) != dnnl_success)
      state.SkipWithError("dnnl_sgemm failed");
    next = (next + 1) % b.size();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}
#endif

// The highest rate, work / second, of five timed calls of run().
template <class Run>
double fastest_rate(double work, Run run) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = tessera::bench::thread_seconds();
    run();
    best = std::max(best, work / (tessera::bench::thread_seconds() - t0));
  }
  return best;
}

// Clock: a chain of dependent register-register adds retires one per cycle
// (add-immediate chains do not: Golden Cove folds small immediates at rename).
double measure_clock_hz() {
  constexpr int64_t kLoops = 20'000'000;
  // The loop's own add/cmp/jmp overlap the chain.
  return fastest_rate(kLoops * 8.0, [] {
    uint64_t x = 0, one = 1;
    for (int64_t i = 0; i < kLoops; ++i)
      asm volatile(
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
          "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
          : "+r"(x)
          : "r"(one));
  });
}

// Measured FP32 FMA throughput on one core: 24 independent AVX-512 FMA
// chains (enough to cover 4-cycle latency × 2 ports), what no SGEMM can beat.
__attribute__((target("avx512f"))) void avx512_fma_loop(int64_t loops) {
#define TESSERA_FMA(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
  asm volatile(
      "vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31\n\t"
      "1:\n\t" TESSERA_FMA(0) TESSERA_FMA(1) TESSERA_FMA(2) TESSERA_FMA(3) TESSERA_FMA(4)
          TESSERA_FMA(5) TESSERA_FMA(6) TESSERA_FMA(7) TESSERA_FMA(8) TESSERA_FMA(9) TESSERA_FMA(10)
              TESSERA_FMA(11) TESSERA_FMA(12) TESSERA_FMA(13) TESSERA_FMA(14) TESSERA_FMA(15)
                  TESSERA_FMA(16) TESSERA_FMA(17) TESSERA_FMA(18) TESSERA_FMA(19) TESSERA_FMA(20)
                      TESSERA_FMA(21) TESSERA_FMA(22)
                          TESSERA_FMA(23) "dec %0\n\tjnz 1b\n\tvzeroupper"
      : "+r"(loops)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",
        "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31");
#undef TESSERA_FMA
}

// The same on machines without AVX-512: 12 independent AVX2 FMA chains (ymm0-11).
__attribute__((target("avx2,fma"))) void avx2_fma_loop(int64_t loops) {
#define TESSERA_FMA(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n\t"
  asm volatile(
      "vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15\n\t"
      "1:\n\t" TESSERA_FMA(0) TESSERA_FMA(1) TESSERA_FMA(2) TESSERA_FMA(3) TESSERA_FMA(4)
          TESSERA_FMA(5) TESSERA_FMA(6) TESSERA_FMA(7) TESSERA_FMA(8) TESSERA_FMA(9) TESSERA_FMA(10)
              TESSERA_FMA(11) "dec %0\n\tjnz 1b\n\tvzeroupper"
      : "+r"(loops)
      :
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
        "xmm10", "xmm11", "xmm14", "xmm15");
#undef TESSERA_FMA
}

double measure_avx512_fma_flops() {
  constexpr int64_t kLoops = 4'000'000;  // 24 FMAs of 16 lanes each
  return fastest_rate(kLoops * 24.0 * 32.0, [] { avx512_fma_loop(kLoops); });
}

double measure_avx2_fma_flops() {
  constexpr int64_t kLoops = 8'000'000;  // 12 FMAs of 8 lanes each
  return fastest_rate(kLoops * 12.0 * 16.0, [] { avx2_fma_loop(kLoops); });
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Collects each run's GFLOP/s for the summary table.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  // shape → impl → GFLOP/s of each repetition
  std::map<std::string, std::map<std::string, std::vector<double>>> gflops;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
      const std::string name = run.benchmark_name();  // sgemm/<shape>/<impl>
      const size_t a = name.find('/'), b = name.find('/', a + 1);
      gflops[name.substr(a + 1, b - a - 1)][name.substr(b + 1)].push_back(
          static_cast<double>(run.counters.at("GFLOP/s").value));
    }
  }
};

// Takes --blocking=KC,MC,NC out of argv (Google Benchmark refuses flags it
// does not know) and forces it; the A-packing threshold stays the default
// kernel's. Returns false on a malformed value.
bool force_blocking_flag(int& argc, char** argv) {
  constexpr std::string_view kFlag = "--blocking=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with(kFlag)) continue;
    long long kc = 0, mc = 0, nc = 0;
    if (std::sscanf(argv[i] + kFlag.size(), "%lld,%lld,%lld", &kc, &mc, &nc) != 3 || kc < 1 ||
        mc < 1 || nc < 1) {
      std::fprintf(stderr, "bench_sgemm: --blocking takes KC,MC,NC (positive), got '%s'\n",
                   argv[i]);
      return false;
    }
    GemmBlocking blocking = gemm_blocking();
    blocking.kc = kc;
    blocking.mc = mc;
    blocking.nc = nc;
    set_gemm_blocking(blocking);
    std::copy(argv + i + 1, argv + argc, argv + i);
    --argc;
    --i;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::limit_openmp_to_one_thread();
  if (!force_blocking_flag(argc, argv)) return 2;

  const double clock_hz = measure_clock_hz();
  const bool avx512 = gemm_isa_supported(GemmIsa::kAvx512);
  const bool avx2 = gemm_isa_supported(GemmIsa::kAvx2);
  const double fma_flops = avx512 ? measure_avx512_fma_flops()
                           : avx2 ? measure_avx2_fma_flops()
                                  : 0.0;
  // Assumption: 2 FMA units per core (Xeon Sapphire Rapids, Zen 4/5): 2 × 16 lanes × 2 FLOP
  // = 64 FLOP/cycle with AVX-512, 32 where a machine offers only AVX2 (a guest whose host
  // hides AVX-512 too). The FMA loop checks it.
  const int flops_per_cycle = avx512 ? 64 : 32;
  const double peak = clock_hz * flops_per_cycle;
  std::printf("machine: %s, 1 thread (Tessera and oneDNN)\n", cpu_model().c_str());
  std::printf(
      "clock (dependent-add loop): %.2f GHz; assumed peak %d FLOP/cycle/core "
      "(2 %s FMA units) = %.1f GFLOP/s\n",
      clock_hz * 1e-9, flops_per_cycle, avx512 ? "AVX-512" : "AVX2", peak * 1e-9);
  if (fma_flops > 0)
    std::printf("measured %s FMA-loop peak: %.1f GFLOP/s (%.1f FLOP/cycle)\n",
                avx512 ? "AVX-512" : "AVX2", fma_flops * 1e-9, fma_flops / clock_hz);
  const tessera::kernels::cpu::CacheSizes& caches = tessera::kernels::cpu::cache_sizes();
  std::printf("caches per core (blocking derived from them): L1d %lld KiB, L2 %lld KiB (%s)\n",
              static_cast<long long>(caches.l1d / 1024), static_cast<long long>(caches.l2 / 1024),
              caches.source.c_str());
  std::printf("default microkernel: %.*s\n",
              static_cast<int>(gemm_default_microkernel().name.size()),
              gemm_default_microkernel().name.data());
  for (const GemmMicrokernel& kernel : gemm_microkernels()) {
    if (!gemm_isa_supported(kernel.isa)) continue;
    const GemmBlocking bl = gemm_blocking_for(kernel);
    std::printf("  %-20.*s kc %4lld  mc %4lld  nc %4lld  A packed from %lld columns\n",
                static_cast<int>(kernel.name.size()), kernel.name.data(),
                static_cast<long long>(bl.kc), static_cast<long long>(bl.mc),
                static_cast<long long>(bl.nc), static_cast<long long>(bl.pack_a_min_columns));
  }
  std::printf("\n");

  for (const Shape& s : kShapes) {
    const std::string prefix = std::string("sgemm/") + s.label + "/";
    for (const GemmMicrokernel& kernel : gemm_microkernels()) {
      if (!gemm_isa_supported(kernel.isa)) continue;
      benchmark::RegisterBenchmark((prefix + std::string(kernel.name)).c_str(), bm_tessera, s,
                                   &kernel)
          ->Unit(benchmark::kMillisecond);
    }
#if TESSERA_BENCH_HAVE_DNNL
    benchmark::RegisterBenchmark((prefix + "onednn").c_str(), bm_onednn, s)
        ->Unit(benchmark::kMillisecond);
#endif
  }
  benchmark::Initialize(&argc, argv);
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const double reference_peak = fma_flops > 0 ? std::min(peak, fma_flops) : peak;
  std::printf("\n%-26s %-22s %9s %8s %10s\n", "shape", "impl", "GFLOP/s", "%peak", "vs oneDNN");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  for (const auto& [shape, impls] : reporter.gflops) {
    const auto onednn = impls.find("onednn");
    const double onednn_g = onednn != impls.end() ? median(onednn->second) : 0.0;
    for (const auto& [impl, runs] : impls) {
      const double g = median(runs);
      std::printf("%-26s %-22s %9.1f %7.1f%% %9.3fx\n", shape.c_str(), impl.c_str(), g,
                  100.0 * g * 1e9 / reference_peak, onednn_g > 0 ? g / onednn_g : 0.0);
    }
  }
  std::printf(
      "medians of the repetitions; %%peak is of %.1f GFLOP/s (the lower of the assumed and "
      "measured peaks)\n",
      reference_peak * 1e-9);
  benchmark::Shutdown();
}
