// Int8 GEMM (kernels/cpu/gemm_int8.hpp, AVX-512 VNNI) beside Tessera's
// float32 SGEMM on the same shapes, one thread, and oneDNN's u8s8s32 GEMM
// when it is available. Tessera's int8 time includes quantizing A's rows and
// scaling C back to float; oneDNN's is the integer product alone.
//
//   bench_int8 [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_int8.hpp"

#ifdef TESSERA_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

using namespace tessera::kernels::cpu;
using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t m, k, n;
  const char* what;
};

template <class F>
double median_ms(int reps, F&& f) {
  f();  // warm-up: scratch, caches
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_int8 [--reps R]\n");
      return 2;
    }
  }
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni))
    std::printf("note: no AVX-512 VNNI on this CPU; the int8 column is the portable path\n");
  const Shape shapes[] = {{128, 768, 768, "BERT-base seq 128 Q/K/V/out"},
                          {128, 768, 3072, "BERT-base FFN up"},
                          {128, 3072, 768, "BERT-base FFN down"},
                          {1024, 1024, 1024, "1024^3"}};
  std::printf("one thread, median of %d; GOP/s = 2·M·K·N / time\n", reps);
  std::printf("%-28s %16s %10s %10s %10s %12s %10s\n", "shape", "MxKxN", "fp32 ms", "int8 ms",
              "int8/fp32", "oneDNN s8 ms", "int8 GOP/s");
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
    std::vector<float> c(static_cast<size_t>(s.m * s.n));
    for (float& v : a) v = value(rng);
    for (float& v : b) v = value(rng);
    const PackedMatrix packed = pack_b(b.data(), s.k, s.n, s.n, false);
    const QuantizedMatrix q = quantize_b(b.data(), s.k, s.n, s.n, false);
    const GemmTile tile{.m0 = 0, .m1 = s.m, .n0 = 0, .n1 = s.n};
    const double fp32 =
        median_ms(reps, [&] { gemm_tile(a.data(), s.k, packed, c.data(), s.n, tile); });
    const double int8 =
        median_ms(reps, [&] { int8_gemm_tile(a.data(), s.k, q, c.data(), s.n, tile); });
    double onednn = 0.0;
#ifdef TESSERA_BENCH_HAVE_DNNL
    std::vector<uint8_t> qa(a.size(), 128);
    std::vector<int8_t> qb(b.size(), 1);
    std::vector<int32_t> ci(c.size());
    const int32_t co = 0;
    onednn = median_ms(reps, [&] {
      dnnl_gemm_u8s8s32('N', 'N', 'F', s.m, s.n, s.k, 1.0f, qa.data(), s.k, 0, qb.data(), s.n, 0,
                        0.0f, ci.data(), s.n, &co);
    });
#endif
    char dims[48];
    std::snprintf(dims, sizeof dims, "%lldx%lldx%lld", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n));
    const double ops = 2.0 * static_cast<double>(s.m * s.k * s.n);
    std::printf("%-28s %16s %10.3f %10.3f %9.2fx %12.3f %10.1f\n", s.what, dims, fp32, int8,
                fp32 / int8, onednn, ops / int8 / 1e6);
  }
  return 0;
}
