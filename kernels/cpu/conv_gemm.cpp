// "cpu.conv_gemm": convolution as an implicit GEMM per tile on the packed
// SGEMM (kernels/cpu/gemm.hpp):
//
//   Y^T[pixels, oc0:oc1] = patches[pixels, kH·kW·C] · W'^T[kH·kW·C, OC]
//
// A tile's pixels go in chunks of at most ~512 (so the patch panel, the
// Y^T panel and the packed weights stay in L2). Per chunk:
//  1. A: with an NHWC input, a 1×1 stride-1 unpadded conv reads the input
//     itself (no copy at all); any other gathers each pixel's patch straight
//     from the input, C-contiguous runs (one per (kh, kw) tap, or kW·C floats
//     per kh when dilation_w == 1), zero where a tap overhangs the image — so
//     the weights are packed as W' [OC, kH, kW, C], not ONNX's [OC, C, kH,
//     kW]. An NCHW input is first transposed, the rows and columns the chunk
//     reads, into a pixel-major window panel (zero where it overhangs the
//     image), and the patches are gathered from that (a 1×1 stride-1 conv
//     uses the panel as A);
//     Inputs of few channels (stems: up to 4 NCHW, 64 NHWC) into NHWC Y are
//     read in place instead, through a table of tap offsets
//     (run_indirect_rows), with patches for the border pixels only;
//     With a fused input scale (a squeeze-and-excitation Mul, 1×1 convs
//     only) the chunk's A is the input times the scale, copied into the
//     patch panel: x * s goes to L1/L2, never back to memory;
//  2. one gemm_tile() call with the bias (per column), the fused residual
//     and the fused activation in its epilogue;
//  3. an NHWC output is written by the GEMM in place (a chunk's pixels are
//     one contiguous [pixels, OC] block of it); an NCHW one gets Y^T
//     transposed back, channels oc0:oc1 only.
// Gathering from a pixel-major tensor costs memcpy speed; gathering
// patches straight from NCHW would cost one strided scalar copy per element.
// With NHWC activations (kernels/layout_assignment.hpp) the transposes of
// steps 1 and 3 disappear.
//
// "cpu.conv_int8" is this driver with W' quantized at prepare and step 2 on
// the int8 GEMM (gemm_int8.hpp, product()): for weights the user annotated
// 8 bits, where neither Winograd nor the sparse kernel runs the conv faster.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "graph/error.hpp"
#include "kernels/cpu/conv_winograd.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/gemm_int8.hpp"
#include "kernels/cpu/int8_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kVariant = "cpu.conv_gemm";
constexpr std::string_view kInt8Variant = "cpu.conv_int8";

// The patch panel of one chunk holds at most this many floats (1 MiB: half
// of Sapphire Rapids' 2 MiB L2, beside a kc×nc block of packed weights).
// Each chunk streams the tile's packed weights once more: with 512 KiB,
// ResNet-50's 7×7 3×3 convs (K = 4608) ran as two chunks of 28 and 21
// pixels per tile; one chunk of 49 took their summed tile time from
// 10.6-11.3 to 9.4-10.0 ms per run (tessera run --profile, 1 thread, three
// interleaved rounds).
constexpr int64_t kPatchPanelFloats = int64_t{1} << 18;
constexpr int64_t kMinChunkPixels = 16;
constexpr int64_t kMaxChunkPixels = 512;

struct ConvGemmPrepared {
  PackedMatrix weights;  // W' viewed [OC, kH·kW·C], packed as the transposed B
  // cpu.conv_int8: W' quantized instead (weights then empty), for the int8
  // GEMM (gemm_int8.hpp); every chunk's product goes through product().
  std::optional<QuantizedMatrix> quantized;
  ConvGeometry geometry;
  // For an input of few channels (the stems): the k offsets of the taps, in
  // the packed weights' [kH, kW, C] order, from a window's top-left pixel
  // in the NCHW input planes (up to kIndirectMaxChannels) and in an NHWC
  // input (up to kIndirectMaxNhwcChannels), for run_indirect_rows. They
  // depend on the geometry only; empty when they would pass int32.
  std::vector<int32_t> planar_offsets;
  std::vector<int32_t> nhwc_offsets;
};

// A chunk's GEMM: on the packed float32 weights (`weights`: the prepared
// ones or an input-scaled copy), or on the quantized ones for
// cpu.conv_int8.
void product(const ConvGemmPrepared& prep, const PackedMatrix& weights, const float* a, int64_t lda,
             float* c, int64_t ldc, const GemmTile& tile, const GemmEpilogue& ep) {
  if (prep.quantized)
    int8_gemm_tile(a, lda, *prep.quantized, c, ldc, tile, ep);
  else
    gemm_tile(a, lda, weights, c, ldc, tile, ep);
}

int64_t weight_rows(const ConvGemmPrepared& prep) {
  return prep.quantized ? prep.quantized->k() : prep.weights.k();
}

// Per-thread panels, grown on first use, never per call.
struct ConvScratch {
  std::vector<float> input;     // input window of a chunk (pixel-major, or planar)
  std::vector<float> patches;   // [pixels, K]
  std::vector<float> output;    // Y^T [pixels, oc1]
  std::vector<float> residual;  // an NCHW residual, pixel-major [pixels, oc1]
};

ConvScratch& thread_scratch() {
  thread_local ConvScratch scratch;
  return scratch;
}

// Floats of slack after the patch and window panels: copy_run() reads and
// writes up to this many past a run.
constexpr int64_t kRunSlackFloats = 16;

// Copies a run of n floats as whole 64-byte blocks, up to 15 floats past the
// run on both sides (the panels have kRunSlackFloats of slack, and the
// patches are written in increasing address order, so what lands past a run
// is overwritten by the next). For the short runs of few-channel convs (the
// stem's kW·C = 9) a memcpy call cost more than the gather's GEMM.
inline void copy_run(float* dst, const float* src, int64_t n) {
  if (n > 256) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; i += kRunSlackFloats)
    std::memcpy(dst + i, src + i, kRunSlackFloats * sizeof(float));
}

// Image n's input scale (C floats), or null without one.
const float* input_scale(const TileArgs& args, int64_t n) {
  if (!args.op->attrs.fused_input_scale) return nullptr;
  const ConstTensorView& s = args.inputs[args.input_count - 1];
  return s.data + ((*s.shape)[0] == 1 ? 0 : n * (*s.shape)[1]);
}

// A 1x1 conv's weights W [OC, C] times image n's input scale per input
// channel, packed like the prepared weights (x·(s·W) for (x·s)·W) into this
// thread's buffer, valid until its next call.
const PackedMatrix& scaled_weights(const TileArgs& args, const ConvGemmPrepared& prep,
                                   const float* scale) {
  const int64_t c = prep.geometry.channels, oc = prep.geometry.out_channels;
  thread_local PackedMatrix scaled;
  pack_b_into(scaled, args.inputs[1].data /* [OC, C, 1, 1] */, c, oc, c, /*transposed=*/true,
              prep.weights.microkernel(), scale);
  return scaled;
}

std::optional<std::string> applies_with(const graph::Operator& op,
                                        std::span<const ConstTensorView> inputs, ConvGeometry& g) {
  if (op.type != graph::OpType::Conv) return "not a Conv";
  if (auto why = refuse_fused_expand(op)) return why;
  const graph::InputCount count = graph::conv_input_count(op.attrs);
  if (inputs.size() < count.min || inputs.size() > count.max)
    return "expected " + (count.min < count.max ? std::to_string(count.min) + " to " : "") +
           std::to_string(count.max) + " inputs";
  for (const ConstTensorView& input : inputs)
    if (!input.shape) return "an input has no shape";
  if (auto why = conv_geometry(op, *inputs[0].shape, *inputs[1].shape, g)) return why;
  if (g.group != 1)
    return "groups > 1 (depthwise conv uses cpu.conv_depthwise, grouped conv the reference "
           "kernel)";
  if (!inputs[1].data) return "weights are not constant";
  if (inputs.size() >= 3 && *inputs[2].shape != graph::Shape{g.out_channels})
    return "bias shape " + graph::shape_to_string(*inputs[2].shape) + " is not [OC]";
  if (op.attrs.fused_input_scale) {
    if (g.k_h != 1 || g.k_w != 1 || g.stride_h != 1 || g.stride_w != 1 || g.pad_top != 0 ||
        g.pad_left != 0 || g.out_h != g.in_h || g.out_w != g.in_w)
      return "a fused input scale needs a 1x1 stride-1 unpadded conv";
    const graph::Shape& ss = *inputs.back().shape;
    if (ss.size() != g.rank || (ss[0] != (*inputs[0].shape)[0] && ss[0] != 1) ||
        ss[1] != g.channels || graph::shape_numel(ss) != ss[0] * g.channels)
      return "input scale shape " + graph::shape_to_string(ss) + " is not [N or 1, C, 1, 1]";
  }
  return std::nullopt;
}

bool is_nhwc(graph::Layout layout, const ConvGeometry& g) {
  return layout == graph::Layout::NHWC && g.rank == 4;
}

// Copies input rows [ih_begin, ih_begin + rows) × columns [iw_begin,
// iw_begin + cols) of one NCHW image (C planes of in_h × in_w) into the
// pixel-major panel[(r·cols + j)·C + c], zero outside the image.
void gather_input_window(const float* image, const ConvGeometry& g, int64_t ih_begin, int64_t rows,
                         int64_t iw_begin, int64_t cols, float* panel) {
  const int64_t c = g.channels, plane = g.in_h * g.in_w;
  const int64_t j_lo = std::clamp<int64_t>(-iw_begin, 0, cols);
  const int64_t j_hi = std::clamp<int64_t>(g.in_w - iw_begin, j_lo, cols);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = panel + r * cols * c;
    const int64_t ih = ih_begin + r;
    if (ih < 0 || ih >= g.in_h || j_lo == j_hi) {
      std::fill(row, row + cols * c, 0.0f);
      continue;
    }
    std::fill(row, row + j_lo * c, 0.0f);
    std::fill(row + j_hi * c, row + cols * c, 0.0f);
    transpose_panel(image + ih * g.in_w + iw_begin + j_lo, plane, c, j_hi - j_lo, row + j_lo * c,
                    c);
  }
}

// NCHW inputs of at most this many channels with an NHWC output (the
// models' stems: 3 channels) run as an implicit GEMM through a table of k
// offsets into the input planes (gemm_tile_indirect, run_planar_rows): no
// pixel-major window and no patch matrix but for the border pixels. With
// more channels the taps of one k step sit in C planes apart and the patch
// gather pays again.
constexpr int64_t kIndirectMaxChannels = 4;
// NHWC inputs of at most this many channels into NHWC Y take the same route
// (but a 1×1 stride-1 conv, which reads X as A anyway), their taps' C-runs
// read in place: gathering a patch per pixel (kH runs of kW·C floats) took
// 40% of a YOLO-style stem's time (12 channels after its space-to-depth
// Concat). bench_conv nhwc, 1 thread, this Zen 5, patches -> in place: that
// stem (rows 0:52 of 208×208 12->32) 0.48-0.53 -> 0.33 ms, MobileNetV2's
// stem on NHWC X 0.124 -> 0.064, 56×56 64->64 3×3 0.52 -> 0.46; but 14×14
// 256->256 3×3 0.47 -> 0.51, 13×13 512->1024 7.1-7.5 -> 9.4 and 14×14
// 1024->2048 1×1 stride 2 0.48 -> 0.74 (A is never packed: with long
// rows of taps the broadcasts miss L1), 28×28 128->128 the same.
constexpr int64_t kIndirectMaxNhwcChannels = 64;

// The patches of `rows` × `cols` output pixels straight from an NHWC image,
// their window's top-left input pixel at (ih_begin, iw_begin), zero where a
// tap falls outside the image: no window panel first. A strided conv reads
// only the pixels it uses (ResNet-50's 1×1 stride-2 downsamples: every
// other pixel, where a window copied every input row); a padded one copies
// each input run once instead of twice. In a model the input comes from L3.
void gather_nhwc_patches(const float* image, const ConvGeometry& g, int64_t ih_begin, int64_t rows,
                         int64_t iw_begin, int64_t cols, float* patches) {
  const int64_t c = g.channels, row_floats = g.in_w * c, tap_floats = g.k_w * c;
  const int64_t k = g.k_h * tap_floats;
  // copy_run() reads whole 64-byte blocks: past a run that is not a whole
  // number of them it would read past the image, so such runs are memcpy'd.
  auto copy = [](float* dst, const float* src, int64_t floats) {
    if (floats % kRunSlackFloats == 0)
      copy_run(dst, src, floats);
    else
      std::memcpy(dst, src, static_cast<size_t>(floats) * sizeof(float));
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ih0 = ih_begin + r * g.stride_h;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t iw0 = iw_begin + j * g.stride_w;
      int64_t kw_lo = 0, kw_hi = 0;  // the kw taps inside the image
      tap_range(iw0, g.dilation_w, g.k_w, g.in_w, kw_lo, kw_hi);
      float* patch = patches + (r * cols + j) * k;
      for (int64_t kh = 0; kh < g.k_h; ++kh, patch += tap_floats) {
        const int64_t ih = ih0 + kh * g.dilation_h;
        if (ih < 0 || ih >= g.in_h || kw_lo == kw_hi) {
          std::fill(patch, patch + tap_floats, 0.0f);
          continue;
        }
        const float* row = image + ih * row_floats;
        // Zeros, the taps inside, zeros, in increasing address order: what
        // copy_run() writes past a run is overwritten next.
        std::fill(patch, patch + kw_lo * c, 0.0f);
        if (g.dilation_w == 1) {
          copy(patch + kw_lo * c, row + (iw0 + kw_lo) * c, (kw_hi - kw_lo) * c);
        } else {
          for (int64_t kw = kw_lo; kw < kw_hi; ++kw)
            copy(patch + kw * c, row + (iw0 + kw * g.dilation_w) * c, c);
        }
        std::fill(patch + kw_hi * c, patch + tap_floats, 0.0f);
      }
    }
  }
}

// One output pixel's patch from NCHW planes, its window's top-left input
// pixel at (ih0, iw0), in the packed weights' [kH, kW, C] order; zero where
// a tap falls outside the image.
void gather_planar_patch(const float* image, const ConvGeometry& g, int64_t ih0, int64_t iw0,
                         float* patch) {
  const int64_t plane = g.in_h * g.in_w;
  for (int64_t kh = 0; kh < g.k_h; ++kh) {
    const int64_t ih = ih0 + kh * g.dilation_h;
    const bool row_inside = ih >= 0 && ih < g.in_h;
    for (int64_t kw = 0; kw < g.k_w; ++kw) {
      const int64_t iw = iw0 + kw * g.dilation_w;
      const bool inside = row_inside && iw >= 0 && iw < g.in_w;
      for (int64_t ch = 0; ch < g.channels; ++ch)
        *patch++ = inside ? image[ch * plane + ih * g.in_w + iw] : 0.0f;
    }
  }
}

// A chunk of `rows` × `cols` output pixels (window top-left input pixel of
// the first at (ih_begin, iw_begin)) of an image with few channels, NCHW or
// NHWC (`nhwc`), into NHWC Y (the stems): the pixels whose windows lie
// inside the image read it in place through `offsets` (gemm_tile_indirect,
// one GEMM per output row, its rows stride_w pixels apart), with no copy of
// the input; the border pixels (padding) get explicit patches, a GEMM per
// border column over the chunk's rows (their outputs are a row of pixels
// apart) and one per border row. MobileNetV2's stem copied its whole 600 KB
// input into a padded window per run before (66 us of 290, perf).
void run_indirect_rows(const float* image, bool nhwc, const ConvGeometry& g,
                       const PackedMatrix& weights, const int32_t* offsets, ConvScratch& scratch,
                       int64_t ih_begin, int64_t rows, int64_t iw_begin, int64_t cols, float* y,
                       int64_t oc0, int64_t oc1, const GemmEpilogue& epilogue) {
  const int64_t k = weights.k(), oc = g.out_channels;
  // An input pixel's first float, and the floats from one pixel to the next.
  const int64_t pixel_floats = nhwc ? g.channels : 1;
  auto patch_at = [&](int64_t ih0, int64_t iw0, float* patch) {
    if (nhwc)
      gather_nhwc_patches(image, g, ih0, 1, iw0, 1, patch);
    else
      gather_planar_patch(image, g, ih0, iw0, patch);
  };
  const int64_t s_h = g.stride_h, s_w = g.stride_w;
  const int64_t last_tap_h = (g.k_h - 1) * g.dilation_h, last_tap_w = (g.k_w - 1) * g.dilation_w;
  // Columns [m_lo, m_hi) and rows [r_lo, r_hi) whose windows are inside.
  auto inside_range = [](int64_t begin, int64_t stride, int64_t last_tap, int64_t extent,
                         int64_t count) {
    const int64_t lo = begin >= 0 ? 0 : std::min(count, (-begin + stride - 1) / stride);
    const int64_t room = extent - 1 - last_tap - begin;  // the last start that fits, from begin
    const int64_t hi = room < 0 ? lo : std::clamp(room / stride + 1, lo, count);
    return std::pair<int64_t, int64_t>{lo, hi};
  };
  const auto [m_lo, m_hi] = inside_range(iw_begin, s_w, last_tap_w, g.in_w, cols);
  const auto [r_lo, r_hi] = inside_range(ih_begin, s_h, last_tap_h, g.in_h, rows);
  auto with_residual_at = [&](int64_t pixel, int64_t ld_pixels) {
    GemmEpilogue e = epilogue;
    if (e.residual) {
      e.residual += pixel * epilogue.ld_residual;
      e.ld_residual = ld_pixels * epilogue.ld_residual;
    }
    return e;
  };
  if (m_lo < m_hi)
    for (int64_t r = r_lo; r < r_hi; ++r) {
      const int64_t pixel = r * cols + m_lo;
      gemm_tile_indirect(
          image + ((ih_begin + r * s_h) * g.in_w + iw_begin + m_lo * s_w) * pixel_floats,
          s_w * pixel_floats, offsets, weights, y + pixel * oc, oc,
          {.m0 = 0, .m1 = m_hi - m_lo, .n0 = oc0, .n1 = oc1}, with_residual_at(pixel, 1));
    }
  // Border columns of the inside rows, then the border rows.
  float* patches = grown(scratch.patches, std::max(r_hi - r_lo, cols) * k + kRunSlackFloats);
  for (int64_t m = 0; m < cols; ++m) {
    if (m == m_lo) m = std::max(m, m_hi);
    if (m >= cols || r_lo >= r_hi) break;
    for (int64_t r = r_lo; r < r_hi; ++r)
      patch_at(ih_begin + r * s_h, iw_begin + m * s_w, patches + (r - r_lo) * k);
    const int64_t pixel = r_lo * cols + m;
    gemm_tile(patches, k, weights, y + pixel * oc, cols * oc,
              {.m0 = 0, .m1 = r_hi - r_lo, .n0 = oc0, .n1 = oc1}, with_residual_at(pixel, cols));
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (r == r_lo) r = std::max(r, r_hi);
    if (r >= rows) break;
    for (int64_t m = 0; m < cols; ++m)
      patch_at(ih_begin + r * s_h, iw_begin + m * s_w, patches + m * k);
    gemm_tile(patches, k, weights, y + r * cols * oc, oc,
              {.m0 = 0, .m1 = cols, .n0 = oc0, .n1 = oc1}, with_residual_at(r * cols, 1));
  }
}

// Whether A of a chunk is the NHWC input itself: a 1×1 stride-1 conv
// without padding reads exactly its own pixels, C-contiguous.
bool input_is_a(const TileArgs& args, const ConvGeometry& g) {
  return is_nhwc(args.inputs[0].layout, g) && g.k_h == 1 && g.k_w == 1 && g.stride_h == 1 &&
         g.stride_w == 1 && g.out_h == g.in_h && g.out_w == g.in_w && g.pad_top == 0 &&
         g.pad_left == 0;
}

// One chunk: output rows [oh_begin, oh_begin + rows) × columns [ow_begin,
// ow_begin + cols) of image n, channels [oc0, oc1). The caller makes the
// chunk's pixels contiguous in pixel order (cols == out_w or rows == 1), so
// in an NHWC tensor they are one [pixels, channels] block.
void run_chunk(const TileArgs& args, const ConvGemmPrepared& prep, const PackedMatrix& weights,
               bool scale_input, int64_t n, int64_t oh_begin, int64_t rows, int64_t ow_begin,
               int64_t cols, int64_t oc0, int64_t oc1, GemmEpilogue epilogue) {
  const ConvGeometry& g = prep.geometry;
  ConvScratch& scratch = thread_scratch();
  const int64_t c = g.channels, k = weight_rows(prep);
  const int64_t pixels = rows * cols;
  const int64_t first_pixel = (n * g.out_h + oh_begin) * g.out_w + ow_begin;  // of Y and R
  const bool x_nhwc = is_nhwc(args.inputs[0].layout, g);
  const bool y_nhwc = is_nhwc(args.output.layout, g);

  const float* a = nullptr;
  const int64_t ih_begin = oh_begin * g.stride_h - g.pad_top;
  const int64_t iw_begin = ow_begin * g.stride_w - g.pad_left;
  const float* image = args.inputs[0].data + n * c * g.in_h * g.in_w;
  const float* scale = scale_input ? input_scale(args, n) : nullptr;
  const int64_t window_rows = (rows - 1) * g.stride_h + (g.k_h - 1) * g.dilation_h + 1;
  const int64_t window_cols = (cols - 1) * g.stride_w + (g.k_w - 1) * g.dilation_w + 1;
  const std::vector<int32_t>& offsets = x_nhwc ? prep.nhwc_offsets : prep.planar_offsets;
  // (A 1x1 stride-1 conv on NHWC X reads X itself as A, below.)
  const bool indirect =
      y_nhwc && !scale && g.rank == 4 && !offsets.empty() && !(x_nhwc && input_is_a(args, g));
  if (indirect) {
    // run_indirect_rows reads the input through the offsets.
  } else if (scale && input_is_a(args, g)) {
    float* scaled = grown(scratch.patches, pixels * c);
    const float* x = args.inputs[0].data + first_pixel * c;
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t ch = 0; ch < c; ++ch) scaled[p * c + ch] = x[p * c + ch] * scale[ch];
    a = scaled;
  } else if (input_is_a(args, g)) {
    a = args.inputs[0].data + first_pixel * c;  // in_h, in_w == out_h, out_w
  } else if (x_nhwc) {
    float* patches = grown(scratch.patches, pixels * k + kRunSlackFloats);
    gather_nhwc_patches(image, g, ih_begin, rows, iw_begin, cols, patches);
    a = patches;
  } else {
    float* window = grown(scratch.input, window_rows * window_cols * c + kRunSlackFloats);
    gather_input_window(image, g, ih_begin, window_rows, iw_begin, window_cols, window);
    if (scale)  // 1×1 stride 1 (applies_with): the window is A
      for (int64_t p = 0; p < window_rows * window_cols; ++p)
        for (int64_t ch = 0; ch < c; ++ch) window[p * c + ch] *= scale[ch];
    a = window;
    if (g.k_h != 1 || g.k_w != 1 || g.stride_h != 1 || g.stride_w != 1) {
      float* patches = grown(scratch.patches, pixels * k + kRunSlackFloats);
      // A whole kernel row is one run of kW·C floats when dilation_w == 1.
      const bool rows_contiguous = g.dilation_w == 1;
      const int64_t run = rows_contiguous ? g.k_w * c : c;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          float* patch = patches + (r * cols + j) * k;
          for (int64_t kh = 0; kh < g.k_h; ++kh) {
            const float* src =
                window + ((r * g.stride_h + kh * g.dilation_h) * window_cols + j * g.stride_w) * c;
            if (rows_contiguous) {
              copy_run(patch, src, run);
              patch += run;
              continue;
            }
            for (int64_t kw = 0; kw < g.k_w; ++kw, patch += c)
              copy_run(patch, src + kw * g.dilation_w * c, c);
          }
        }
      }
      a = patches;
    }
  }

  const int64_t out_plane = g.out_h * g.out_w;
  if (args.op->attrs.fused_residual) {  // read pixel-major like Y^T
    const ConstTensorView& residual = args.inputs[3];
    if (is_nhwc(residual.layout, g)) {
      epilogue.residual = residual.data + first_pixel * g.out_channels;
      epilogue.ld_residual = g.out_channels;
    } else {
      float* panel = grown(scratch.residual, pixels * oc1);
      const float* src = residual.data + (n * g.out_channels + oc0) * out_plane;
      for (int64_t r = 0; r < rows; ++r)
        transpose_panel(src + (oh_begin + r) * g.out_w + ow_begin, out_plane, oc1 - oc0, cols,
                        panel + r * cols * oc1 + oc0, oc1);
      epilogue.residual = panel;
      epilogue.ld_residual = oc1;
    }
  }

  if (indirect) {
    run_indirect_rows(image, x_nhwc, g, weights, offsets.data(), scratch, ih_begin, rows, iw_begin,
                      cols, args.output.data + first_pixel * g.out_channels, oc0, oc1, epilogue);
    return;
  }
  const GemmTile tile{.m0 = 0, .m1 = pixels, .n0 = oc0, .n1 = oc1};
  if (y_nhwc) {
    product(prep, weights, a, k, args.output.data + first_pixel * g.out_channels, g.out_channels,
            tile, epilogue);
    return;
  }
  float* out_t = grown(scratch.output, pixels * oc1);
  product(prep, weights, a, k, out_t, oc1, tile, epilogue);
  float* y = args.output.data + (n * g.out_channels + oc0) * out_plane;
  for (int64_t r = 0; r < rows; ++r)
    transpose_panel(out_t + r * cols * oc1 + oc0, oc1, cols, oc1 - oc0,
                    y + (oh_begin + r) * g.out_w + ow_begin, out_plane);
}

}  // namespace

std::optional<std::string> conv_gemm_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  return applies_with(op, inputs, g);
}

std::optional<std::string> refuse_fused_input_scale(const graph::Operator& op) {
  if (!op.attrs.fused_input_scale) return std::nullopt;
  return "a squeeze-and-excitation scale is fused in (only cpu.conv_gemm applies it)";
}

std::optional<std::string> refuse_fused_expand(const graph::Operator& op) {
  if (!op.attrs.fused_expand) return std::nullopt;
  return "a 1x1 expansion is fused in (only cpu.conv_expand_depthwise computes it)";
}

namespace {

// cpu.conv_gemm's weights packed for the float32 SGEMM, or cpu.conv_int8's
// quantized (`int8`).
PreparedOp prepare_conv(std::string_view variant, const graph::Operator& op,
                        std::span<const ConstTensorView> inputs, bool int8) {
  auto prep = std::make_shared<ConvGemmPrepared>();
  if (auto why = applies_with(op, inputs, prep->geometry)) fail_op(variant, &op, *why);
  const ConvGeometry& g = prep->geometry;
  // ONNX's [OC, C, kH, kW] → [OC, kH, kW, C]: the order the patches are
  // gathered in (C-contiguous runs of the pixel-major window).
  const int64_t taps = g.k_h * g.k_w, k = g.channels * taps;
  std::vector<float> permuted(static_cast<size_t>(g.out_channels * k));
  const float* w = inputs[1].data;
  for (int64_t oc = 0; oc < g.out_channels; ++oc)
    for (int64_t ch = 0; ch < g.channels; ++ch)
      for (int64_t t = 0; t < taps; ++t)
        permuted[(oc * taps + t) * g.channels + ch] = w[(oc * g.channels + ch) * taps + t];
  if (int8) {
    // No indirect rows (the int8 GEMM reads A rows in place only) and no
    // input scale (conv_int8_applies refuses it).
    try {
      prep->quantized = quantize_b(permuted.data(), k, g.out_channels, k, /*transposed=*/true);
    } catch (const std::invalid_argument& e) {
      fail_op(variant, &op, e.what());
    }
    return prep;
  }
  prep->weights = pack_b(permuted.data(), k, g.out_channels, k, /*transposed=*/true,
                         gemm_microkernel_for_columns(g.out_channels));
  // int32 offsets must reach every float of an image.
  const bool fits_int32 = g.channels * g.in_h * g.in_w <= std::numeric_limits<int32_t>::max();
  if (g.rank == 4 && fits_int32)
    for (int64_t kh = 0; kh < g.k_h; ++kh)
      for (int64_t kw = 0; kw < g.k_w; ++kw)
        for (int64_t ch = 0; ch < g.channels; ++ch) {
          const int64_t ih = kh * g.dilation_h, iw = kw * g.dilation_w;
          if (g.channels <= kIndirectMaxChannels)
            prep->planar_offsets.push_back(static_cast<int32_t>((ch * g.in_h + ih) * g.in_w + iw));
          if (g.channels <= kIndirectMaxNhwcChannels)
            prep->nhwc_offsets.push_back(
                static_cast<int32_t>((ih * g.in_w + iw) * g.channels + ch));
        }
  return prep;
}

void run_conv(std::string_view variant, const TileArgs& args) {
  const graph::InputCount count =
      args.op ? graph::conv_input_count(args.op->attrs) : graph::InputCount{2, 3};
  check_dense_tile_args(variant, args, count.min, count.max, /*needs_prepared=*/true);
  const auto& prep = *static_cast<const ConvGemmPrepared*>(args.prepared);
  const ConvGeometry& g = prep.geometry;
  const graph::Shape& y_shape = *args.output.shape;
  const bool is_1d = g.rank == 3;
  const graph::Shape& x_shape = *args.inputs[0].shape;
  const bool same_shapes = x_shape.size() == g.rank && y_shape.size() == g.rank &&
                           y_shape[0] == x_shape[0] && x_shape[1] == g.channels &&
                           x_shape[g.rank - 1] == g.in_w && (is_1d || x_shape[2] == g.in_h) &&
                           y_shape[1] == g.out_channels && y_shape[g.rank - 1] == g.out_w &&
                           (is_1d || y_shape[2] == g.out_h);
  if (!same_shapes)
    fail_op(variant, args.op,
            "shapes differ from the prepared ones (input " + graph::shape_to_string(x_shape) +
                ", output " + graph::shape_to_string(y_shape) + ")");
  if (args.op->attrs.fused_residual && *args.inputs[3].shape != y_shape)
    fail_op(variant, args.op,
            "residual shape " + graph::shape_to_string(*args.inputs[3].shape) +
                " differs from the output shape " + graph::shape_to_string(y_shape));
  const graph::Region& r = *args.region;
  if (r.empty()) return;

  const float* bias = args.input_count >= 3 ? args.inputs[2].data : nullptr;
  GemmEpilogue epilogue = activation_epilogue(args.op->attrs);
  epilogue.bias = bias;
  epilogue.bias_kind = bias ? GemmBias::kPerColumn : GemmBias::kNone;
  const int64_t oc0 = r.begin[1], oc1 = r.end[1];
  const int64_t oh0 = is_1d ? 0 : r.begin[2], oh1 = is_1d ? 1 : r.end[2];
  const int64_t ow0 = r.begin[g.rank - 1], ow1 = r.end[g.rank - 1];
  // A squeeze-and-excitation scale s multiplies the input's channels: A
  // is x·s, copied (pixels × C multiplies per tile), or the weights are
  // scaled per input channel instead (C × OC per image) and A is read in
  // place. Where the tile has at least 4·OC pixels the weights are the
  // cheaper: EfficientNet-B0's five projections on 112x112 to 28x28 maps
  // took 0.605 ms with the copy, 0.424 so (tessera run --profile, 1 thread,
  // this Zen 5).
  const bool scale_weights = args.op->attrs.fused_input_scale && input_is_a(args, g) &&
                             4 * g.out_channels <= (oh1 - oh0) * (ow1 - ow0);
  // Chunks bound the scratch panels. With A read from the input and Y
  // written in place there are none: the whole tile is one GEMM, so the
  // packed weights are streamed once per tile, not once per chunk.
  const bool no_panels = input_is_a(args, g) &&
                         (!args.op->attrs.fused_input_scale || scale_weights) &&
                         is_nhwc(args.output.layout, g) &&
                         (!args.op->attrs.fused_residual || is_nhwc(args.inputs[3].layout, g));
  const int64_t max_pixels = no_panels ? (oh1 - oh0) * (ow1 - ow0)
                                       : std::clamp(kPatchPanelFloats / weight_rows(prep),
                                                    kMinChunkPixels, kMaxChunkPixels);
  const int64_t chunk_cols = std::min(ow1 - ow0, max_pixels);
  // Whole output rows or a single part-row: the chunk's pixels stay
  // contiguous in pixel order (what run_chunk's NHWC paths need).
  const int64_t chunk_rows =
      chunk_cols == g.out_w ? std::max<int64_t>(1, max_pixels / chunk_cols) : 1;
  for (int64_t n = r.begin[0]; n < r.end[0]; ++n) {
    const PackedMatrix& weights =
        scale_weights ? scaled_weights(args, prep, input_scale(args, n)) : prep.weights;
    for (int64_t oh = oh0; oh < oh1; oh += chunk_rows)
      for (int64_t ow = ow0; ow < ow1; ow += chunk_cols)
        run_chunk(args, prep, weights, !scale_weights, n, oh, std::min(chunk_rows, oh1 - oh), ow,
                  std::min(chunk_cols, ow1 - ow), oc0, oc1, epilogue);
  }
}

}  // namespace

PreparedOp prepare_conv_gemm(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  return prepare_conv(kVariant, op, inputs, /*int8=*/false);
}

void conv_gemm(const TileArgs& args) {
  run_conv(kVariant, args);
}

std::optional<std::string> conv_int8_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  ConvGeometry g;
  if (auto why = applies_with(op, inputs, g)) return why;
  if (auto why = refuse_fused_input_scale(op)) return why;
  // The int8 GEMM computes every product of the direct conv; Winograd
  // computes 2.25-4x fewer in float32. ResNet-50 with every weight at 8
  // bits (tessera run --profile, 1 thread, AVX2 Zen 4 guest): its 40
  // conv_gemm convs took 105.8 ms float32, 84.6 int8; its 11 F(4x4) convs
  // 25.6 Winograd, 35.6 int8; its two F(2x2) ones 5.9 and 6.9. Unmeasured
  // against VNNI: Winograd keeps these convs there too.
  if (!conv_winograd_applies(op, inputs) || !conv_winograd_2x2_applies(op, inputs))
    return "Winograd runs this 3x3 stride-1 conv faster than the int8 GEMM";
  return int8_weight_allowed(op, g.channels * g.k_h * g.k_w);
}

PreparedOp prepare_conv_int8(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  if (auto why = conv_int8_applies(op, inputs)) fail_op(kInt8Variant, &op, *why);
  return prepare_conv(kInt8Variant, op, inputs, /*int8=*/true);
}

void conv_int8(const TileArgs& args) {
  run_conv(kInt8Variant, args);
}

}  // namespace tessera::kernels::cpu
