// The portable instance of the transformer ops' vector loops
// (vector_ops_impl.hpp): kernels/CMakeLists.txt compiles this file with the
// matching target flags, and vector_ops() returns it only when gemm_isa() is
// Portable.
#include "kernels/cpu/vector_ops_impl.hpp"

namespace tessera::kernels::cpu {

const VectorOps kVectorOpsPortable = make_vector_ops<xsimd::sse2>();

}  // namespace tessera::kernels::cpu
