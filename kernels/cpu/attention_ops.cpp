// "cpu.attention": FusedAttention (graph/fuse_attention.hpp) a block of query
// rows at a time. For each batch index of the tile, KT and V are packed once
// (pack_b); for each block of R rows the scores Q·KT go to a per-thread
// buffer of about 256 KiB (in L2), each row is scaled, masked and normalised
// there by the VectorOps softmax that cpu.softmax runs, and the block times V
// is written to Y. Unfused, a sequence of 1024 tokens wrote its 4 MiB of
// scores per head to memory and read them back twice (the Softmax, then
// P·V). Columns a mask zeroes for every row of a block (a causal mask's
// upper triangle: half of GPT-2's attention) are neither computed nor
// multiplied (live_columns). A constant mask whose rows are each a run of
// zeros and then one fill value far below any score (GPT-2's causal mask)
// is read once, at prepare (MaskPrefixes): each row's softmax then runs
// over its own zero run with no mask loads, and its masked columns are
// stored as the zeros the masked softmax would give them.
#include <algorithm>
#include <cmath>
#include <limits>
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

// The largest |x[i]| over n floats; infinity if any is infinite or NaN.
// (No early exit: the loop vectorises.)
float max_abs(const float* x, int64_t n) {
  float m = 0.0f;
  int not_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m = m < a ? a : m;
    not_finite |= !(a <= std::numeric_limits<float>::max());
  }
  return not_finite ? std::numeric_limits<float>::infinity() : m;
}

// Whether every x[i * step], i < n, is below `below` (NaN is not).
bool all_below(const float* x, int64_t n, int64_t step, float below) {
  int above = 0;
  if (step == 1)
    for (int64_t i = 0; i < n; ++i) above |= !(x[i] < below);  // vectorises
  else
    for (int64_t i = 0; i < n; ++i) above |= !(x[i * step] < below);
  return above == 0;
}

// The columns [0, returned) of a block of rows that can change its softmax.
// Past them every mask value of every row lies so far below the row's
// first one that, whatever the scores (|alpha · q·k| <= z_bound), the
// softmax input sits more than 87 below the row's maximum (at least the
// first column's input), where its exp is exactly 0
// (exp_nonpositive_or_zero): such a column adds +0 to the row's sum and
// nothing to the output. GPT-2's causal mask (float's lowest above the
// diagonal) leaves a block of rows [r0, r1) its first r1 columns; a
// BERT-style padding mask, the unpadded ones. row(i) is row i's first mask
// value, `step` apart. Rows last first: a causal block's last row has the
// most columns, and the others are then only checked past them.
template <class Row, class ZBound>
int64_t live_columns(Row&& row, int64_t rows, int64_t step, int64_t s, ZBound&& z_bound_of_scores) {
  if (step == 0 || rows == 0) return s;
  // Nothing to skip unless the last row ends far below its first value
  // (no bound on the scores needed to see that: BERT's unpadded rows).
  const float* last = row(rows - 1);
  if (!(static_cast<double>(last[(s - 1) * step]) < static_cast<double>(last[0]) - 88.0)) return s;
  const double z_bound = z_bound_of_scores();
  if (!(z_bound < 1e30)) return s;
  int64_t live = 0;
  for (int64_t i = rows - 1; i >= 0 && live < s; --i) {
    const float* mask = row(i);
    // Skipped where m + z_bound < first - z_bound - 88, with each float's
    // rounding (|x| · 2^-23) as slack: m below `below` in float.
    const double first = mask[0];
    const double bound = first - std::fabs(first) * 1e-6 - 2.0 * z_bound - 88.0;
    if (!(bound < 0.0)) return s;
    const float below = static_cast<float>(bound * (1.0 + 1e-6));
    if (live > 0 && all_below(mask + live * step, s - live, step, below)) continue;
    int64_t j = s;
    while (j > live && mask[(j - 1) * step] < below) --j;
    live = std::max(live, j);
  }
  return live;
}

// A constant mask that is, in each row r of its [M, S] plane, live[r] >= 1
// zeros and then the fill (at most -1e30, or -inf) to the end: GPT-2's
// causal mask, torch.where(causal, scores, finfo.min) folded into an
// additive mask (graph/fuse_softmax_input.hpp). Empty `live` otherwise.
struct MaskPrefixes {
  std::vector<int64_t> live;
  float fill = 0.0f;
};

MaskPrefixes mask_prefixes(const float* mask, const graph::Shape& shape) {
  MaskPrefixes none, p;
  const size_t rank = shape.size();
  if (!mask || rank < 2) return none;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (shape[i] != 1) return none;  // one plane for every head
  const int64_t rows = shape[rank - 2], s = shape[rank - 1];
  p.live.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = mask + r * s;
    int64_t j = 0;
    while (j < s && row[j] == 0.0f) ++j;
    if (j == 0) return none;
    if (j < s) {
      if (p.fill == 0.0f) p.fill = row[j];
      if (!(p.fill <= -1e30f)) return none;
      for (int64_t k = j; k < s; ++k)
        if (row[k] != p.fill) return none;
    }
    p.live[static_cast<size_t>(r)] = j;
  }
  if (p.fill == 0.0f) return none;  // all zeros: nothing to skip
  return p;
}

}  // namespace

PreparedOp prepare_attention(const graph::Operator& op, std::span<const ConstTensorView> inputs) {
  (void)op;
  auto prefixes = std::make_shared<MaskPrefixes>();
  if (inputs.size() != 4 || !inputs[3].data || !inputs[0].shape || !inputs[1].shape ||
      !inputs[3].shape)
    return prefixes;
  // A plane of the scores' own [M, S], not one broadcast along either.
  const graph::Shape &q = *inputs[0].shape, &kt = *inputs[1].shape, &mask = *inputs[3].shape;
  if (q.size() < 2 || kt.size() < 2 || mask.size() < 2 ||
      mask[mask.size() - 2] != q[q.size() - 2] || mask.back() != kt.back())
    return prefixes;
  *prefixes = mask_prefixes(inputs[3].data, mask);
  return prefixes;
}

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
  const bool nan_to_zero = args.op->attrs.nan_probabilities_to_zero;
  const std::vector<int64_t> mask_strides =
      mask ? reference::broadcast_strides(*args.inputs[3].shape, scores_shape)
           : std::vector<int64_t>(rank, 0);
  const int64_t mask_step = mask_strides[rank - 1];
  const int64_t block_rows = std::clamp<int64_t>(kScoreBlockFloats / s, 1, m1 - m0);
  // The mask's zero runs, where prepare found them (the mask's plane is then
  // [m, s], one for every batch index).
  const auto* prepared = static_cast<const MaskPrefixes*>(args.prepared);
  const std::vector<int64_t>* prefixes =
      mask && prepared && static_cast<int64_t>(prepared->live.size()) == m ? &prepared->live
                                                                           : nullptr;
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
    const float* q_head = args.inputs[0].data + flat * m * d;
    const float* kt_head = args.inputs[1].data + flat * d * s;
    const float* v_head = args.inputs[2].data + flat * s * dv;
    thread_local PackedMatrix kt, v;  // this thread's, repacked per head
    pack_b_into(kt, kt_head, d, s, s, false, gemm_default_microkernel());
    pack_b_into(v, v_head, s, dv, dv, false, gemm_default_microkernel());
    // |scores| <= d · max|q| · max|k| (with slack for the sums' rounding);
    // computed once per head, and only where a mask may let columns go.
    // Infinite (nothing skipped) where V is not finite: there the unfused
    // P·V's 0 · inf makes the NaN this must not hide.
    double z_bound = -1.0;
    auto z_bound_of_scores = [&] {
      if (z_bound < 0.0)
        z_bound = std::fabs(static_cast<double>(alpha)) * static_cast<double>(d) *
                  static_cast<double>(max_abs(q_head + m0 * d, (m1 - m0) * d)) *
                  static_cast<double>(max_abs(kt_head, d * s)) *
                  (std::isinf(max_abs(v_head, s * dv)) ? HUGE_VAL : 1.001);
      return z_bound;
    };
    // The zero runs stand for the mask where every score past them gets an
    // exp of exactly 0 from the masked softmax: fill + z_bound more than 88
    // below -z_bound (live_columns' test, with the first column a zero).
    const bool use_prefixes =
        prefixes && z_bound_of_scores() < 1e30 &&
        static_cast<double>(prepared->fill) < (-2.0 * z_bound_of_scores() - 88.0) * (1.0 + 1e-6);
    for (int64_t b0 = m0; b0 < m1; b0 += block_rows) {
      const int64_t rows = std::min(block_rows, m1 - b0);
      auto mask_row = [&](int64_t i) {
        return mask + mask_base + (b0 + i) * mask_strides[rank - 2];
      };
      if (use_prefixes) {
        // Row i's softmax over its zero run: the masked softmax's bits there
        // (alpha·x + 0 is alpha·x; the masked exps it adds are +0), and the
        // zeros it gives the rest of the block's columns.
        const int64_t* run = prefixes->data() + b0;
        const int64_t live = *std::max_element(run, run + rows);
        gemm_tile(q_head + b0 * d, d, kt, scores, s, {.m0 = 0, .m1 = rows, .n0 = 0, .n1 = live},
                  GemmEpilogue{});
        for (int64_t i = 0; i < rows; ++i) {
          float* row = scores + i * s;
          ops.scaled_masked_softmax_row(row, alpha, nullptr, 0, z, row, run[i], 0, run[i]);
          if (nan_to_zero)
            for (int64_t j = 0; j < run[i]; ++j) row[j] = std::isnan(row[j]) ? 0.0f : row[j];
          std::fill(row + run[i], row + live, 0.0f);
        }
        gemm_tile_leading_rows(scores, s, v, live, y + (flat * m + b0) * dv, dv,
                               {.m0 = 0, .m1 = rows, .n0 = n0, .n1 = n1});
        continue;
      }
      // Columns past `live` are exactly 0 after the softmax: not computed.
      // The output's bits are the whole row's wherever P·V runs as one K
      // slice both ways (S up to 1.25 · kc, 1280 for the default kernels);
      // past that the slices may split elsewhere and round differently.
      const int64_t live = mask ? live_columns(mask_row, rows, mask_step, s, z_bound_of_scores) : s;
      gemm_tile(q_head + b0 * d, d, kt, scores, s, {.m0 = 0, .m1 = rows, .n0 = 0, .n1 = live},
                GemmEpilogue{});
      for (int64_t i = 0; i < rows; ++i) {
        float* row = scores + i * s;
        if (scaled_or_masked)
          ops.scaled_masked_softmax_row(row, alpha, mask ? mask_row(i) : nullptr, mask_step, z, row,
                                        live, 0, live);
        else
          ops.softmax_row(row, row, live);
        // The NaN guard taken in (a row of NaN or all -inf scores).
        if (nan_to_zero)
          for (int64_t j = 0; j < live; ++j) row[j] = std::isnan(row[j]) ? 0.0f : row[j];
      }
      gemm_tile_leading_rows(scores, s, v, live, y + (flat * m + b0) * dv, dv,
                             {.m0 = 0, .m1 = rows, .n0 = n0, .n1 = n1});
    }
  });
}

}  // namespace tessera::kernels::cpu
