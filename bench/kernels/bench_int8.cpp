// Int8 GEMM (kernels/cpu/gemm_int8.hpp, AVX-512 VNNI) beside Tessera's
// float32 SGEMM on the same shapes, one thread, and oneDNN's u8s8s32 GEMM
// when it is available. Tessera's int8 time includes quantizing A's rows and
// scaling C back to float; oneDNN's is the integer product alone. Then
// block-pruned weights (32×32 blocks, SparTA §5.1's BERT pruning): float32
// dense, the float32 sparse kernel, int8 dense and int8 in the 32×32-block
// layout.
//
//   bench_int8 [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_int8.hpp"
#include "kernels/sparse/sparse_gemm.hpp"
#include "openmp_one_thread.hpp"

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
  tessera::bench::limit_openmp_to_one_thread();
  if (!int8_isa_supported(Int8Isa::kAvx512Vnni))
    std::printf("note: no AVX-512 VNNI on this CPU; the int8 column is the %s path\n",
                std::string(int8_isa_name(int8_isa())).c_str());
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

  std::printf("\n32x32 block-pruned B, one thread, median of %d (speedups over float32 dense)\n",
              reps);
  std::printf("%-28s %10s %12s %12s %12s\n", "shape, blocks kept", "fp32 ms", "fp32 sparse",
              "int8 dense", "int8 blocks");
  for (const double kept : {0.30, 0.10, 0.05}) {
    const Shape s{128, 768, 3072, "BERT FFN up"};
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
    std::vector<float> c(static_cast<size_t>(s.m * s.n));
    for (float& v : a) v = value(rng);
    std::bernoulli_distribution keep(kept);
    for (int64_t kb = 0; kb < s.k / 32; ++kb)
      for (int64_t nb = 0; nb < s.n / 32; ++nb) {
        const bool on = keep(rng);
        for (int64_t kk = kb * 32; kk < kb * 32 + 32; ++kk)
          for (int64_t j = nb * 32; j < nb * 32 + 32; ++j)
            b[static_cast<size_t>(kk * s.n + j)] = on ? value(rng) : 0.0f;
      }
    const GemmTile tile{.m0 = 0, .m1 = s.m, .n0 = 0, .n1 = s.n};
    const PackedMatrix packed = pack_b(b.data(), s.k, s.n, s.n, false);
    namespace sp = tessera::kernels::sparse;
    const sp::SparseMatrix sparse =
        sp::pack_sparse_b(b.data(), s.k, s.n, s.n, false,
                          sp::choose_sparse_layout(b.data(), s.k, s.n, s.n, false).layout);
    const QuantizedMatrix dense8 = quantize_b(b.data(), s.k, s.n, s.n, false);
    const QuantizedMatrix blocks8 =
        quantize_b(b.data(), s.k, s.n, s.n, false, Int8Layout::kBlocks32);
    const double fp32 =
        median_ms(reps, [&] { gemm_tile(a.data(), s.k, packed, c.data(), s.n, tile); });
    const double fp32_sparse =
        median_ms(reps, [&] { sp::sparse_gemm_tile(a.data(), s.k, sparse, c.data(), s.n, tile); });
    const double int8 =
        median_ms(reps, [&] { int8_gemm_tile(a.data(), s.k, dense8, c.data(), s.n, tile); });
    const double int8_blocks =
        median_ms(reps, [&] { int8_gemm_tile(a.data(), s.k, blocks8, c.data(), s.n, tile); });
    char what[64];
    std::snprintf(what, sizeof what, "%s, %.0f%% kept", s.what, 100.0 * kept);
    std::printf("%-28s %10.3f %11.2fx %11.2fx %11.2fx\n", what, fp32, fp32 / fp32_sparse,
                fp32 / int8, fp32 / int8_blocks);
  }
  return 0;
}
