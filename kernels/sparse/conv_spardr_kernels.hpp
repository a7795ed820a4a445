#pragma once
// The contract between conv_spardr.cpp's driver and the per-ISA SparDR
// kernels (conv_spardr_<isa>.cpp, each compiled with its own target flags).
// Internal to kernels/sparse.
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace tessera::kernels::sparse {

// The weights after SparDR's KernelTransform (§III-C, §IV-A): CSR over the
// output channels whose column index is already the nonzero's offset into
// the reconstructed input L (the index matrix IM of Fig. 7(d)), so the
// inner loop reads L at offsets[p] + pixel and does no address arithmetic.
//
// The input channels are cut into blocks whose part of L for one pixel
// block fits in L1 (SparDR's channel-first order, Algorithm 1, blocked):
// the nonzeros on input-channel block b of the output channel in slot s of
// `order` are [row_begin[b·OC + s], row_begin[b·OC + s + 1]), so a pixel block's L
// slice is loaded from L2 once per block and reused by every output
// channel, instead of once per output channel.
struct SpardrWeights {
  int64_t out_channels = 0;
  int64_t channel_blocks = 1;
  std::vector<int64_t> row_begin;  // [channel_blocks·OC + 1]
  std::vector<int32_t> offsets;    // per nonzero: its window's start in L
  std::vector<float> values;       // per nonzero
  // Output channels bucket-sorted by nonzero count, most first (§III-C).
  std::vector<int32_t> order;
};

// One chunk of output pixels × output channels [oc0, oc1): sums over `l`,
// then the epilogue into `y`. The chunk's pixels are read from L on a grid
// of grid_w positions per output row (an output row plus the columns the
// widest tap reaches past it, so every tap's window is L shifted by a fixed
// offset): position p is output row p / grid_w, column p % grid_w, and only
// columns below `cols` are real pixels; the others are computed and dropped.
// Real pixel (r, j) is pixel r·row_pixels + j of y (and of the residual).
struct SpardrChunk {
  const float* l = nullptr;  // L of the chunk; position p of a window at l + offset + p
  const SpardrWeights* weights = nullptr;
  int64_t oc0 = 0, oc1 = 0;
  // The slots (in the weights' `order`) of the output channels of
  // [oc0, oc1), ascending.
  const int32_t* slots = nullptr;
  int64_t positions = 0;  // (rows - 1)·grid_w + cols
  int64_t grid_w = 1, cols = 1, row_pixels = 1;
  // Channel-major (NCHW): channel oc, pixel p at y[oc·ld_y + p], bias per
  // row. Pixel-major (NHWC): y[p·ld_y + oc], bias per column. The
  // epilogue's residual is indexed the same way as y.
  float* y = nullptr;
  int64_t ld_y = 0;
  bool pixel_major = false;
  const cpu::GemmEpilogue* epilogue = nullptr;
  float* sums = nullptr;    // scratch: (oc1 - oc0) × kSpardrMaxBlockPixels
  float* sums_t = nullptr;  // scratch (pixel-major only): the same, transposed
};

// The widest pixel block any ISA computes at once (AVX-512: 4 vectors of
// 16, AVX2: 8 of 8): L needs this many floats of readable slack past its
// end (beyond the widest tap's reach). Every nonzero costs one broadcast
// and one index load per block, so wider blocks amortise them over more
// FMAs.
inline constexpr int64_t kSpardrMaxBlockPixels = 64;

using SpardrKernel = void (*)(const SpardrChunk&);

void spardr_chunk__avx512(const SpardrChunk& chunk);
void spardr_chunk__avx2(const SpardrChunk& chunk);
void spardr_chunk__sse2(const SpardrChunk& chunk);

// One input row's part of a chunk's L (FeatureTransform, §III-B): for every
// input channel c and kernel column kw, the plane row at dst +
// c·channel_stride + kw·kw_stride gets x_c[start + kw·dilation + j·step]
// for j < grid_w, zero outside [0, in_w), where x_c is channel c of the
// row: src[i·channels + c] for NHWC (transposed here, once per row), else
// src[c·ld_channel + i]. A null src is a padding row: all zeros.
struct SpardrRow {
  const float* src = nullptr;
  bool nhwc = false;
  int64_t ld_channel = 0;
  int64_t in_w = 0, channels = 0;
  int64_t start = 0, step = 1, dilation = 1, k_w = 1, grid_w = 0;
  float* dst = nullptr;
  int64_t channel_stride = 0, kw_stride = 0;
};

using SpardrRowKernel = void (*)(const SpardrRow&);

void spardr_row__avx512(const SpardrRow& row);
void spardr_row__avx2(const SpardrRow& row);
void spardr_row__sse2(const SpardrRow& row);

}  // namespace tessera::kernels::sparse
