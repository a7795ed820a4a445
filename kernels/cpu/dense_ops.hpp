#pragma once
// The CPU tile-kernel variants of the dense ops (Conv, Gemm, MatMul), built
// on the packed SGEMM of kernels/cpu/gemm.hpp. Each variant is a TileKernel
// plus, where it needs one, a PrepareKernel that packs the constant weights
// once at model load, and a KernelApplies that says why it cannot run an op
// (the compiler then keeps the reference kernel and prints the reason).
//
// Usage (what the runtime does for one op):
//   if (!cpu::conv_gemm_applies(op, inputs)) {
//     PreparedOp state = cpu::prepare_conv_gemm(op, inputs);  // at model load
//     args.prepared = state.get();                             // per tile
//     cpu::conv_gemm(args);
//   }
// A PreparedOp holds weights packed for the SGEMM ISA in use when it was
// made (set_gemm_isa() first to force another one).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::cpu {

// conv_gemm.cpp — "cpu.conv_gemm": 1-D/2-D convolution with group == 1, any
// stride, padding and dilation, as an implicit GEMM per tile:
// Y^T[pixels, OC] = patches[pixels, kH·kW·C] · W^T (W packed at prepare).
// Inputs X [N,C,(H,)W], W [OC,C,(kH,)kW] constant, B [OC] optional.
void conv_gemm(const TileArgs& args);
PreparedOp prepare_conv_gemm(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_gemm_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);
// The other conv variants' reason not to apply where `op` has a fused input
// scale (graph/fuse_input_scale.hpp), which only cpu.conv_gemm applies;
// nullopt without one.
std::optional<std::string> refuse_fused_input_scale(const graph::Operator& op);
// The same for a fused 1x1 expansion (graph/fuse_expand_depthwise.hpp).
std::optional<std::string> refuse_fused_expand(const graph::Operator& op);

// conv_transpose.cpp — "cpu.conv_transpose": 2-D ConvTranspose (NCHW) as a
// GEMM per input row (X read in place, each group's W packed at prepare)
// and a scatter of the product's columns into the tile's output elements.
void conv_transpose(const TileArgs& args);
PreparedOp prepare_conv_transpose(const graph::Operator& op,
                                  std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_transpose_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs);

// conv_depthwise.cpp — "cpu.conv_depthwise": depthwise convolution
// (group == C == OC, W [C,1,kH,kW]), any stride, padding and dilation;
// direct: NCHW vectorised along the output width, NHWC along the channels
// (conv_depthwise_nhwc.hpp). Prepared: the weights tap-major (NHWC reads them so).
PreparedOp prepare_conv_depthwise(const graph::Operator& op,
                                  std::span<const ConstTensorView> inputs);
void conv_depthwise(const TileArgs& args);
std::optional<std::string> conv_depthwise_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs);

// conv_expand_depthwise.cpp — "cpu.conv_expand_depthwise": a depthwise conv
// with a fused 1x1 expansion (attrs.fused_expand,
// graph/fuse_expand_depthwise.hpp), NHWC; the expansion's weights packed
// for the SGEMM.
void conv_expand_depthwise(const TileArgs& args);
PreparedOp prepare_conv_expand_depthwise(const graph::Operator& op,
                                         std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_expand_depthwise_applies(const graph::Operator& op,
                                                         std::span<const ConstTensorView> inputs);

// gemm_ops.cpp — "cpu.gemm": ONNX Gemm Y = alpha·op(A)·op(B) + beta·C with
// B constant; any trans_a/trans_b, C absent, scalar, [N], [1,N], [M,1] or
// [M,N] (constant or not). alpha is folded into the packed B.
void gemm(const TileArgs& args);
PreparedOp prepare_gemm(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> gemm_applies(const graph::Operator& op,
                                        std::span<const ConstTensorView> inputs);

// gemm_ops.cpp — "cpu.matmul": MatMul with A of rank >= 2 and B a constant
// [K, N]: A's batch dims are just more rows of one [M', K] · [K, N] GEMM.
void matmul(const TileArgs& args);
PreparedOp prepare_matmul(const graph::Operator& op, std::span<const ConstTensorView> inputs);
// gemm_ops.cpp — "cpu.matmul_batched": MatMul whose B is an activation or
// batched (attention's Q·Kᵀ and P·V): A [..., M, K], B [..., K, N] of the
// same rank, each B batch dim equal to A's or 1. B's matrix is packed per
// tile and batch index (O(K·N), small beside the tile's 2·M·K·N FLOPs).
void matmul_batched(const TileArgs& args);
std::optional<std::string> matmul_batched_applies(const graph::Operator& op,
                                                  std::span<const ConstTensorView> inputs);
// attention_ops.cpp — "cpu.attention": FusedAttention (graph/fuse_attention.hpp)
// a block of query rows at a time, the block's scores kept in L2. Its
// prepare reads a constant mask's rows once (a causal mask: each row zeros,
// then one large negative fill), so that the run neither reads the mask nor
// normalises a row past its own last unmasked column.
void attention(const TileArgs& args);
PreparedOp prepare_attention(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> attention_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs);
std::optional<std::string> matmul_applies(const graph::Operator& op,
                                          std::span<const ConstTensorView> inputs);

// dense_ops_common.cpp — helpers shared by the variants above.

// A 1-D or 2-D convolution's sizes, the 1-D form seen as 2-D with H = 1.
struct ConvGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, group_channels = 0, k_h = 0, k_w = 0, out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t group = 1;
  size_t rank = 0;  // of X, W and Y: 3 or 4
};

// Reads the geometry from X's and W's shapes and the op's attributes; the
// output size follows ONNX's formula. nullopt on success, else why not.
std::optional<std::string> conv_geometry(const graph::Operator& op, const graph::Shape& x_shape,
                                         const graph::Shape& w_shape, ConvGeometry& geometry);

// The taps [lo, hi) of a k-tap window starting at input index `first`
// (dilation `dilation`) that fall inside [0, size); lo == hi when none do.
void tap_range(int64_t first, int64_t dilation, int64_t k, int64_t size, int64_t& lo, int64_t& hi);

// dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols (SIMD blocks).
void transpose_panel(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                     int64_t ld_dst);

// The op's fused activation (graph::Activation) as the SGEMM epilogue's.
GemmActivation gemm_activation(graph::Activation activation);

// An epilogue with the op's fused activation and its parameters (Clip's
// bounds, LeakyRelu's slope) and nothing else: callers add bias and residual.
GemmEpilogue activation_epilogue(const graph::OpAttributes& attrs);

// MatMul's optional fused bias (input 2, graph/fuse_matmul_bias.hpp) and
// fused residual (input 3, the output's shape: graph/fuse_residual.hpp): why
// the inputs do not fit them (count, shapes), or nothing.
std::optional<std::string> matmul_bias_problem(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs);
// MatMul's epilogue: its fused activation, the fused bias per column and the
// fused residual (absolute rows of the flattened output, like Y).
GemmEpilogue matmul_epilogue(const TileArgs& args);

// A per-thread scratch buffer of at least `floats` floats (grown, never
// shrunk; its contents are not kept across calls), 64-byte aligned like the
// arena's tensors: at a std::vector's own 16-byte alignment every 64-byte
// vector load and store of it splits across two cache lines.
inline float* grown(std::vector<float>& buffer, int64_t floats) {
  constexpr int64_t kPad = 64 / sizeof(float);
  if (static_cast<int64_t>(buffer.size()) < floats + kPad)
    buffer.resize(static_cast<size_t>(floats + kPad));
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64) / sizeof(float);
}

// Throws tessera::Error naming the variant and the op.
[[noreturn]] void fail_op(std::string_view variant, const graph::Operator* op,
                          const std::string& what);

// The checks every variant's run() makes before touching memory: operator,
// region, output, prepared state (when `needs_prepared`) and input data.
void check_dense_tile_args(std::string_view variant, const TileArgs& args, size_t min_inputs,
                           size_t max_inputs, bool needs_prepared);

// Calls visit(index) for every index of the region's leading `batch_rank`
// dims, last dim fastest (an odometer). The region must not be empty.
template <class Visit>
void for_each_batch_index(const graph::Region& r, size_t batch_rank, Visit&& visit) {
  std::vector<int64_t> index(r.begin.begin(), r.begin.begin() + batch_rank);
  while (true) {
    visit(static_cast<const std::vector<int64_t>&>(index));
    size_t d = batch_rank;
    while (d > 0 && ++index[d - 1] == r.end[d - 1]) {
      index[d - 1] = r.begin[d - 1];
      --d;
    }
    if (d == 0) break;
  }
}

// A [..., M, K] times a 2-D B is one [M', K] matrix: batch index b's rows are
// M'-rows b·M .. b·M + M. Calls tile(GemmTile) once per batch index in the
// region's batch box, with the region's rows and columns.
template <class TileFn>
void for_each_batched_gemm_tile(const graph::Region& r, const graph::Shape& a_shape,
                                TileFn&& tile) {
  const size_t rank = a_shape.size();
  const int64_t m = a_shape[rank - 2];
  const int64_t i0 = r.begin[rank - 2], i1 = r.end[rank - 2];
  const int64_t j0 = r.begin[rank - 1], j1 = r.end[rank - 1];
  for_each_batch_index(r, rank - 2, [&](const std::vector<int64_t>& index) {
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d) flat = flat * a_shape[d] + index[d];
    tile(GemmTile{.m0 = flat * m + i0, .m1 = flat * m + i1, .n0 = j0, .n1 = j1});
  });
}

// The run() of a MatMul variant whose constant B was prepared as [K, N] (a
// packed, sparse or quantized copy): checks A, Y and the fused bias/residual
// against the prepared sizes, then calls tile(GemmTile, epilogue) once per
// batch index of the region.
template <class TileFn>
void run_prepared_matmul(std::string_view variant, const TileArgs& args, int64_t k, int64_t n,
                         TileFn&& tile) {
  check_dense_tile_args(variant, args, 2, 4, /*needs_prepared=*/true);
  const graph::Shape& a_shape = *args.inputs[0].shape;
  const graph::Shape& y_shape = *args.output.shape;
  const size_t rank = a_shape.size();
  graph::Shape expected = a_shape;
  if (rank >= 2) expected.back() = n;
  if (rank < 2 || a_shape.back() != k || y_shape != expected)
    fail_op(variant, args.op,
            "shapes differ from the prepared ones (A " + graph::shape_to_string(a_shape) + ", Y " +
                graph::shape_to_string(y_shape) + ")");
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  if (auto why = matmul_bias_problem(*args.op, {args.inputs, args.input_count}))
    fail_op(variant, args.op, *why);
  const GemmEpilogue ep = matmul_epilogue(args);
  for_each_batched_gemm_tile(r, a_shape, [&](const GemmTile& t) { tile(t, ep); });
}

// gemm_applies() plus what a variant that prepares B itself needs: no
// trans_a, a constant C.
std::optional<std::string> gemm_constant_b_applies(const graph::Operator& op,
                                                   std::span<const ConstTensorView> inputs);
// Gemm's alpha·op(B) as the [K, N] weight that a variant preparing B itself
// packs: data[k·ldb + n], or data[n·ldb + k] when transposed (ldb = B's
// second dimension either way); a scaled copy only when alpha != 1.
struct GemmWeight {
  std::vector<float> copy;
  const float* data = nullptr;
  int64_t k = 0, n = 0, ldb = 0;
  bool transposed = false;
};
GemmWeight gemm_weight(const graph::Operator& op, std::span<const ConstTensorView> inputs);

// Gemm's constant beta·C for a variant that prepares B itself (sparse, int8):
// the epilogue slot it takes, scaled once at prepare time.
struct PreparedGemmC {
  enum class Form { kNone, kPerColumn, kPerRow, kFull };
  Form form = Form::kNone;
  std::vector<float> scaled;  // beta·C: [N], [M] or [M, N]
};
// gemm_applies() must have accepted the op (C broadcasts to [M, N]).
PreparedGemmC prepare_gemm_c(const graph::Operator& op, std::span<const ConstTensorView> inputs,
                             int64_t m, int64_t n);

// The run() of such a Gemm variant: checks A, Y, C and the fused residual
// against the prepared sizes, builds the epilogue (activation, C, residual)
// and calls tile(GemmTile, epilogue) for the region.
template <class TileFn>
void run_prepared_gemm(std::string_view variant, const TileArgs& args, int64_t m, int64_t k,
                       int64_t n, const PreparedGemmC& c, TileFn&& tile) {
  const bool has_residual = args.op && args.op->attrs.fused_residual;
  check_dense_tile_args(variant, args, has_residual ? 4 : 2, has_residual ? 4 : 3,
                        /*needs_prepared=*/true);
  const graph::Shape& a_shape = *args.inputs[0].shape;
  if (a_shape != graph::Shape{m, k} || *args.output.shape != graph::Shape{m, n})
    fail_op(variant, args.op,
            "shapes differ from the prepared ones (A " + graph::shape_to_string(a_shape) + ", Y " +
                graph::shape_to_string(*args.output.shape) + ")");
  if ((c.form != PreparedGemmC::Form::kNone) != (args.input_count >= 3))
    fail_op(variant, args.op, "C present at prepare time but not now, or the reverse");
  // The fused residual (input 3, [M, N]); gemm_applies() ruled out a full
  // [M, N] C beside it, which would take the same epilogue slot.
  const float* residual = has_residual ? args.inputs[3].data : nullptr;
  if (residual &&
      (*args.inputs[3].shape != graph::Shape{m, n} || c.form == PreparedGemmC::Form::kFull))
    fail_op(variant, args.op,
            "fused residual " + graph::shape_to_string(*args.inputs[3].shape) +
                " is not [M, N], or C is [M, N] too");
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const graph::OpAttributes& attrs = args.op->attrs;
  GemmEpilogue ep = activation_epilogue(attrs);
  if (c.form == PreparedGemmC::Form::kPerColumn || c.form == PreparedGemmC::Form::kPerRow) {
    ep.bias = c.scaled.data();
    ep.bias_kind =
        c.form == PreparedGemmC::Form::kPerColumn ? GemmBias::kPerColumn : GemmBias::kPerRow;
  } else if (c.form == PreparedGemmC::Form::kFull) {
    ep.residual = c.scaled.data();
    ep.ld_residual = n;
  }
  if (residual) {
    ep.residual = residual;
    ep.ld_residual = n;
  }
  tile(GemmTile{.m0 = r.begin[0], .m1 = r.end[0], .n0 = r.begin[1], .n1 = r.end[1]}, ep);
}

}  // namespace tessera::kernels::cpu
