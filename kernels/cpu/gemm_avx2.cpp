// The AVX2 + FMA3 SGEMM microkernels of the manifest. kernels/CMakeLists.txt
// compiles this file, and only this file, with the matching target flags;
// gemm.cpp calls into it only when the CPU supports the ISA.
#include "kernels/cpu/gemm_microkernel_impl.hpp"

namespace tessera::kernels::cpu {

#define TESSERA_GEMM_kAvx512(function, pack_a_function, mr, nr)
#define TESSERA_GEMM_kAvx2(function, pack_a_function, mr, nr)
#define TESSERA_GEMM_kPortable(function, pack_a_function, mr, nr)
#undef TESSERA_GEMM_kAvx2
#define TESSERA_GEMM_kAvx2(function, pack_a_function, mr, nr)                               \
  void function(const GemmMicrokernelArgs& args) {                                          \
    gemm_microkernel<xsimd::fma3<xsimd::avx2>, mr, nr>(args);                               \
  }                                                                                         \
  void pack_a_function(const float* a, int64_t lda, int64_t rows, int64_t kc, float* out) { \
    gemm_pack_a<mr>(a, lda, rows, kc, out);                                                 \
  }
#define TESSERA_GEMM_MICROKERNEL(isa, function, pack_a_function, mr, nr) \
  TESSERA_GEMM_##isa(function, pack_a_function, mr, nr)
#include "kernels/cpu/gemm_edge_microkernels.inc"
#include "kernels/cpu/gemm_microkernels.inc"
#undef TESSERA_GEMM_MICROKERNEL

}  // namespace tessera::kernels::cpu
