// The baseline x86-64 (SSE2) instance of the Winograd transforms (conv_winograd_impl.hpp);
// kernels/CMakeLists.txt gives this file, and only this file, the ISA's
// flags. conv_winograd.cpp calls it only when gemm_isa() names the ISA.
#include "kernels/cpu/conv_winograd_impl.hpp"

namespace tessera::kernels::cpu {

TESSERA_WINOGRAD_TRANSFORMS(portable)

}  // namespace tessera::kernels::cpu
