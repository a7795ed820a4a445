#pragma once
// The SparDR sparse-convolution kernel (conv_spardr.cpp), written once over
// xsimd batches and instantiated per ISA by conv_spardr_<isa>.cpp. Include
// it from nowhere else: everything is in an anonymous namespace so no
// function compiled for AVX-512 can be picked by the linker for a caller on
// a baseline CPU (the rule of kernels/cpu/gemm_microkernel_impl.hpp).
//
// Lanes run along output pixels: each nonzero w of channel oc broadcasts w
// and FMAs it with a vector of L at its precomputed offset (SparDR §III-C
// index mapping). Unstructured nonzeros never fill a vector along output
// channels, while every output pixel of a channel needs the same nonzeros,
// so the pixel axis is the one that vectorises without waste.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_fma.hpp"
#include "kernels/sparse/conv_spardr_kernels.hpp"
#include "kernels/sparse/csr_dot_impl.hpp"
#include "kernels/sparse/finish_row_impl.hpp"
#include "kernels/sparse/transpose_block_impl.hpp"

namespace tessera::kernels::sparse {
namespace {

using cpu::GemmEpilogue;

// The real pixels among positions [p0, p0 + valid) of the chunk's grid
// (SpardrChunk): runs of consecutive positions within one output row.
struct PixelRun {
  int64_t offset;  // of its first position from p0
  int64_t pixel;   // its first pixel's index in y's numbering
  int64_t count;
};

// Fills `runs` (room for kSpardrMaxBlockPixels) and returns how many.
inline int pixel_runs(const SpardrChunk& chunk, int64_t p0, int64_t valid, PixelRun* runs) {
  int n = 0;
  for (int64_t p = p0, end = p0 + valid; p < end;) {
    const int64_t r = p / chunk.grid_w, j = p % chunk.grid_w;
    if (j >= chunk.cols) {
      p = (r + 1) * chunk.grid_w;
      continue;
    }
    const int64_t count = std::min(chunk.cols - j, end - p);
    const int64_t pixel = r * chunk.row_pixels + j;
    // Rows with no dropped columns continue the previous run (one epilogue
    // call per channel, not one per row: 14-column rows cost 1.4x).
    if (n > 0 && runs[n - 1].offset + runs[n - 1].count == p - p0 &&
        runs[n - 1].pixel + runs[n - 1].count == pixel)
      runs[n - 1].count += count;
    else
      runs[n++] = {p - p0, pixel, count};
    p += count;
  }
  return n;
}

// Every channel of the chunk over one block of MV vectors of positions
// from p0 (`valid` of them inside the chunk), then the epilogue on the
// block's real pixels: channel-major outputs per channel straight from the
// sums, pixel-major ones after a transpose.
template <class Arch, int MV>
void pixel_block(const SpardrChunk& chunk, int64_t p0, int64_t valid) {
  using Batch = xsimd::batch<float, Arch>;
  static_assert(MV * Batch::size <= kSpardrMaxBlockPixels);
  const SpardrWeights& w = *chunk.weights;
  const int64_t* row_begin = w.row_begin.data();
  const int32_t* offsets = w.offsets.data();
  const float* values = w.values.data();
  const float* l = chunk.l + p0;
  const GemmEpilogue& ep = *chunk.epilogue;
  const int64_t channels = chunk.oc1 - chunk.oc0;
  const int64_t blocks = w.channel_blocks, oc_count = w.out_channels;
  // Groups of kChannelGroup output channels (their sums, 32 KiB, stay in
  // L1), then input-channel blocks (their L slice stays in L1
  // across the group), then the group's channels: in bucket order (§III-C),
  // which groups channels of equal trip count; each channel's sums land at
  // its own place whatever the order.
  constexpr int64_t kChannelGroup = 128;
  for (int64_t g0 = 0; g0 < channels; g0 += kChannelGroup) {
    const int64_t g1 = std::min(channels, g0 + kChannelGroup);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t* begin = row_begin + b * oc_count;
      for (int64_t i = g0; i < g1; ++i) {
        const int32_t slot = chunk.slots[i], oc = w.order[static_cast<size_t>(slot)];
        if (b > 0 && begin[slot] == begin[slot + 1]) continue;  // nothing to add
        float* sums = chunk.sums + (oc - chunk.oc0) * kSpardrMaxBlockPixels;
        // Loads of L bound the loop (one per FMA): 2 sets of sums in
        // flight cover the FMA latency with MV >= 2 vectors.
        csr_dot<Batch, MV, (MV >= 2 ? 2 : 4)>(l, offsets, values, begin[slot], begin[slot + 1],
                                              b > 0, sums);
      }
    }
  }
  PixelRun runs[kSpardrMaxBlockPixels];
  const int run_count = pixel_runs(chunk, p0, valid, runs);
  if (!chunk.pixel_major) {
    for (int64_t oc = chunk.oc0; oc < chunk.oc1; ++oc)
      for (int i = 0; i < run_count; ++i)
        finish_row<Arch>(chunk.sums + (oc - chunk.oc0) * kSpardrMaxBlockPixels + runs[i].offset,
                         chunk.y + oc * chunk.ld_y + runs[i].pixel, runs[i].count, oc,
                         runs[i].pixel, ep);
    return;
  }
  transpose_block<Arch>(chunk.sums, kSpardrMaxBlockPixels, channels, valid, chunk.sums_t, channels);
  for (int i = 0; i < run_count; ++i)
    for (int64_t j = 0; j < runs[i].count; ++j) {
      const int64_t pixel = runs[i].pixel + j;
      finish_row<Arch>(chunk.sums_t + (runs[i].offset + j) * channels,
                       chunk.y + pixel * chunk.ld_y + chunk.oc0, channels, pixel, chunk.oc0, ep);
    }
}

// A pixel block of `vectors` <= MV vectors, on the narrowest instance.
template <class Arch, int MV>
void pixel_block_of(const SpardrChunk& chunk, int64_t p0, int64_t valid, int64_t vectors) {
  if constexpr (MV > 1)
    if (vectors < MV) return pixel_block_of<Arch, MV - 1>(chunk, p0, valid, vectors);
  pixel_block<Arch, MV>(chunk, p0, valid);
}

// The chunk's positions in blocks of MaxMV vectors, the last block only as
// many vectors as it has positions for.
template <class Arch, int MaxMV>
void spardr_chunk_impl(const SpardrChunk& chunk) {
  constexpr int64_t W = xsimd::batch<float, Arch>::size;
  static_assert(MaxMV * W <= kSpardrMaxBlockPixels);
  for (int64_t p0 = 0; p0 < chunk.positions; p0 += MaxMV * W) {
    const int64_t valid = std::min<int64_t>(MaxMV * W, chunk.positions - p0);
    pixel_block_of<Arch, MaxMV>(chunk, p0, valid, (valid + W - 1) / W);
  }
}

}  // namespace
}  // namespace tessera::kernels::sparse
