// "cpu.attention": FusedAttention (graph/fuse_attention.hpp) a block of query
// rows at a time. For each batch index of the tile, KT and V are packed once
// (pack_b); for each block of R rows the scores Q·KT go to a per-thread
// buffer of about 256 KiB (in L2), each row is scaled, masked and normalised
// there by the VectorOps softmax that cpu.softmax runs, and the block times V
// is written to Y. Unfused, a sequence of 1024 tokens wrote its 4 MiB of
// scores per head to memory and read them back twice (the Softmax, then
// P·V).
#include <algorithm>
#include <vector>

#include "graph/op_shape.hpp"
#include "kernels/cpu/aligned_scratch.hpp"
#include "kernels/cpu/dense_ops.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr std::string_view kAttention = "cpu.attention";

// Floats of scores per row block: a quarter of the 2 MiB L2 per core, beside
// the packed KT and V it is multiplied with.
constexpr int64_t kScoreBlockFloats = 64 * 1024;

}  // namespace

std::optional<std::string> attention_applies(const graph::Operator& op,
                                             std::span<const ConstTensorView> inputs) {
  if (op.type != graph::OpType::FusedAttention)
    return std::string("cpu.attention runs FusedAttention only");
  if (inputs.size() < 3 || inputs.size() > 4)
    return std::string("needs Q, K^T, V and an optional mask");
  const graph::Shape& q = *inputs[0].shape;
  if (q.size() < 2) return "Q " + graph::shape_to_string(q) + " has rank < 2";
  return std::nullopt;
}

void attention(const TileArgs& args) {
  check_dense_tile_args(kAttention, args, 3, 4, /*needs_prepared=*/false);
  if (auto why = attention_applies(*args.op, {args.inputs, args.input_count}))
    fail_op(kAttention, args.op, *why);
  const graph::Shape& q_shape = *args.inputs[0].shape;
  const graph::Shape& kt_shape = *args.inputs[1].shape;
  const graph::Shape& v_shape = *args.inputs[2].shape;
  const size_t rank = q_shape.size();
  if (!graph::attention_operands_fit(q_shape, kt_shape, v_shape))
    fail_op(kAttention, args.op,
            "Q " + graph::shape_to_string(q_shape) + ", K^T " + graph::shape_to_string(kt_shape) +
                " and V " + graph::shape_to_string(v_shape) +
                " are not [..., M, D], [..., D, S], [..., S, DV]");
  const int64_t m = q_shape[rank - 2], d = q_shape[rank - 1], s = kt_shape[rank - 1];
  const int64_t dv = v_shape[rank - 1];
  graph::Shape expected = q_shape;
  expected.back() = dv;
  if (*args.output.shape != expected)
    fail_op(kAttention, args.op,
            "output " + graph::shape_to_string(*args.output.shape) + " is not " +
                graph::shape_to_string(expected));
  graph::Shape scores_shape = q_shape;
  scores_shape.back() = s;
  const float* mask = args.input_count == 4 ? args.inputs[3].data : nullptr;
  if (mask && !graph::broadcasts_to(*args.inputs[3].shape, scores_shape))
    fail_op(kAttention, args.op,
            "mask " + graph::shape_to_string(*args.inputs[3].shape) +
                " does not broadcast to the scores " + graph::shape_to_string(scores_shape));
  const graph::Region& r = *args.region;
  if (r.empty()) return;
  const int64_t m0 = r.begin[rank - 2], m1 = r.end[rank - 2];
  const int64_t n0 = r.begin[rank - 1], n1 = r.end[rank - 1];
  float* y = args.output.data;
  if (s == 0) {  // no scores: each output is an empty sum
    for_each_batch_index(r, rank - 2, [&](const std::vector<int64_t>& index) {
      int64_t flat = 0;
      for (size_t i = 0; i < index.size(); ++i) flat = flat * q_shape[i] + index[i];
      for (int64_t i = m0; i < m1; ++i)
        std::fill(y + (flat * m + i) * dv + n0, y + (flat * m + i) * dv + n1, 0.0f);
    });
    return;
  }
  const float alpha = args.op->attrs.alpha;
  const bool scaled_or_masked = mask || alpha != 1.0f;
  const std::vector<int64_t> mask_strides =
      mask ? reference::broadcast_strides(*args.inputs[3].shape, scores_shape)
           : std::vector<int64_t>(rank, 0);
  const int64_t mask_step = mask_strides[rank - 1];
  const int64_t block_rows = std::clamp<int64_t>(kScoreBlockFloats / s, 1, m1 - m0);
  thread_local AlignedScratch scores_scratch, row_scratch;
  float* scores = scores_scratch.at_least(block_rows * s);
  float* z = row_scratch.at_least(s);
  const VectorOps& ops = vector_ops();
  for_each_batch_index(r, rank - 2, [&](const std::vector<int64_t>& index) {
    int64_t flat = 0, mask_base = 0;
    for (size_t i = 0; i < index.size(); ++i) {
      flat = flat * q_shape[i] + index[i];
      mask_base += index[i] * mask_strides[i];
    }
    // The default microkernel, as cpu.matmul_batched packs for: each sum then
    // runs the same chain of FMAs as the unfused MatMuls', the same bits.
    const PackedMatrix kt = pack_b(args.inputs[1].data + flat * d * s, d, s, s, false);
    const PackedMatrix v = pack_b(args.inputs[2].data + flat * s * dv, s, dv, dv, false);
    for (int64_t b0 = m0; b0 < m1; b0 += block_rows) {
      const int64_t rows = std::min(block_rows, m1 - b0);
      gemm_tile(args.inputs[0].data + (flat * m + b0) * d, d, kt, scores, s,
                {.m0 = 0, .m1 = rows, .n0 = 0, .n1 = s}, GemmEpilogue{});
      for (int64_t i = 0; i < rows; ++i) {
        float* row = scores + i * s;
        if (scaled_or_masked)
          ops.scaled_masked_softmax_row(
              row, alpha, mask ? mask + mask_base + (b0 + i) * mask_strides[rank - 2] : nullptr,
              mask_step, z, row, s, 0, s);
        else
          ops.softmax_row(row, row, s);
      }
      gemm_tile(scores, s, v, y + (flat * m + b0) * dv, dv,
                {.m0 = 0, .m1 = rows, .n0 = n0, .n1 = n1}, GemmEpilogue{});
    }
  });
}

}  // namespace tessera::kernels::cpu
