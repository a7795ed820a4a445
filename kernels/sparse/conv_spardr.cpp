// "cpu.conv_sparse" (conv_spardr.hpp): SparDR's sparse convolution
// (papers/spardr.md) as a Tessera tile kernel.
//
// KernelTransform, once at prepare (§III-C, §IV-A): W [OC, C, kH, kW] → CSR
// over output channels; each nonzero (c, kh, kw) stores, instead of a column
// index, the start of its receptive-field window in the reconstructed input
// L (the index matrix IM of Fig. 7(d)), so the inner loop is "broadcast w,
// load a vector of L at offset + p, FMA" with no address arithmetic.
//
// FeatureTransform, per tile chunk (§III-B): L holds, for every input
// channel c, kernel column kw and row phase φ (the input rows h ≡ φ mod
// stride_h), the rows of the padded input that the chunk's output rows
// read, already sampled at the output columns: L[c][kw][φ][hh][j] =
// Xpad[c][h0 + hh·s_h + φ][(ow0 + j)·s_w + kw·d_w]. That is data aggregation
// of one window per (c, kw) with vertical data reuse (the window spans I_h
// rows, not O_h·kH, Fig. 6(a)); for stride 2 the rows split by phase
// (Fig. 6(b)'s non-contiguous window) so that the window of tap kh,
// t = kh·d_h = q·s_h + φ, is again contiguous: output pixel (r, j) of the
// chunk reads L[c][kw][φ] at (r + q)·grid_w + j, i.e. offset(c, kh, kw) + p
// with p = r·grid_w + j the chunk's position on L's grid. Rows are grid_w
// floats (out_w, or out_w padded to whole cache lines where taps reach
// across rows, so that every window starts on a line; the padded columns
// are computed and dropped) even for a part-row chunk, and planes hold a
// fixed number of rows, so the offsets are fixed at prepare time. L is
// built per chunk into a per-thread scratch bounded by kReconstructedFloats
// (at most a few MiB), never for the whole tensor; a chunk is as many whole
// output rows as fit.
//
// Vectors run along output pixels (conv_spardr_impl.hpp): unstructured
// nonzeros never fill a vector along channels. The activation layout the
// engine picks for convs (NHWC, kernels/layout_assignment.cpp) is accepted
// too: L's construction transposes an NHWC input row once (it is a copy
// anyway), and an NHWC output gets each pixel block's sums transposed
// before the epilogue.
//
// NHWC (X, Y and any residual), the layout the engine uses for these
// convs, takes a different route when the weights were packed for it at
// prepare (X NHWC then): the conv as an implicit GEMM Y[P, OC] = A[P, K] ·
// W^T[K, OC] over K = (kh, kw, c), with W^T in the sparse GEMM's packing
// (sparse_gemm.hpp: CSR whose lanes run along 64-row panels of A^T, so one
// broadcast of a nonzero feeds 4 FMAs, or BSR where the cost model finds
// blocks). A patch row is kH·kW contiguous runs of C floats of NHWC X (a
// 1×1 stride-1 conv reads X itself; stride-1 convs overlap the rows of a
// kW× smaller buffer instead, see build_stacks), Y's rows are written in
// place, and no transposes of X or of Y are needed. It measures faster than SparDR's
// reconstruction on most NHWC layers of Table II (bench_spardr); 3×3
// stride-1 convs with few input channels on large maps, where the GEMM's
// A^T panels transpose each input float 9 times, take the reconstruction
// (kReconstructMaxChannels).
//
// Load balancing (§III-C): SparDR bucket-sorts output channels by nonzero
// count and deals them to threads. Tessera's threads take tiles, fixed
// output regions the tiler chose and the dependency edges name, so a tile
// cannot trade channels with another. Tiles are cut along pixels first with
// all channels each (DESIGN.md, the tile graph), which makes every tile's
// work nnz × its pixels: balanced without any permutation. Within a tile the
// channels run in bucket order (most nonzeros first), which keeps equal
// trip counts together; outputs are written at their own channel.
#include "kernels/sparse/conv_spardr.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/sparse/conv_spardr_kernels.hpp"
#include "kernels/sparse/sparse_gemm.hpp"

namespace tessera::kernels::sparse {
namespace {

constexpr std::string_view kVariant = "cpu.conv_sparse";

// L of one chunk holds about this many floats (512 KiB: half of a 1 MiB
// L2, beside the CSR weights and the chunk's output); a chunk is at least
// one output row. 1 MiB of L spilled to L3 on this Zen 5's 1 MiB L2:
// pruned ResNet-50's stem (7×7 stride 2, 42 planes of L) 0.60-0.67 ->
// 0.55-0.59 ms (tessera run --profile, 1 thread, three alternating
// rounds); 256 KiB chunks were no faster (their halo rows are 30% more L).
constexpr int64_t kReconstructedFloats = int64_t{1} << 17;
// L's planes start on a cache line, and where taps reach across rows, its
// rows are padded to whole lines too, so that every window starts on a
// line and each of the inner loop's loads is one line, not two; but only
// where the padding adds at most a quarter to the row (the padded columns
// are computed and dropped). bench_spardr --layout nchw, against unpadded
// rows: 3x3 convs on 40 and 80 columns 1.97 -> 1.75 and 1.27 -> 1.17 ms,
// on 20 columns (padded to 32) 1.36 -> 1.47.
constexpr int64_t kLineFloats = 16;
constexpr double kMaxRowPadding = 1.25;

// One input-channel block's slice of L for a pixel block stays within half
// of the L1d (cache_sizes.hpp), beside the sums and the streamed weights.
int64_t l1_slice_bytes() {
  return cpu::cache_sizes().l1d / 2;
}
constexpr double kMinBlockNonzeros = 24.0;

// Patch rows of the implicit GEMM per call hold about this many floats
// (512 KiB of the 2 MiB L2, which also holds the CSR weights' stream and
// the output rows); at least kPatchMinPixels rows: the sparse GEMM's CSR
// kernel works on panels of 64 rows (sparse_gemm.hpp).
constexpr int64_t kPatchFloats = int64_t{1} << 17;
constexpr int64_t kPatchMinPixels = 64;
// Stacked rows (run_stacked_gemm) per call: about 1 MiB of stacks, but at
// least kStackMinPixels grid positions, so that the last, partly used
// 64-row panel of the sparse GEMM is a small part of the call (with 5 rows
// of 16, 40% of CV10's work was padding of the last panel).
constexpr int64_t kStackFloats = int64_t{1} << 18;
constexpr int64_t kStackMinPixels = 256;

// The weight densities below which cpu.conv_sparse beats the dense variant
// that would run the conv otherwise, measured with
// `bench_spardr --sweep` (Table II's 13 layers at 2%..60% density, NHWC,
// 1 thread): against cpu.conv_winograd the crossover was ~8% (40×40 and
// 80×80 outputs; ~20% at 28×28), against cpu.conv_gemm 25–30% for 3×3
// stride 1 and ~20% for 3×3 stride 2; for 1×1 ~12–15% with 7×7 outputs
// (2048-channel sides), 20–27% with 14×14 and above 60% with 56×56 and 44
// channels. Each bound is about the lowest of its form, so the sparse
// kernel is not chosen where the sweep found it slower.
constexpr double kMaxDensityVsWinograd = 0.08;
constexpr double kMaxDensityPointwiseFewPixels = 0.12;
constexpr int64_t kFewPixels = 100;  // output pixels per image
constexpr double kMaxDensityOther = 0.20;
// The same for NHWC X (the implicit GEMM on the sparse GEMM's CSR kernel),
// `bench_spardr --sweep --reps 3`: against cpu.conv_winograd the crossover
// was ~20% for CV9 (28×28), ~10% for CV11 (40×40) and below 10% for CV13
// (80×80, 96 channels: 1.3x even at 2%, where transposing A costs as much
// as Winograd's transforms); against cpu.conv_gemm ~37% (CV2), 40–45%
// (CV1, CV3, CV10), 55% and above elsewhere. 11%, not 8%: in a whole model
// Winograd streams its transformed weights from memory (below), and
// ResNet-50 pruned to 90% ran its three 56×56×64 3×3 convs in 0.37-0.38 ms
// each sparse against 0.41-0.59 Winograd (tessera run --profile, 1 thread,
// this Zen 5), 6.66-6.78 -> 6.53-6.60 ms at 2 threads; on its own,
// bench_spardr on this Zen 5 had CV11 (10.9%) at 1.28 ms sparse against 1.33.
// Against Winograd on maps of at most 28×28 outputs: in a whole model
// Winograd also streams its 36 transformed weight matrices (4× the conv's
// weights) from memory, which the sweep's hot weights hide. Pruned ResNet-50
// at 90% (tessera run --profile, 1 thread, three rounds): layer2's three
// 28×28×128 3×3 convs took 0.94-0.98 ms each sparse against 1.32-2.09 ms
// Winograd. 12%, not the sweep's ~20% for CV9: bench_spardr still had CV9
// (16.7%, hot weights) at 0.95× Winograd.
constexpr int64_t kSmallMapPixels = 28 * 28;

// The NHWC bounds above, for the SGEMM ISA in use (the sparse and the dense
// kernels alike run on it).
struct NhwcDensityBounds {
  double vs_winograd;            // maps above kSmallMapPixels
  double vs_winograd_small_map;  // at most kSmallMapPixels
  double other;                  // against cpu.conv_gemm
};
// AVX-512: the Zen 5 measurements above.
constexpr NhwcDensityBounds kNhwcBoundsAvx512{0.11, 0.12, 0.30};
// AVX2 (and the baseline), whose dense convs run at half AVX-512's FMA
// width while the sparse kernels, bound by loads as much as by FMAs, lose
// less: `bench_spardr --sweep --reps 3` on an AVX2 Zen 4 guest crossed
// Winograd at ~15% for CV11 (40×40), 21% for CV13 (80×80), 16-17% for
// CV12 (20×20), 20-21% for CV1 and CV9, 26% for CV10; every layer against
// cpu.conv_gemm was 1.28x or more at 40% (CV7, 1×1 56×56 44 channels, the
// lowest: 1.06x at 60%). Table II at its own sparsities then ran CV12
// (12.2%) 1.28x and CV1 (17.2%) 1.2x faster sparse, where the AVX-512
// bounds had chosen Winograd.
constexpr NhwcDensityBounds kNhwcBoundsAvx2{0.14, 0.16, 0.40};

const NhwcDensityBounds& nhwc_density_bounds() {
  return cpu::gemm_isa() == cpu::GemmIsa::kAvx512 ? kNhwcBoundsAvx512 : kNhwcBoundsAvx2;
}
// Maps with a side below this weigh the sparse kernel against the direct
// conv even where F(2×2) would run them (conv_sparse_max_density()): with
// AVX-512 F(2×2) takes no such map.
constexpr int64_t kMinSideVsWinograd2x2 = 10;

// NHWC 3×3 stride-1 convs with at most this many input channels and at
// least kReconstructMinPixels output pixels run SparDR's reconstruction,
// not the stacked-rows GEMM, when L's rows are whole cache lines (every
// tap's window aligned). The GEMM transposes each input float 9 times (its
// A^T panels hold all kH·kW·C patch rows), L holds it kW times over and
// is read in place; with few channels the GEMM's transposes are the larger
// cost, with many its L1-sized panels and longer CSR rows win. bench_spardr
// (1 thread, this Zen 5), reconstruction against stacked rows: CV13 (96
// channels, 80×80) 1.11 vs 1.24 ms, CV9 (89, 28×28) 0.22 vs 0.22, CV11
// (192, 40×40) 1.55 vs 1.30, CV10 (512, 14×14) 1.21 vs 1.01; pruned
// ResNet-50 at 90% (tessera run --profile): layer1's 64-channel 56×56
// convs 0.36 vs 0.38-0.40 ms, layer2's 128-channel 28×28 ones 0.29 vs 0.31.
constexpr int64_t kReconstructMaxChannels = 128;
constexpr int64_t kReconstructMinPixels = 28 * 28;

// Along one axis, tap t = k·dilation reads input phase φ = t mod stride at
// q = t / stride positions past the output's own (§III-B, Fig. 6(b): a
// stride-s window is contiguous again within one phase).
struct TapPhases {
  std::vector<int64_t> used;   // the phases some tap reads, ascending
  std::vector<int64_t> index;  // [stride]: φ's place in `used`, or -1
  int64_t max_q = 0;

  TapPhases() = default;
  TapPhases(int64_t kernel, int64_t dilation, int64_t stride)
      : index(static_cast<size_t>(stride), -1) {
    std::vector<bool> reads(static_cast<size_t>(stride), false);
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t t = k * dilation;
      reads[static_cast<size_t>(t % stride)] = true;
      max_q = std::max(max_q, t / stride);
    }
    for (int64_t ph = 0; ph < stride; ++ph)
      if (reads[static_cast<size_t>(ph)]) {
        index[static_cast<size_t>(ph)] = static_cast<int64_t>(used.size());
        used.push_back(ph);
      }
  }
  int64_t count() const { return static_cast<int64_t>(used.size()); }
};

struct ConvSparsePrepared {
  cpu::ConvGeometry geometry;
  SpardrWeights weights;
  TapPhases rows;            // the taps' row phases and reach
  int64_t grid_w = 1;        // L's row: out_w, or that rounded up to whole lines
  int64_t chunk_rows = 1;    // output rows per chunk of whole rows
  int64_t plane_floats = 0;  // one L plane: (chunk_rows + rows.max_q) rows of grid_w
  int64_t l_floats = 0;      // L with its read slack
  SpardrKernel kernel = nullptr;
  SpardrRowKernel row_kernel = nullptr;
  // The implicit-GEMM form, packed when X is NHWC at prepare and W has a
  // nonzero: Y[P, OC] = A[P, K] · W^T[K, OC] with K = (kh, kw, c), so a
  // patch row of A is kH·kW contiguous runs of C channels of NHWC X, and a
  // 1×1 stride-1 unpadded conv reads X itself as A (no copy at all).
  std::unique_ptr<SparseMatrix> patch_weights;
  bool pointwise_direct = false;  // 1×1, stride 1, no padding: A = X
  // Stride 1, dilation_w 1, no fused residual: A's rows overlap in a buffer
  // of stacked input rows (see build_stacks), K ordered (kw, kh, c).
  bool stacked = false;
  int64_t padded_w = 0;            // out_w + kW − 1: the stacks' grid width
  int64_t stack_rows = 0;          // output rows per stacked chunk
  int64_t patch_depth = 0;         // K
  int64_t patch_chunk_pixels = 0;  // patch rows built per sparse_gemm_tile call
};

struct ConvSparseScratch {
  std::vector<float> l;         // the chunk's L
  std::vector<float> sums;      // channels × kSpardrMaxBlockPixels
  std::vector<float> sums_t;    // the same, pixel-major
  std::vector<float> residual;  // a residual in the other layout than Y
  std::vector<int32_t> slots;   // the tile's output channels' slots in bucket order
  std::vector<float> patches;   // the implicit GEMM's A rows of one chunk
  std::vector<float> grid_y;    // its output on the stacks' padded grid
};

ConvSparseScratch& thread_scratch() {
  thread_local ConvSparseScratch scratch;
  return scratch;
}

// The taps' phases, L's grid, the rows per L plane and L's size.
void plan_reconstruction(const cpu::ConvGeometry& g, ConvSparsePrepared& prep) {
  prep.rows = TapPhases(g.k_h, g.dilation_h, g.stride_h);
  const int64_t padded_w = (g.out_w + kLineFloats - 1) / kLineFloats * kLineFloats;
  const bool pad_rows = prep.rows.max_q > 0 && static_cast<double>(padded_w) <=
                                                   kMaxRowPadding * static_cast<double>(g.out_w);
  prep.grid_w = pad_rows ? padded_w : g.out_w;
  const int64_t planes = g.channels * prep.rows.count() * g.k_w;
  const int64_t row_floats = std::max<int64_t>(1, planes * prep.grid_w);
  prep.chunk_rows = std::clamp(kReconstructedFloats / row_floats - prep.rows.max_q, int64_t{1},
                               std::max<int64_t>(1, g.out_h));
  prep.plane_floats = ((prep.chunk_rows + prep.rows.max_q) * prep.grid_w + kLineFloats - 1) /
                      kLineFloats * kLineFloats;
  prep.l_floats = planes * prep.plane_floats + kSpardrMaxBlockPixels;
}

// The offset into L of tap (c, kh, kw)'s window: its plane, then q rows
// and columns in (see the top of the file).
int64_t tap_offset(const cpu::ConvGeometry& g, const ConvSparsePrepared& prep, int64_t c,
                   int64_t kh, int64_t kw) {
  const int64_t th = kh * g.dilation_h;
  const int64_t plane =
      (c * prep.rows.count() + prep.rows.index[static_cast<size_t>(th % g.stride_h)]) * g.k_w + kw;
  return plane * prep.plane_floats + (th / g.stride_h) * prep.grid_w;
}

std::optional<std::string> shape_applies(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs,
                                         cpu::ConvGeometry& g) {
  // The dense implicit GEMM's checks (inputs, bias, residual, constant
  // weights, group == 1) are exactly this kernel's too.
  if (auto why = cpu::conv_gemm_applies(op, inputs)) return why;
  if (auto why = cpu::refuse_fused_input_scale(op)) return why;
  if (auto why = cpu::refuse_fused_expand(op)) return why;
  if (auto why = cpu::conv_geometry(op, *inputs[0].shape, *inputs[1].shape, g)) return why;
  ConvSparsePrepared plan;
  plan_reconstruction(g, plan);
  if (plan.l_floats > std::numeric_limits<int32_t>::max())
    return "the reconstructed input of one output row (" + std::to_string(plan.l_floats) +
           " floats) is beyond 32-bit offsets";
  return std::nullopt;
}

int64_t count_nonzeros(const float* w, int64_t count) {
  int64_t nonzeros = 0;
  for (int64_t i = 0; i < count; ++i) nonzeros += w[i] != 0.0f;
  return nonzeros;
}

// `isa`'s build of a kernel compiled once per ISA.
template <class Kernel>
Kernel for_isa(cpu::GemmIsa isa, Kernel avx512, Kernel avx2, Kernel sse2) {
  switch (isa) {
    case cpu::GemmIsa::kAvx512:
      return avx512;
    case cpu::GemmIsa::kAvx2:
      return avx2;
    case cpu::GemmIsa::kPortable:
      break;
  }
  return sse2;
}

bool is_nhwc(graph::Layout layout, const cpu::ConvGeometry& g) {
  return layout == graph::Layout::NHWC && g.rank == 4;
}

// Builds the chunk's L (see the top of the file) for output rows
// [oh0, oh0 + rows) from column ow0 of image n: every grid_w positions of
// each plane row, so that the positions past the chunk's columns hold
// zeros or input, never stale scratch. Each input row is read once per
// chunk ((hh, φ) determines h uniquely) by the ISA's row kernel.
void reconstruct_input(const TileArgs& args, const ConvSparsePrepared& prep, int64_t n, int64_t oh0,
                       int64_t rows, int64_t ow0, float* l) {
  const cpu::ConvGeometry& g = prep.geometry;
  const int64_t c_count = g.channels, plane = g.in_h * g.in_w;
  const bool nhwc = is_nhwc(args.inputs[0].layout, g);
  const float* image = args.inputs[0].data + n * c_count * plane;
  const int64_t row_phases = prep.rows.count();
  const int64_t rows_needed = rows + prep.rows.max_q;
  SpardrRow job{.nhwc = nhwc,
                .ld_channel = plane,
                .in_w = g.in_w,
                .channels = c_count,
                .start = ow0 * g.stride_w - g.pad_left,
                .step = g.stride_w,
                .dilation = g.dilation_w,
                .k_w = g.k_w,
                .grid_w = prep.grid_w,
                .channel_stride = row_phases * g.k_w * prep.plane_floats,
                .kw_stride = prep.plane_floats};
  for (int64_t pi = 0; pi < row_phases; ++pi) {
    for (int64_t hh = 0; hh < rows_needed; ++hh) {
      const int64_t h =
          (oh0 + hh) * g.stride_h + prep.rows.used[static_cast<size_t>(pi)] - g.pad_top;
      job.src = h < 0 || h >= g.in_h ? nullptr : image + h * g.in_w * (nhwc ? c_count : 1);
      job.dst = l + pi * g.k_w * prep.plane_floats + hh * prep.grid_w;
      prep.row_kernel(job);
    }
  }
}

// Output rows [oh0, oh0 + rows) × columns [ow0, ow0 + cols) of image n,
// channels [oc0, oc1); cols == out_w or rows == 1, so the chunk's pixels are
// contiguous in the image's pixel order.
void run_chunk(const TileArgs& args, const ConvSparsePrepared& prep, int64_t n, int64_t oh0,
               int64_t rows, int64_t ow0, int64_t cols, int64_t oc0, int64_t oc1,
               cpu::GemmEpilogue epilogue) {
  const cpu::ConvGeometry& g = prep.geometry;
  ConvSparseScratch& scratch = thread_scratch();
  float* l = cpu::grown(scratch.l, prep.l_floats);
  reconstruct_input(args, prep, n, oh0, rows, ow0, l);

  const int64_t out_plane = g.out_h * g.out_w, oc = g.out_channels;
  const int64_t pixels = rows == 1 ? cols : rows * g.out_w;
  const int64_t first_pixel = oh0 * g.out_w + ow0;  // within image n
  const bool y_nhwc = is_nhwc(args.output.layout, g);
  SpardrChunk chunk{.l = l,
                    .weights = &prep.weights,
                    .oc0 = oc0,
                    .oc1 = oc1,
                    .positions = (rows - 1) * prep.grid_w + cols,
                    .grid_w = prep.grid_w,
                    .cols = cols,
                    .row_pixels = g.out_w,
                    .pixel_major = y_nhwc};
  if (y_nhwc) {
    chunk.y = args.output.data + (n * out_plane + first_pixel) * oc;
    chunk.ld_y = oc;
    epilogue.bias_kind = epilogue.bias ? cpu::GemmBias::kPerColumn : cpu::GemmBias::kNone;
  } else {
    chunk.y = args.output.data + n * oc * out_plane + first_pixel;
    chunk.ld_y = out_plane;
    epilogue.bias_kind = epilogue.bias ? cpu::GemmBias::kPerRow : cpu::GemmBias::kNone;
  }
  if (args.input_count == 4) {  // fused residual, indexed like y
    const ConstTensorView& residual = args.inputs[3];
    const bool r_nhwc = is_nhwc(residual.layout, g);
    const float* r_nchw = residual.data + n * oc * out_plane + first_pixel;
    const float* r_nhwc_at = residual.data + (n * out_plane + first_pixel) * oc;
    if (r_nhwc == y_nhwc) {
      epilogue.residual = y_nhwc ? r_nhwc_at : r_nchw;
      epilogue.ld_residual = chunk.ld_y;
    } else if (y_nhwc) {  // [pixels, oc1] from NCHW channels oc0:oc1
      float* panel = cpu::grown(scratch.residual, pixels * oc1);
      cpu::transpose_panel(r_nchw + oc0 * out_plane, out_plane, oc1 - oc0, pixels, panel + oc0,
                           oc1);
      epilogue.residual = panel;
      epilogue.ld_residual = oc1;
    } else {  // [oc1, pixels] from NHWC
      float* panel = cpu::grown(scratch.residual, pixels * oc1);
      cpu::transpose_panel(r_nhwc_at + oc0, oc, pixels, oc1 - oc0, panel + oc0 * pixels, pixels);
      epilogue.residual = panel;
      epilogue.ld_residual = pixels;
    }
  }
  chunk.epilogue = &epilogue;
  scratch.slots.clear();
  for (size_t slot = 0; slot < prep.weights.order.size(); ++slot)
    if (const int32_t c = prep.weights.order[slot]; c >= oc0 && c < oc1)
      scratch.slots.push_back(static_cast<int32_t>(slot));
  chunk.slots = scratch.slots.data();
  const int64_t sums_floats = (oc1 - oc0) * kSpardrMaxBlockPixels;
  chunk.sums = cpu::grown(scratch.sums, sums_floats);
  chunk.sums_t = y_nhwc ? cpu::grown(scratch.sums_t, sums_floats) : nullptr;
  prep.kernel(chunk);
}

// Patch rows of output pixels [p0, p0 + count) of image n into `a`
// ([count, K], K = (kh, kw, c)): each tap's C channels are one contiguous
// run of NHWC X, or zeros where the tap falls in the padding.
void build_patches(const float* image, const cpu::ConvGeometry& g, int64_t p0, int64_t count,
                   float* a) {
  const int64_t c_count = g.channels, depth = g.k_h * g.k_w * c_count;
  const size_t run_bytes = static_cast<size_t>(c_count) * sizeof(float);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = p0 + i, oh = p / g.out_w, ow = p % g.out_w;
    float* row = a + i * depth;
    for (int64_t kh = 0; kh < g.k_h; ++kh) {
      const int64_t ih = oh * g.stride_h - g.pad_top + kh * g.dilation_h;
      float* taps = row + kh * g.k_w * c_count;
      if (ih < 0 || ih >= g.in_h) {
        std::fill(taps, taps + g.k_w * c_count, 0.0f);
        continue;
      }
      for (int64_t kw = 0; kw < g.k_w; ++kw) {
        const int64_t iw = ow * g.stride_w - g.pad_left + kw * g.dilation_w;
        if (iw < 0 || iw >= g.in_w)
          std::fill(taps + kw * c_count, taps + (kw + 1) * c_count, 0.0f);
        else
          std::memcpy(taps + kw * c_count, image + (ih * g.in_w + iw) * c_count, run_bytes);
      }
    }
  }
}

// The implicit GEMM over output pixels [p0, p1) of image n (contiguous in
// NHWC Y), channels [oc0, oc1): X, Y and the residual are all NHWC, so Y's
// rows are the GEMM's rows with ldc = OC and the epilogue's bias is per
// column.
void run_patch_gemm(const TileArgs& args, const ConvSparsePrepared& prep, int64_t n, int64_t p0,
                    int64_t p1, int64_t oc0, int64_t oc1, cpu::GemmEpilogue epilogue) {
  const cpu::ConvGeometry& g = prep.geometry;
  const int64_t out_plane = g.out_h * g.out_w, oc = g.out_channels;
  const float* image = args.inputs[0].data + n * g.channels * g.in_h * g.in_w;
  float* y = args.output.data + n * out_plane * oc;
  const float* residual =
      args.input_count == 4 ? args.inputs[3].data + n * out_plane * oc : nullptr;
  epilogue.bias_kind = epilogue.bias ? cpu::GemmBias::kPerColumn : cpu::GemmBias::kNone;
  epilogue.ld_residual = oc;
  if (prep.pointwise_direct) {
    epilogue.residual = residual;
    sparse_gemm_tile(image, g.channels, *prep.patch_weights, y, oc,
                     {.m0 = p0, .m1 = p1, .n0 = oc0, .n1 = oc1}, epilogue);
    return;
  }
  float* a = cpu::grown(thread_scratch().patches, prep.patch_chunk_pixels * prep.patch_depth);
  for (int64_t p = p0; p < p1; p += prep.patch_chunk_pixels) {
    const int64_t count = std::min(prep.patch_chunk_pixels, p1 - p);
    build_patches(image, g, p, count, a);
    epilogue.residual = residual ? residual + p * oc : nullptr;
    sparse_gemm_tile(a, prep.patch_depth, *prep.patch_weights, y + p * oc, oc,
                     {.m0 = 0, .m1 = count, .n0 = oc0, .n1 = oc1}, epilogue);
  }
}

// The stacked-rows form of the implicit GEMM for stride 1, dilation_w 1:
// on the padded input's grid (width padded_w), stack row r = (i, j) holds
// the kH taps' C channels [X(oh0 + i - pad_top + kh·d_h, j - pad_left)
// for kh] (zeros in the padding), so the patch row of grid position q =
// i·padded_w + ow — all kH·kW·C floats, in (kw, kh, c) order — is stack
// rows q .. q + kW − 1, contiguous: A is the stacks read with lda = kH·C,
// each input pixel copied kH times instead of kH·kW times (SparDR's
// vertical reuse, §III-B, done by overlapping GEMM rows). Grid positions
// past out_w are computed and dropped.
void build_stacks(const float* image, const cpu::ConvGeometry& g, int64_t padded_w, int64_t oh0,
                  int64_t stack_count, float* z) {
  const int64_t c_count = g.channels, depth = g.k_h * c_count;
  const size_t run_bytes = static_cast<size_t>(c_count) * sizeof(float);
  for (int64_t r = 0; r < stack_count; ++r) {
    const int64_t i = r / padded_w, iw = r % padded_w - g.pad_left;
    float* row = z + r * depth;
    for (int64_t kh = 0; kh < g.k_h; ++kh) {
      const int64_t ih = oh0 + i - g.pad_top + kh * g.dilation_h;
      if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w)
        std::fill(row + kh * c_count, row + (kh + 1) * c_count, 0.0f);
      else
        std::memcpy(row + kh * c_count, image + (ih * g.in_w + iw) * c_count, run_bytes);
    }
  }
}

// Output rows [oh0, oh1) × columns [ow0, ow1) × channels [oc0, oc1) of
// image n by stacked rows, stack_rows output rows per GEMM; the GEMM runs
// bias and activation (no residual: its rows would be the grid's), then
// the valid columns are copied out.
void run_stacked_gemm(const TileArgs& args, const ConvSparsePrepared& prep, int64_t n, int64_t oh0,
                      int64_t oh1, int64_t ow0, int64_t ow1, int64_t oc0, int64_t oc1,
                      cpu::GemmEpilogue epilogue) {
  const cpu::ConvGeometry& g = prep.geometry;
  const int64_t oc = g.out_channels, wp = prep.padded_w, depth = g.k_h * g.channels;
  const float* image = args.inputs[0].data + n * g.channels * g.in_h * g.in_w;
  float* y = args.output.data + n * g.out_h * g.out_w * oc;
  epilogue.bias_kind = epilogue.bias ? cpu::GemmBias::kPerColumn : cpu::GemmBias::kNone;
  ConvSparseScratch& scratch = thread_scratch();
  const int64_t max_stacks = prep.stack_rows * wp + g.k_w - 1;
  float* z = cpu::grown(scratch.patches, max_stacks * depth);
  float* grid = cpu::grown(scratch.grid_y, prep.stack_rows * wp * oc);
  const size_t span_bytes = static_cast<size_t>(oc1 - oc0) * sizeof(float);
  for (int64_t oh = oh0; oh < oh1; oh += prep.stack_rows) {
    const int64_t rows = std::min(prep.stack_rows, oh1 - oh);
    build_stacks(image, g, wp, oh, rows * wp + g.k_w - 1, z);
    sparse_gemm_tile(z, depth, *prep.patch_weights, grid, oc,
                     {.m0 = ow0, .m1 = (rows - 1) * wp + ow1, .n0 = oc0, .n1 = oc1}, epilogue);
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = grid + (i * wp + ow0) * oc;
      float* dst = y + ((oh + i) * g.out_w + ow0) * oc;
      if (oc0 == 0 && oc1 == oc) {
        std::memcpy(dst, src, static_cast<size_t>((ow1 - ow0) * oc) * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < ow1 - ow0; ++j)
        std::memcpy(dst + j * oc + oc0, src + j * oc + oc0, span_bytes);
    }
  }
}

// Whether this run can take the implicit GEMM: packed at prepare, and X, Y
// and the residual all NHWC (the GEMM's rows are pixels with channels
// contiguous).
bool runs_patch_gemm(const TileArgs& args, const ConvSparsePrepared& prep) {
  const cpu::ConvGeometry& g = prep.geometry;
  return prep.patch_weights && is_nhwc(args.inputs[0].layout, g) &&
         is_nhwc(args.output.layout, g) &&
         (args.input_count < 4 || is_nhwc(args.inputs[3].layout, g));
}

}  // namespace

double conv_sparse_max_density(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  cpu::ConvGeometry g;
  if (shape_applies(op, inputs, g)) return 0.0;
  // X's layout at prepare picks the route (the NHWC one also needs Y and a
  // residual in NHWC, which is what layout assignment gives convs).
  // Against F(2×2, 3×3) on maps of 10 to 13 rows the bounds measured against
  // F(4×4, 3×3): unmeasured, but lower than its crossover can be (F(2×2)
  // saves 2.25× of the direct conv's FLOPs, F(4×4) 4×), so the sparse kernel
  // is never chosen where it is slower. On maps with a side below 10, where
  // F(2×2) runs only with AVX2, the direct conv's bounds, as before it took
  // those maps:
  // ResNet-50 pruned to 80% (AVX2 Zen 4 guest, 1 thread, tessera run
  // --profile, three rounds) ran its two 7×7×512 3×3 convs at 20% density in
  // 1.22-1.39 ms each sparse against 1.98-2.15 as F(2×2), 3.1-3.3 dense.
  const bool winograd = !cpu::conv_winograd_applies(op, inputs) ||
                        (!cpu::conv_winograd_2x2_applies(op, inputs) &&
                         std::min(g.out_h, g.out_w) >= kMinSideVsWinograd2x2);
  if (is_nhwc(inputs[0].layout, g)) {
    const NhwcDensityBounds& nhwc = nhwc_density_bounds();
    return !winograd                              ? nhwc.other
           : g.out_h * g.out_w <= kSmallMapPixels ? nhwc.vs_winograd_small_map
                                                  : nhwc.vs_winograd;
  }
  if (winograd) return kMaxDensityVsWinograd;
  const bool pointwise = g.k_h == 1 && g.k_w == 1;
  return pointwise && g.out_h * g.out_w < kFewPixels ? kMaxDensityPointwiseFewPixels
                                                     : kMaxDensityOther;
}

std::optional<std::string> conv_sparse_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs) {
  cpu::ConvGeometry g;
  if (auto why = shape_applies(op, inputs, g)) return why;
  const int64_t count = graph::shape_numel(*inputs[1].shape);
  const double density = count == 0 ? 0.0
                                    : static_cast<double>(count_nonzeros(inputs[1].data, count)) /
                                          static_cast<double>(count);
  const double max_density = conv_sparse_max_density(op, inputs);
  if (density < max_density) return std::nullopt;
  const NhwcDensityBounds& nhwc = nhwc_density_bounds();
  char why[512];
  std::snprintf(why, sizeof why,
                "weight density %.1f%%: not sparse enough to beat the dense conv (SparDR pays "
                "below %.0f%% density here; measured crossovers with %s: NHWC %.0f%% against "
                "Winograd (%.0f%% on maps up to %lld pixels), else %.0f%%; NCHW %.0f%% against "
                "Winograd, %.0f%% for 1x1 with < %lld output pixels, else %.0f%%)",
                100.0 * density, 100.0 * max_density,
                std::string(cpu::gemm_isa_name(cpu::gemm_isa())).c_str(), 100.0 * nhwc.vs_winograd,
                100.0 * nhwc.vs_winograd_small_map, static_cast<long long>(kSmallMapPixels),
                100.0 * nhwc.other, 100.0 * kMaxDensityVsWinograd,
                100.0 * kMaxDensityPointwiseFewPixels, static_cast<long long>(kFewPixels),
                100.0 * kMaxDensityOther);
  return std::string(why);
}

PreparedOp prepare_conv_sparse(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  auto prep = std::make_shared<ConvSparsePrepared>();
  cpu::ConvGeometry& g = prep->geometry;
  if (auto why = shape_applies(op, inputs, g)) cpu::fail_op(kVariant, &op, *why);

  plan_reconstruction(g, *prep);
  // KernelTransform: CSR per (input-channel block, output channel) with
  // the offsets into L, each row's nonzeros in increasing offset (L is read
  // front to back). A block's slice of L for one pixel block: per channel,
  // kW·phases windows of the block's positions plus max_q rows.
  SpardrWeights& w = prep->weights;
  const float* weight = inputs[1].data;
  const int64_t taps = g.k_h * g.k_w, row_floats = g.channels * taps;
  std::vector<int64_t> channel_nonzeros(static_cast<size_t>(g.out_channels));
  for (int64_t o = 0; o < g.out_channels; ++o)
    channel_nonzeros[static_cast<size_t>(o)] = count_nonzeros(weight + o * row_floats, row_floats);
  const int64_t w_nonzeros =
      std::accumulate(channel_nonzeros.begin(), channel_nonzeros.end(), int64_t{0});
  const int64_t slice_bytes = prep->rows.count() * g.k_w *
                              (kSpardrMaxBlockPixels + prep->rows.max_q * prep->grid_w) *
                              static_cast<int64_t>(sizeof(float));
  // But at least enough channels that a row of a block has about
  // kMinBlockNonzeros nonzeros: a short row costs more to start and finish
  // (sums loaded and stored, loop exits mispredicted) than its L2 misses.
  const double per_channel = static_cast<double>(w_nonzeros) /
                             static_cast<double>(std::max<int64_t>(1, g.out_channels * g.channels));
  const int64_t min_channels =
      per_channel > 0 ? static_cast<int64_t>(std::ceil(kMinBlockNonzeros / per_channel)) : 1;
  const int64_t block_channels = std::clamp<int64_t>(
      std::max(l1_slice_bytes() / slice_bytes, min_channels), 1, std::max<int64_t>(1, g.channels));
  w.out_channels = g.out_channels;
  w.channel_blocks = std::max<int64_t>(1, (g.channels + block_channels - 1) / block_channels);
  w.row_begin.assign(static_cast<size_t>(w.channel_blocks * g.out_channels + 1), 0);
  // Bucket sort of the channels by nonzero count, most first (§III-C).
  std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(row_floats + 1));
  for (int64_t o = 0; o < g.out_channels; ++o)
    buckets[static_cast<size_t>(channel_nonzeros[static_cast<size_t>(o)])].push_back(
        static_cast<int32_t>(o));
  for (size_t b = buckets.size(); b-- > 0;)
    w.order.insert(w.order.end(), buckets[b].begin(), buckets[b].end());
  // The rows of each block in that order: the kernel visits them in it, so
  // the weights stream front to back (rows at the channels' own places
  // were read in a jumping order no prefetcher follows: CV10's 1.9 MB of
  // weights came from L3 at every visit's start).
  std::vector<std::pair<int32_t, float>> row;
  for (int64_t b = 0; b < w.channel_blocks; ++b)
    for (int64_t slot = 0; slot < g.out_channels; ++slot) {
      const int64_t o = w.order[static_cast<size_t>(slot)];
      row.clear();
      const int64_t c_end = std::min(g.channels, (b + 1) * block_channels);
      for (int64_t c = b * block_channels; c < c_end; ++c)
        for (int64_t kh = 0; kh < g.k_h; ++kh)
          for (int64_t kw = 0; kw < g.k_w; ++kw) {
            const float v = weight[(o * g.channels + c) * taps + kh * g.k_w + kw];
            if (v == 0.0f) continue;
            row.emplace_back(static_cast<int32_t>(tap_offset(g, *prep, c, kh, kw)), v);
          }
      std::sort(row.begin(), row.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [offset, value] : row) {
        w.offsets.push_back(offset);
        w.values.push_back(value);
      }
      w.row_begin[static_cast<size_t>(b * g.out_channels + slot + 1)] =
          static_cast<int64_t>(w.offsets.size());
    }
  prep->kernel =
      for_isa(cpu::gemm_isa(), spardr_chunk__avx512, spardr_chunk__avx2, spardr_chunk__sse2);
  prep->row_kernel =
      for_isa(cpu::gemm_isa(), spardr_row__avx512, spardr_row__avx2, spardr_row__sse2);
  prep->patch_depth = taps * g.channels;
  const bool reconstruct =
      g.k_h == 3 && g.k_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
      g.dilation_w == 1 && g.channels <= kReconstructMaxChannels &&
      g.out_h * g.out_w >= kReconstructMinPixels && prep->grid_w % kLineFloats == 0;
  if (is_nhwc(inputs[0].layout, g) && w_nonzeros > 0 && !reconstruct &&
      prep->patch_depth < std::numeric_limits<int32_t>::max()) {
    prep->pointwise_direct = taps == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
                             g.pad_left == 0 && g.out_h == g.in_h && g.out_w == g.in_w;
    // Stride 1, dilation_w 1: out_w + kW − 1 columns cover every window.
    prep->padded_w = g.out_w + g.k_w - 1;
    prep->stacked = !prep->pointwise_direct && g.stride_h == 1 && g.stride_w == 1 &&
                    g.dilation_w == 1 && !op.attrs.fused_residual;
    // W [OC, C, kH, kW] → W' [OC, K] with K in the order of A's rows:
    // (kw, kh, c) for stacked rows, (kh, kw, c) for patch rows; W' is W^T
    // stored transposed.
    std::vector<float> reordered(static_cast<size_t>(g.out_channels * prep->patch_depth));
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t c = 0; c < g.channels; ++c)
        for (int64_t kh = 0; kh < g.k_h; ++kh)
          for (int64_t kw = 0; kw < g.k_w; ++kw) {
            const int64_t tap = prep->stacked ? kw * g.k_h + kh : kh * g.k_w + kw;
            reordered[static_cast<size_t>((o * taps + tap) * g.channels + c)] =
                weight[(o * g.channels + c) * taps + kh * g.k_w + kw];
          }
    const SparseLayoutChoice choice = choose_sparse_layout(reordered.data(), prep->patch_depth,
                                                           g.out_channels, prep->patch_depth, true);
    prep->patch_weights = std::make_unique<SparseMatrix>(
        pack_sparse_b(reordered.data(), prep->patch_depth, g.out_channels, prep->patch_depth,
                      /*transposed=*/true, choice.layout));
    const int64_t stack_depth = g.k_h * g.channels;
    const int64_t rows_in_cache = (kStackFloats / stack_depth - g.k_w) / prep->padded_w;
    const int64_t rows_for_panels = (kStackMinPixels + prep->padded_w - 1) / prep->padded_w;
    prep->stack_rows = std::clamp<int64_t>(std::max(rows_in_cache, rows_for_panels), 1,
                                           std::max<int64_t>(1, g.out_h));
    prep->patch_chunk_pixels = std::max(
        kPatchMinPixels, kPatchFloats / prep->patch_depth / kPatchMinPixels * kPatchMinPixels);
  }
  return prep;
}

void conv_sparse(const TileArgs& args) {
  cpu::check_dense_tile_args(kVariant, args, 2, args.op && args.op->attrs.fused_residual ? 4 : 3,
                             /*needs_prepared=*/true);
  const auto& prep = *static_cast<const ConvSparsePrepared*>(args.prepared);
  const cpu::ConvGeometry& g = prep.geometry;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const bool is_1d = g.rank == 3;
  const bool same_shapes = x_shape.size() == g.rank && y_shape.size() == g.rank &&
                           y_shape[0] == x_shape[0] && x_shape[1] == g.channels &&
                           x_shape[g.rank - 1] == g.in_w && (is_1d || x_shape[2] == g.in_h) &&
                           y_shape[1] == g.out_channels && y_shape[g.rank - 1] == g.out_w &&
                           (is_1d || y_shape[2] == g.out_h);
  if (!same_shapes)
    cpu::fail_op(kVariant, args.op,
                 "shapes differ from the prepared ones (input " + graph::shape_to_string(x_shape) +
                     ", output " + graph::shape_to_string(y_shape) + ")");
  if (args.input_count == 4 && *args.inputs[3].shape != y_shape)
    cpu::fail_op(kVariant, args.op,
                 "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                     " differs from the output shape " + graph::shape_to_string(y_shape));
  // An output written over its residual (graph/memory_plan.hpp) must share
  // its layout: each element is finished in its residual element's place.
  if (args.input_count == 4 && args.inputs[3].data == args.output.data &&
      args.inputs[3].layout != args.output.layout)
    cpu::fail_op(kVariant, args.op,
                 "the output shares the residual's bytes but not its layout (" +
                     std::string(graph::layout_name(args.output.layout)) + " output, " +
                     std::string(graph::layout_name(args.inputs[3].layout)) + " residual)");
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  const float* bias = args.input_count >= 3 ? args.inputs[2].data : nullptr;
  cpu::GemmEpilogue epilogue = cpu::activation_epilogue(args.op->attrs);
  epilogue.bias = bias;
  const int64_t oc0 = r.begin[1], oc1 = r.end[1];
  const int64_t oh0 = is_1d ? 0 : r.begin[2], oh1 = is_1d ? 1 : r.end[2];
  const int64_t ow0 = r.begin[g.rank - 1], ow1 = r.end[g.rank - 1];
  // Whole output rows, chunk_rows at a time, or one part-row at a time:
  // each chunk's pixels are contiguous in pixel order.
  const bool whole_rows = ow0 == 0 && ow1 == g.out_w;
  if (runs_patch_gemm(args, prep) && prep.stacked) {
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
      run_stacked_gemm(args, prep, n, oh0, oh1, ow0, ow1, oc0, oc1, epilogue);
    return;
  }
  if (runs_patch_gemm(args, prep)) {
    // Whole rows: one contiguous pixel range per image; else one per row.
    for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
      if (whole_rows) {
        run_patch_gemm(args, prep, n, oh0 * g.out_w, oh1 * g.out_w, oc0, oc1, epilogue);
        continue;
      }
      for (int64_t oh = oh0; oh < oh1; ++oh)
        run_patch_gemm(args, prep, n, oh * g.out_w + ow0, oh * g.out_w + ow1, oc0, oc1, epilogue);
    }
    return;
  }
  const int64_t chunk_rows = whole_rows ? prep.chunk_rows : 1;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n)
    for (int64_t oh = oh0; oh < oh1; oh += chunk_rows)
      run_chunk(args, prep, n, oh, std::min(chunk_rows, oh1 - oh), ow0, ow1 - ow0, oc0, oc1,
                epilogue);
}

}  // namespace tessera::kernels::sparse
