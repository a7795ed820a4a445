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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_activation.hpp"
#include "kernels/cpu/simd_fma.hpp"
#include "kernels/cpu/simd_lanes.hpp"
#include "kernels/cpu/transpose_block_impl.hpp"
#include "kernels/sparse/conv_spardr_kernels.hpp"
#include "kernels/sparse/csr_dot_impl.hpp"
#include "kernels/sparse/finish_row_impl.hpp"

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
        // Loads of L bound the loop (one per FMA); csr_sum_sets picks how
        // many sets of sums cover the FMA latency in the ISA's registers.
        csr_dot<Batch, MV, csr_sum_sets<Batch>(MV)>(l, offsets, values, begin[slot],
                                                    begin[slot + 1], b > 0, sums);
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
  cpu::transpose_block<Arch>(chunk.sums, kSpardrMaxBlockPixels, channels, valid, chunk.sums_t,
                             channels);
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

// d[j] = s[j·step] for j < count, vectors of Arch; s has readable slack
// (zeros) past its last sample for whole vectors (two for step 2). The last
// count mod W samples take a masked store: a whole vector would write into
// the next row of the plane, or past the plane's last row into the next
// plane, which may already be built.
template <class Arch>
inline void copy_samples(const float* s, int64_t step, int64_t count, float* d) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int64_t W = Batch::size;
  const int64_t full = count / W * W;
  const int lanes = static_cast<int>(count - full);
  if (step == 1) {
    for (int64_t j = 0; j < full; j += W) Batch::load_unaligned(s + j).store_unaligned(d + j);
    if (lanes > 0) cpu::store_lanes<Arch>(d + full, Batch::load_unaligned(s + full), 0, lanes);
    return;
  }
#if defined(__AVX512F__)
  if constexpr (W == 16) {
    if (step == 2) {  // the even floats of two vectors: one permute (stems' stride 2)
      const __m512i even =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      auto gather = [&](int64_t j) {
        return Batch(_mm512_permutex2var_ps(_mm512_loadu_ps(s + 2 * j), even,
                                            _mm512_loadu_ps(s + 2 * j + W)));
      };
      for (int64_t j = 0; j < full; j += W) gather(j).store_unaligned(d + j);
      if (lanes > 0) cpu::store_lanes<Arch>(d + full, gather(full), 0, lanes);
      return;
    }
  }
#endif
  int64_t j = 0;
#if defined(__SSE2__)
  if (step == 2)  // four samples per shuffle
    for (; j + 4 <= count; j += 4)
      _mm_storeu_ps(d + j, _mm_shuffle_ps(_mm_loadu_ps(s + 2 * j), _mm_loadu_ps(s + 2 * j + 4),
                                          _MM_SHUFFLE(2, 0, 2, 0)));
#endif
  for (; j < count; ++j) d[j] = s[j * step];
}

// SpardrRow (conv_spardr_kernels.hpp): the row's channels go into a
// per-thread panel [channels][ld] with zero margins wide enough for every
// tap's reach, transposed there from NHWC in W×W register blocks or copied
// from channel rows; then each (c, kw) plane row is a run of vector copies
// from the panel (strided gathers for stride 2). The zeros of the padding
// are the margins', so the copies have no edge cases. Per (c, kw) memcpy
// calls and the 4×4 SSE transpose of each NHWC row cost more than the sums
// over L on ResNet-50's 56×56 3×3 convs.
template <class Arch>
void spardr_row_impl(const SpardrRow& row) {
  using Batch = xsimd::batch<float, Arch>;
  constexpr int64_t W = Batch::size;
  auto plane_row = [&](int64_t c, int64_t kw) {
    return row.dst + c * row.channel_stride + kw * row.kw_stride;
  };
  if (!row.src) {
    for (int64_t c = 0; c < row.channels; ++c)
      for (int64_t kw = 0; kw < row.k_w; ++kw) std::fill_n(plane_row(c, kw), row.grid_w, 0.0f);
    return;
  }
  // Samples read [start, last]; the vectors of copy_samples read up to
  // 2·W floats past the last sample.
  const int64_t last = row.start + (row.k_w - 1) * row.dilation + (row.grid_w - 1) * row.step;
  const int64_t left = row.start < 0 ? (-row.start + W - 1) / W * W : 0;
  const int64_t ld = (left + std::max(row.in_w, last + 1) + 2 * W + W - 1) / W * W;
  // Only the rows' interiors are ever written, so the margins stay zero
  // from one row to the next of the same geometry: they are cleared when
  // it changes (zeroing them per row was a fifth of the row's time).
  struct Panel {
    std::vector<float> buffer;
    float* data = nullptr;
    int64_t channels = 0, ld = 0, left = 0, in_w = 0;
  };
  thread_local Panel cached;
  float* panel = cpu::grown(cached.buffer, row.channels * ld);
  if (panel != cached.data || row.channels != cached.channels || ld != cached.ld ||
      left != cached.left || row.in_w != cached.in_w) {
    std::fill_n(panel, row.channels * ld, 0.0f);
    cached.data = panel;
    cached.channels = row.channels;
    cached.ld = ld;
    cached.left = left;
    cached.in_w = row.in_w;
  }
  if (row.nhwc)
    cpu::transpose_block<Arch>(row.src, row.channels, row.in_w, row.channels, panel + left, ld);
  else
    for (int64_t c = 0; c < row.channels; ++c)
      std::memcpy(panel + c * ld + left, row.src + c * row.ld_channel,
                  static_cast<size_t>(row.in_w) * sizeof(float));
  for (int64_t c = 0; c < row.channels; ++c)
    for (int64_t kw = 0; kw < row.k_w; ++kw)
      copy_samples<Arch>(panel + c * ld + left + row.start + kw * row.dilation, row.step,
                         row.grid_w, plane_row(c, kw));
}

}  // namespace
}  // namespace tessera::kernels::sparse
