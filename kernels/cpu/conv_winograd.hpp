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
// "cpu.conv_winograd_2x2": the same with F(2×2, 3×3) on the 4×4 input patch
// of each 2×2 block, 16 products for a direct conv's 36 (2.25× fewer), for
// the small maps (10×10 to 13×13) where F(4×4)'s blocks are too few: its 16
// transformed weight matrices are 1.8× the direct conv's weights, F(4×4)'s 36
// are 4×, and on a 13×13 map its blocks cover 14×14 (16% more pixels than
// the map), F(4×4)'s 16×16 (51% more).
//
// F(4×4, 3×3) rounds more than a direct conv (the transforms scale values by
// up to 8·8 and back), F(2×2, 3×3) about as much as a direct conv (its
// transforms only add); tests/kernels_cpu measure the error against the
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
void conv_winograd_2x2(const TileArgs& args);
PreparedOp prepare_conv_winograd_2x2(const graph::Operator& op,
                                     std::span<const ConstTensorView> inputs);
// Whether the op is a conv Winograd can compute (3×3, stride 1, dilation 1,
// group 1, 2-D, constant weights); says why not otherwise. Both forms
// compute the same convs.
std::optional<std::string> conv_winograd_supports(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs);
// conv_winograd_supports() and where the form is faster than cpu.conv_gemm
// on this CPU (the rules and their measurements are in conv_winograd.cpp):
// what the compiler's kernel choice asks. The two forms' maps do not
// overlap, so at most one applies.
std::optional<std::string> conv_winograd_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_winograd_2x2_applies(const graph::Operator& op,
                                                     std::span<const ConstTensorView> inputs);

// The per-ISA transforms (conv_winograd_impl.hpp) of F(B×B, 3×3), B = 4 or
// 2, with α = B + 2. taps[row·α + column] points at the `channels` floats
// of one patch pixel (a zero run for padding); V element e goes to
// v[e·v_stride + c]. M element e is read at m[e·m_stride + c]; output pixel
// p = row·B + column goes to y[p·ld_y + c].
using WinogradInputTransform = void (*)(const float* const* taps, int64_t channels, float* v,
                                        int64_t v_stride);
using WinogradOutputTransform = void (*)(const float* m, int64_t m_stride, int64_t channels,
                                         float* y, int64_t ld_y);
struct WinogradTransforms {
  WinogradInputTransform input = nullptr;
  WinogradOutputTransform output = nullptr;
};
WinogradTransforms winograd_transforms_portable(int block);
WinogradTransforms winograd_transforms_avx2(int block);
WinogradTransforms winograd_transforms_avx512(int block);

}  // namespace tessera::kernels::cpu
