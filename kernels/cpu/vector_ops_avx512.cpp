// The avx512 instance of the transformer ops' vector loops
// (vector_ops_impl.hpp): kernels/CMakeLists.txt compiles this file with the
// matching target flags, and vector_ops() returns it only when gemm_isa() is
// Avx512.
// GCC 12 _mm512_undefined_ps() trips -Wmaybe-uninitialized once inlined
// (GCC bug 105593; see gemm_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/vector_ops_impl.hpp"

namespace tessera::kernels::cpu {

const VectorOps kVectorOpsAvx512 = make_vector_ops<xsimd::avx512f>();

}  // namespace tessera::kernels::cpu
