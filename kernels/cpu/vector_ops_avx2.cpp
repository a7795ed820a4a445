// The avx2 instance of the transformer ops' vector loops
// (vector_ops_impl.hpp): kernels/CMakeLists.txt compiles this file with the
// matching target flags, and vector_ops() returns it only when gemm_isa() is
// Avx2.
#include "kernels/cpu/vector_ops_impl.hpp"

namespace tessera::kernels::cpu {

const VectorOps kVectorOpsAvx2 = make_vector_ops<xsimd::fma3<xsimd::avx2>>();

}  // namespace tessera::kernels::cpu
