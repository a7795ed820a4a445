// "cpu.conv_winograd" and "cpu.conv_winograd_2x2" (conv_winograd.hpp):
// Winograd F(4×4, 3×3) and F(2×2, 3×3) per tile; below, B is the block side
// (4 or 2) and α = B + 2 the patch side.
//
// A tile's output rows × columns are covered by B×B blocks from the tile's
// first row and column (not a grid fixed by the image: the tiler's row
// splits are not multiples of 4, and a fixed grid would compute up to two
// extra block rows per tile); blocks that overhang the region are computed
// whole and only their pixels inside the region are stored. So a pixel's
// bits depend on where its tile starts (within the Winograd tolerance), as
// a compiled model's tiling is fixed, its outputs do not vary by run or
// thread count. Blocks go in chunks of at most `max_blocks`, per
// chunk:
//  1. input transform: each block's α×α patch (NHWC: pointers to C-runs of
//     the input, a zero run where it overhangs the image; NCHW: gathered
//     first) becomes V[e][block][C], e < α²;
//  2. α² GEMMs M[e] = V[e] · U[e], [blocks, C] · [C, OC], on gemm_tile()
//     with U[e] packed at prepare;
//  3. output transform per block and the epilogue (bias, residual,
//     activation: conv_gemm's order), stored straight into Y.
// All scratch is per thread and bounded by the chunk, never whole tensors.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/dense_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.conv_winograd";
constexpr std::string_view kVariant2x2 = "cpu.conv_winograd_2x2";
constexpr int kMaxTileElements = 36;  // α² transformed elements per block, α ≤ 6

// V and M of one chunk hold at most this many floats (4 MiB): enough blocks
// per chunk that each packed U[e] streamed from L3 serves many rows. Every
// chunk streams all of U again, so a tile whose blocks fit in twice that
// takes one chunk: a 13×13 512->1024 conv's 49 blocks of F(2×2) took two
// chunks and 6.09 ms, one 4.86 ms (bench_conv, 1 thread). 8 MiB chunks for
// every tile made VGG-16's 112×112 convs slower (one 6.9 -> 8.8 ms at 2
// threads, tessera run --profile).
constexpr int64_t kChunkScratchFloats = int64_t{1} << 20;
constexpr int64_t kMinChunkBlocks = 8;
constexpr int64_t kMaxChunkBlocks = 256;

// conv_winograd_applies()'s and conv_winograd_2x2_applies()'s speed rules
// (measurements there).
constexpr int64_t kMinWinogradSide = 14;
constexpr int64_t kMinWinogradChannels = 32;
// F(2×2)'s smallest map where the SGEMM runs AVX-512, and where it runs
// AVX2 or the baseline (min_2x2_side()).
constexpr int64_t kMin2x2SideAvx512 = 10;
constexpr int64_t kMin2x2SideNarrow = 7;

struct WinogradPrepared {
  int block = 4;                // B: output pixels per block side
  int alpha = 6;                // B + 2: input pixels per patch side
  int elements = 36;            // α²
  std::vector<PackedMatrix> u;  // U[e] as B [C, OC], e < α²
  ConvGeometry geometry;
  WinogradTransforms transforms;
};

struct WinogradScratch {
  std::vector<float> v;      // V [α²][blocks][C]
  std::vector<float> m;      // M [α²][blocks][oc1]
  std::vector<float> patch;  // an NCHW block's gathered α×α patch [α²][C]
  std::vector<float> zeros;  // C zeros: the taps that lie in the padding
  std::vector<float> block;  // one block's transformed output [B²][oc1 - oc0]
  std::vector<float> pixel;  // one pixel's channels before the store
};

WinogradScratch& thread_scratch() {
  thread_local WinogradScratch scratch;
  return scratch;
}

std::optional<std::string> supports_with(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs, ConvGeometry& g) {
  if (auto why = conv_gemm_applies(op, inputs)) return why;
  if (auto why = refuse_fused_input_scale(op)) return why;
  if (auto why = refuse_fused_expand(op)) return why;
  if (auto why = conv_geometry(op, *inputs[0].shape, *inputs[1].shape, g)) return why;
  if (g.rank != 4) return "not a 2-D conv";
  if (g.k_h != 3 || g.k_w != 3)
    return "kernel " + std::to_string(g.k_h) + "x" + std::to_string(g.k_w) + " is not 3x3";
  if (g.stride_h != 1 || g.stride_w != 1) return "stride is not 1";
  if (g.dilation_h != 1 || g.dilation_w != 1) return "dilation is not 1";
  return std::nullopt;
}

// The speed rules' reasons: an output below side×side, and too few channels.
std::optional<std::string> map_below(const ConvGeometry& g, int64_t side, int block) {
  if (g.out_h >= side && g.out_w >= side) return std::nullopt;
  const std::string b = std::to_string(block);
  return "output " + std::to_string(g.out_h) + "x" + std::to_string(g.out_w) + " is below " +
         std::to_string(side) + "x" + std::to_string(side) + " (too few " + b + "x" + b +
         " blocks to win)";
}

std::optional<std::string> too_few_channels(const ConvGeometry& g) {
  if (g.channels >= kMinWinogradChannels && g.out_channels >= kMinWinogradChannels)
    return std::nullopt;
  return std::to_string(g.channels) + " -> " + std::to_string(g.out_channels) +
         " channels: below " + std::to_string(kMinWinogradChannels) +
         " the transforms cost more than Winograd saves";
}

// On a 7×7 map F(2×2)'s 16 blocks meet 16.8 MB of U per 512-channel conv (8
// FLOP per byte), so whether it wins depends on how fast the direct conv's
// FMAs are against memory: at 2 FMA units × 16 lanes (AVX-512) they keep up
// with U's stream, at half that width (AVX2) the direct conv takes twice as
// long and F(2×2)'s saved multiplies pay (conv_winograd_2x2_applies()).
int64_t min_2x2_side() {
  return gemm_isa() == GemmIsa::kAvx512 ? kMin2x2SideAvx512 : kMin2x2SideNarrow;
}

bool is_nhwc(graph::Layout layout) {
  return layout == graph::Layout::NHWC;
}

// U[e][c][oc] = (G·g·G^T)[e] for the 3×3 kernel g of (oc, c), in double,
// with F(B×B, 3×3)'s G (α×3; Lavin & Gray eqs. 6 and 8).
std::vector<float> transform_weights(const float* w, int64_t channels, int64_t out_channels,
                                     int block) {
  static constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},
                                       {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                       {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                       {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                       {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                       {0, 0, 1}};
  static constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int alpha = block + 2;
  const double(*kG)[3] = block == 2 ? kG2 : kG4;
  std::vector<float> u(static_cast<size_t>(alpha * alpha * channels * out_channels));
  for (int64_t oc = 0; oc < out_channels; ++oc)
    for (int64_t c = 0; c < channels; ++c) {
      const float* g = w + (oc * channels + c) * 9;
      double gg[6][3];  // G·g
      for (int i = 0; i < alpha; ++i)
        for (int j = 0; j < 3; ++j)
          gg[i][j] = kG[i][0] * g[j] + kG[i][1] * g[3 + j] + kG[i][2] * g[6 + j];
      for (int i = 0; i < alpha; ++i)
        for (int j = 0; j < alpha; ++j) {
          const double value = gg[i][0] * kG[j][0] + gg[i][1] * kG[j][1] + gg[i][2] * kG[j][2];
          u[static_cast<size_t>(((i * alpha + j) * channels + c) * out_channels + oc)] =
              static_cast<float>(value);
        }
    }
  return u;
}

// The epilogue on one pixel's channels [oc0, oc1): x += bias; x += residual;
// x = activation(x) (GemmResidual::kBeforeActivation, as in conv_gemm), then
// the store. y and residual are strided by channel (1 in NHWC, H·W in NCHW).
struct PixelEpilogue {
  const float* bias = nullptr;  // at oc0
  GemmEpilogue act;             // the op's activation alone (activation_epilogue)
};

void finish_pixel(const PixelEpilogue& ep, const float* acc, int64_t count, float* work,
                  const float* residual, int64_t residual_stride, float* y, int64_t y_stride) {
  for (int64_t j = 0; j < count; ++j) work[j] = acc[j];
  if (ep.bias)
    for (int64_t j = 0; j < count; ++j) work[j] += ep.bias[j];
  if (residual) {
    if (residual_stride == 1)
      for (int64_t j = 0; j < count; ++j) work[j] += residual[j];
    else
      for (int64_t j = 0; j < count; ++j) work[j] += residual[j * residual_stride];
  }
  switch (ep.act.activation) {
    case GemmActivation::kNone:
      break;
    case GemmActivation::kRelu:
      for (int64_t j = 0; j < count; ++j) work[j] = std::max(work[j], 0.0f);
      break;
    case GemmActivation::kClip:
      for (int64_t j = 0; j < count; ++j) work[j] = apply_epilogue_scalar(work[j], ep.act, 0, 0);
      break;
    default:  // Sigmoid, SiLU, GELU, LeakyRelu: the span form, not a call per element
      apply_activation_span(ep.act, work, count);
      break;
  }
  if (y_stride == 1)
    std::memcpy(y, work, static_cast<size_t>(count) * sizeof(float));
  else
    for (int64_t j = 0; j < count; ++j) y[j * y_stride] = work[j];
}

struct TileBounds {
  int64_t n = 0, oc0 = 0, oc1 = 0, oh0 = 0, oh1 = 0, ow0 = 0, ow1 = 0;
  int64_t blocks_w = 0;  // block columns of the region
};

// Blocks [first, first + count) of the region (row-major over its block
// rows × block columns) of image n.
void run_chunk(const TileArgs& args, const WinogradPrepared& prep, const TileBounds& tb,
               int64_t first, int64_t count, const PixelEpilogue& epilogue) {
  const ConvGeometry& g = prep.geometry;
  WinogradScratch& scratch = thread_scratch();
  const int64_t c = g.channels, oc = g.out_channels, ocs = tb.oc1 - tb.oc0;
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  const ConstTensorView& x = args.inputs[0];
  const bool x_nhwc = is_nhwc(x.layout);
  const float* image = x.data + tb.n * c * in_plane;
  const int alpha = prep.alpha, elements = prep.elements;
  const int64_t bs = prep.block;
  float* v = grown(scratch.v, elements * count * c);
  float* m = grown(scratch.m, elements * count * tb.oc1);
  float* zeros = grown(scratch.zeros, c);
  std::fill(zeros, zeros + c, 0.0f);

  // 1. V = B^T·d·B per block. Taps outside the input rows and columns that
  // the region's own pixels read (its tile's dependencies) count as zeros,
  // like the padding: a block that overhangs the region would otherwise read
  // rows that another tile may be writing, or an earlier tensor's bytes in
  // the arena. Exact arithmetic gives the region's pixels zero weight on
  // them, rounding does not: VGG-16 tiled in runs of 1-2 rows for 16
  // threads differed from ONNX Runtime by 2e-2 of its largest output.
  const int64_t ih_lo = std::max<int64_t>(0, tb.oh0 - g.pad_top);
  const int64_t ih_hi = std::min(g.in_h, tb.oh1 - 1 - g.pad_top + g.k_h);
  const int64_t iw_lo = std::max<int64_t>(0, tb.ow0 - g.pad_left);
  const int64_t iw_hi = std::min(g.in_w, tb.ow1 - 1 - g.pad_left + g.k_w);
  for (int64_t t = 0; t < count; ++t) {
    const int64_t block = first + t;
    const int64_t ih0 = tb.oh0 + (block / tb.blocks_w) * bs - g.pad_top;
    const int64_t iw0 = tb.ow0 + (block % tb.blocks_w) * bs - g.pad_left;
    const float* taps[kMaxTileElements];
    float* patch = x_nhwc ? nullptr : grown(scratch.patch, elements * c);
    for (int i = 0; i < alpha; ++i)
      for (int j = 0; j < alpha; ++j) {
        const int64_t ih = ih0 + i, iw = iw0 + j;
        const bool inside = ih >= ih_lo && ih < ih_hi && iw >= iw_lo && iw < iw_hi;
        if (!inside) {
          taps[i * alpha + j] = zeros;
        } else if (x_nhwc) {
          taps[i * alpha + j] = image + (ih * g.in_w + iw) * c;
        } else {
          float* dst = patch + (i * alpha + j) * c;
          const float* src = image + ih * g.in_w + iw;
          for (int64_t ch = 0; ch < c; ++ch) dst[ch] = src[ch * in_plane];
          taps[i * alpha + j] = dst;
        }
      }
    prep.transforms.input(taps, c, v + t * c, count * c);
  }

  // 2. The α² element-wise products over channels, as GEMMs; each fetches
  // the next U[e] into L2 as it ends (with few blocks per chunk every U[e]
  // comes from memory: ResNet-50's 14×14×256 convs, 4 channel tiles at 2
  // threads, 1.63 → 1.42 ms summed over the tiles, tessera run --profile).
  const GemmTile tile{.m0 = 0, .m1 = count, .n0 = tb.oc0, .n1 = tb.oc1};
  for (int e = 0; e < elements; ++e)
    gemm_tile(v + e * count * c, c, prep.u[static_cast<size_t>(e)], m + e * count * tb.oc1, tb.oc1,
              tile, {}, e + 1 < elements ? &prep.u[static_cast<size_t>(e + 1)] : nullptr);

  // 3. Y = A^T·M·A per block, the epilogue and the store of its pixels
  // inside the region.
  const bool y_nhwc = is_nhwc(args.output.layout);
  const ConstTensorView* residual = args.input_count == 4 ? &args.inputs[3] : nullptr;
  const bool r_nhwc = residual && is_nhwc(residual->layout);
  float* out_block = grown(scratch.block, bs * bs * ocs);
  float* work = grown(scratch.pixel, ocs);
  for (int64_t t = 0; t < count; ++t) {
    const int64_t block = first + t;
    const int64_t oh_base = tb.oh0 + (block / tb.blocks_w) * bs;
    const int64_t ow_base = tb.ow0 + (block % tb.blocks_w) * bs;
    prep.transforms.output(m + t * tb.oc1 + tb.oc0, count * tb.oc1, ocs, out_block, ocs);
    for (int64_t r = 0; r < bs; ++r) {
      const int64_t oh = oh_base + r;
      if (oh >= tb.oh1) continue;
      for (int64_t s = 0; s < bs; ++s) {
        const int64_t ow = ow_base + s;
        if (ow >= tb.ow1) continue;
        const int64_t pixel = oh * g.out_w + ow;
        float* y = y_nhwc ? args.output.data + (tb.n * out_plane + pixel) * oc + tb.oc0
                          : args.output.data + (tb.n * oc + tb.oc0) * out_plane + pixel;
        const float* res = nullptr;
        if (residual)
          res = r_nhwc ? residual->data + (tb.n * out_plane + pixel) * oc + tb.oc0
                       : residual->data + (tb.n * oc + tb.oc0) * out_plane + pixel;
        finish_pixel(epilogue, out_block + (r * bs + s) * ocs, ocs, work, res,
                     r_nhwc ? 1 : out_plane, y, y_nhwc ? 1 : out_plane);
      }
    }
  }
}

}  // namespace

std::optional<std::string> conv_winograd_supports(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  return supports_with(op, inputs, g);
}

std::optional<std::string> conv_winograd_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  if (auto why = supports_with(op, inputs, g)) return why;
  // Where it is faster than cpu.conv_gemm. Tiles alone (`bench_conv 3
  // winograd`, 1 thread, AVX-512, ResNet-50's layers, weights hot in cache):
  // x1.4 to x2.4 on tiles of 7 to 28 rows of 56×56×64, 28×28×128 and
  // 14×14×256, x0.6 to x0.8 on tiles of 3 or 4 rows of 14×14×256 and
  // 7×7×512: with that few 4×4 blocks per tile the 36 transformed weight
  // matrices (4× the direct conv's weights) serve little reuse. The tiler
  // therefore cuts maps of 14 to 27 rows by channels, over whole maps, and
  // gives maps of 28 to 55 one run of rows per thread (graph/tiler.cpp,
  // winograd_tiling); ResNet-50's 14×14×256 convs then took 1.30 ms each
  // against 1.60 for cpu.conv_gemm (tessera run --profile, 1 thread, two
  // channel tiles). At 7×7 a whole map is 4 blocks: slower.
  // Below 32 channels the transforms weigh more than the GEMMs they shrink
  // (bench_conv: rows 0:52 of a 208×208 12->32 conv, a YOLO-style stem's,
  // x1.01; of 104×104 32->64, x2.0).
  if (auto why = map_below(g, kMinWinogradSide, 4)) return why;
  return too_few_channels(g);
}

std::optional<std::string> conv_winograd_2x2_applies(const graph::Operator& op,
                                                     std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  if (auto why = supports_with(op, inputs, g)) return why;
  // Where F(4×4) does not apply for the map's size and F(2×2) is faster
  // than cpu.conv_gemm. `bench_conv 5 winograd` (1 thread, this 2-core Zen
  // 5 EPYC, weights hot in L2/L3): x1.5-1.7 on 13×13 256->512 and
  // 512->1024 (a half of the channels: x1.67; the whole map, its 33.6 MB of
  // U beyond the 32 MB L3, x1.54), x1.55 on 10×10 128->128, x1.3-1.4 on
  // 7×7 512->512. In a model the weights come from memory: a YOLO-style
  // detector's three 13×13 convs made it 20.5-21.3 -> 16.1-16.7 ms at 1
  // thread and 11.5-12.0 -> 9.7-10.1 at 2 (tessera run medians, three
  // alternating rounds), but ResNet-50's 7×7×512 convs, 16 blocks per
  // 16.8 MB of U (8 FLOP per byte), took 1.01-1.08 ms against conv_gemm's
  // 1.10-1.12 at 1 thread and 1.20-1.22 against 1.14-1.18 summed over two
  // channel tiles at 2 (each streaming half of U, both at once). So with
  // AVX-512, maps of at least 10×10 (25 blocks) only. With AVX2 (a Zen 4
  // guest that hides AVX-512, 2 cores) the same two ResNet-50 convs took
  // 3.14-3.27 ms each as conv_gemm and 2.01-2.37 as F(2×2) at 1 thread,
  // 3.30-3.64 against 2.23-2.78 summed over two tiles at 2 (tessera run
  // --profile, three alternating rounds): there maps from 7×7.
  if (g.out_h >= kMinWinogradSide && g.out_w >= kMinWinogradSide)
    return "output " + std::to_string(g.out_h) + "x" + std::to_string(g.out_w) +
           " is cpu.conv_winograd's (F(4x4, 3x3))";
  if (auto why = map_below(g, min_2x2_side(), 2)) return why;
  return too_few_channels(g);
}

namespace {

PreparedOp prepare_form(std::string_view variant, int block, const graph::Operator& op,
                        std::span<const ConstTensorView> inputs) {
  auto prep = std::make_shared<WinogradPrepared>();
  if (auto why = supports_with(op, inputs, prep->geometry)) fail_op(variant, &op, *why);
  prep->block = block;
  prep->alpha = block + 2;
  prep->elements = prep->alpha * prep->alpha;
  const ConvGeometry& g = prep->geometry;
  const std::vector<float> u = transform_weights(inputs[1].data, g.channels, g.out_channels, block);
  const GemmMicrokernel& kernel = gemm_microkernel_for_columns(g.out_channels);
  prep->u.reserve(static_cast<size_t>(prep->elements));
  for (int e = 0; e < prep->elements; ++e)
    prep->u.push_back(pack_b(u.data() + e * g.channels * g.out_channels, g.channels, g.out_channels,
                             g.out_channels, /*transposed=*/false, kernel));
  // The transforms of the ISA the weights were packed for (set_gemm_isa()
  // forces one, as for the GEMM).
  switch (kernel.isa) {
    case GemmIsa::kAvx512:
      prep->transforms = winograd_transforms_avx512(block);
      break;
    case GemmIsa::kAvx2:
      prep->transforms = winograd_transforms_avx2(block);
      break;
    case GemmIsa::kPortable:
      prep->transforms = winograd_transforms_portable(block);
      break;
  }
  return prep;
}

void run_form(std::string_view variant, int block, const TileArgs& args) {
  check_dense_tile_args(variant, args, 2, args.op && args.op->attrs.fused_residual ? 4 : 3,
                        /*needs_prepared=*/true);
  const auto& prep = *static_cast<const WinogradPrepared*>(args.prepared);
  if (prep.block != block) fail_op(variant, args.op, "prepared for another Winograd form");
  const ConvGeometry& g = prep.geometry;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const graph::Shape expected_x{x_shape.empty() ? 0 : x_shape[0], g.channels, g.in_h, g.in_w};
  const graph::Shape expected_y{x_shape.empty() ? 0 : x_shape[0], g.out_channels, g.out_h, g.out_w};
  if (x_shape != expected_x || y_shape != expected_y)
    fail_op(variant, args.op,
            "shapes differ from the prepared ones (input " + graph::shape_to_string(x_shape) +
                ", output " + graph::shape_to_string(y_shape) + ")");
  if (args.input_count == 4 && *args.inputs[3].shape != y_shape)
    fail_op(variant, args.op,
            "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                " differs from the output shape " + graph::shape_to_string(y_shape));
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  TileBounds tb;
  tb.oc0 = r.begin[1], tb.oc1 = r.end[1];
  tb.oh0 = r.begin[2], tb.oh1 = r.end[2];
  tb.ow0 = r.begin[3], tb.ow1 = r.end[3];
  const int64_t blocks_h = (tb.oh1 - tb.oh0 + block - 1) / block;
  tb.blocks_w = (tb.ow1 - tb.ow0 + block - 1) / block;
  const int64_t blocks = blocks_h * tb.blocks_w;
  const int64_t block_floats = prep.elements * (g.channels + tb.oc1);  // of V and M
  int64_t max_blocks =
      std::clamp(kChunkScratchFloats / block_floats, kMinChunkBlocks, kMaxChunkBlocks);
  if (blocks * block_floats <= 2 * kChunkScratchFloats) max_blocks = std::max(max_blocks, blocks);

  PixelEpilogue epilogue;
  epilogue.bias = args.input_count >= 3 ? args.inputs[2].data + tb.oc0 : nullptr;
  epilogue.act = activation_epilogue(args.op->attrs);
  for (tb.n = r.begin[0]; tb.n < r.end[0]; ++tb.n)
    for (int64_t first = 0; first < blocks; first += max_blocks)
      run_chunk(args, prep, tb, first, std::min(max_blocks, blocks - first), epilogue);
}

}  // namespace

PreparedOp prepare_conv_winograd(const graph::Operator& op,
                                 std::span<const ConstTensorView> inputs) {
  return prepare_form(kVariant, 4, op, inputs);
}

PreparedOp prepare_conv_winograd_2x2(const graph::Operator& op,
                                     std::span<const ConstTensorView> inputs) {
  return prepare_form(kVariant2x2, 2, op, inputs);
}

void conv_winograd(const TileArgs& args) {
  run_form(kVariant, 4, args);
}

void conv_winograd_2x2(const TileArgs& args) {
  run_form(kVariant2x2, 2, args);
}

}  // namespace tessera::kernels::cpu
