#pragma once
// "cpu.conv_winograd": 3×3 stride-1 convolution (group 1, dilation 1, any
// padding) by Winograd F(4×4, 3×3) (Lavin & Gray 2016, "Fast Algorithms for
// Convolutional Neural Networks", §4): each 4×4 block of output pixels is
//
//   Y = A^T · [ Σ_c (G·g_c·G^T) ⊙ (B^T·d_c·B) ] · A
//
// for its 6×6 input patch d, so the 36 products per channel pair of a direct
// 3×3 conv's 144 (16 pixels × 9 taps) become 36 element-wise ones: 2.25×
// fewer multiply-adds. Per tile the 36 element-wise products over channels
// are 36 GEMMs [blocks, C] · [C, OC] on the packed SGEMM (gemm.hpp); the
// weights U = G·g·G^T are transformed and packed once, at prepare. The
// transforms are vectorised over channels (conv_winograd_impl.hpp, one
// translation unit per ISA). The output is computed exactly for the tile's
// region (4×4 blocks from its first pixel; partial ones store their valid
// part) and gets conv_gemm's epilogue: bias, fused residual (before the
// activation), activation.
//
// F(4×4, 3×3) rounds more than a direct conv (the transforms scale values by
// up to 8·8 and back); tests/kernels_cpu measure the error against the
// reference.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::cpu {

void conv_winograd(const TileArgs& args);
PreparedOp prepare_conv_winograd(const graph::Operator& op,
                                 std::span<const ConstTensorView> inputs);
// Whether the op is a conv Winograd F(4×4, 3×3) can compute (3×3, stride 1,
// dilation 1, group 1, 2-D, constant weights); says why not otherwise.
std::optional<std::string> conv_winograd_supports(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs);
// conv_winograd_supports() and where Winograd is faster than cpu.conv_gemm
// on this CPU (the rule and its measurements are in conv_winograd.cpp): what
// the compiler's kernel choice asks.
std::optional<std::string> conv_winograd_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs);

// The per-ISA transforms (conv_winograd_impl.hpp). taps[row·6 + column]
// points at the `channels` floats of one patch pixel (a zero run for
// padding); V element e goes to v[e·v_stride + c]. M element e is read at
// m[e·m_stride + c]; output pixel p = row·4 + column goes to y[p·ld_y + c].
using WinogradInputTransform = void (*)(const float* const* taps, int64_t channels, float* v,
                                        int64_t v_stride);
using WinogradOutputTransform = void (*)(const float* m, int64_t m_stride, int64_t channels,
                                         float* y, int64_t ld_y);
void winograd_input_transform_portable(const float* const*, int64_t, float*, int64_t);
void winograd_output_transform_portable(const float*, int64_t, int64_t, float*, int64_t);
void winograd_input_transform_avx2(const float* const*, int64_t, float*, int64_t);
void winograd_output_transform_avx2(const float*, int64_t, int64_t, float*, int64_t);
void winograd_input_transform_avx512(const float* const*, int64_t, float*, int64_t);
void winograd_output_transform_avx512(const float*, int64_t, int64_t, float*, int64_t);

}  // namespace tessera::kernels::cpu
