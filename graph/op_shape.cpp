// Per-op shape functions with ONNX semantics. Every attribute a kernel indexes
// or loops over is validated here, so that a corrupt model or .tess file is
// rejected with a message instead of making a kernel read out of bounds.
#include "graph/op_shape.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/error.hpp"

namespace tessera::graph {
namespace {

// Bounds that keep every size computation below far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxNumel = int64_t{1} << 48;

[[noreturn]] void fail(const Operator& op, const std::string& what) {
  throw Error(std::string(op_type_name(op.type)) + " '" + op.name + "': " + what);
}

void check_shape(const Operator& op, const Shape& s, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 1 || d > kMaxDim)
      fail(op, what + " has dimension " + std::to_string(d) + " in " + shape_to_string(s) +
                   " (dimensions must be between 1 and 2^40)");
    n *= d;
    if (n > kMaxNumel) fail(op, what + " " + shape_to_string(s) + " has too many elements");
  }
}

void check_input_count(const Operator& op, const std::vector<Shape>& in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi) {
    std::string want =
        lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi);
    fail(op, "expects " + want + " inputs, got " + std::to_string(in.size()));
  }
  for (size_t i = 0; i < in.size(); ++i) check_shape(op, in[i], "input " + std::to_string(i));
}

void check_rank(const Operator& op, const Shape& s, size_t rank, const std::string& what) {
  if (s.size() != rank)
    fail(op, what + " must have rank " + std::to_string(rank) + ", got " + shape_to_string(s));
}

// Multidirectional (numpy) broadcast of two shapes; nullopt-like failure via throw.
Shape broadcast_shapes(const Operator& op, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                   " cannot be broadcast together");
    out[i] = std::max(da, db);
  }
  return out;
}

// Spatial attributes shared by Conv and the pools (2-D, NCHW). Returns the
// output spatial sizes.
std::vector<int64_t> spatial_output(const Operator& op, const Shape& x, bool ceil_mode,
                                    bool require_tap_in_window) {
  const OpAttributes& a = op.attrs;
  constexpr size_t kSpatial = 2;
  if (a.kernel_shape.size() != kSpatial)
    fail(op, "kernel_shape must have 2 entries, got " + std::to_string(a.kernel_shape.size()));
  if (a.strides.size() != kSpatial)
    fail(op, "strides must have 2 entries, got " + std::to_string(a.strides.size()));
  if (a.dilations.size() != kSpatial)
    fail(op, "dilations must have 2 entries, got " + std::to_string(a.dilations.size()));
  if (a.pads.size() != 2 * kSpatial)
    fail(op, "pads must have 4 entries, got " + std::to_string(a.pads.size()));
  std::vector<int64_t> out(kSpatial);
  for (size_t i = 0; i < kSpatial; ++i) {
    int64_t k = a.kernel_shape[i], s = a.strides[i], d = a.dilations[i];
    int64_t pb = a.pads[i], pe = a.pads[i + kSpatial];
    if (k < 1 || k > kMaxDim)
      fail(op, "kernel_shape entries must be >= 1, got " + std::to_string(k));
    if (s < 1 || s > kMaxDim) fail(op, "strides must be >= 1, got " + std::to_string(s));
    if (d < 1 || d > kMaxDim) fail(op, "dilations must be >= 1, got " + std::to_string(d));
    if (pb < 0 || pe < 0 || pb > kMaxDim || pe > kMaxDim)
      fail(op, "pads must be >= 0, got " + std::to_string(pb) + "," + std::to_string(pe));
    int64_t h = x[2 + i];
    // (k - 1) * d could overflow for hostile values; no valid extent exceeds
    // the padded input (< 3 * 2^40).
    if (k > 1 && d > (4 * kMaxDim) / (k - 1))
      fail(op,
           "kernel extent is larger than the padded input along spatial dim " + std::to_string(i));
    int64_t extent = (k - 1) * d + 1;
    int64_t span = h + pb + pe - extent;
    if (span < 0)
      fail(op, "kernel extent " + std::to_string(extent) + " is larger than the padded input " +
                   std::to_string(h + pb + pe) + " along spatial dim " + std::to_string(i));
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // ONNX: with ceil_mode the last window must start inside the input or
    // the left padding.
    if (ceil_mode && (o - 1) * s >= h + pb) o -= 1;
    if (require_tap_in_window) {
      // A pool window lying entirely in padding has nothing to reduce
      // (AveragePool would divide by zero).
      // A window starting inside the input reads its first tap; one starting
      // past it reads nothing (only the last can, as starts increase); one
      // starting in the left padding is checked tap-wise in O(1).
      if ((o - 1) * s - pb >= h)
        fail(op, "output position " + std::to_string(o - 1) + " along spatial dim " +
                     std::to_string(i) + " has a window that lies entirely in the padding");
      for (int64_t p = 0; p < o && p * s - pb < 0; ++p) {
        int64_t start = p * s - pb;
        int64_t first_tap = (-start + d - 1) / d;  // first tap index landing at >= 0
        bool hit = first_tap < k && start + first_tap * d < h;
        if (!hit)
          fail(op, "output position " + std::to_string(p) + " along spatial dim " +
                       std::to_string(i) + " has a window that lies entirely in the padding");
      }
    }
    out[i] = o;
  }
  return out;
}

Shape conv_transpose_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 2, 3);
  const Shape& x = in[0];
  const Shape& w = in[1];
  check_rank(op, x, 4, "input X");
  check_rank(op, w, 4, "weight W");
  const OpAttributes& a = op.attrs;
  if (a.kernel_shape.size() != 2 || a.strides.size() != 2 || a.dilations.size() != 2 ||
      a.pads.size() != 4)
    fail(op, "needs 2-D kernel_shape, strides, dilations and 4 pads");
  if (a.group < 1 || x[1] % a.group != 0 || w[0] != x[1])
    fail(op, "weight " + shape_to_string(w) + " does not fit input channels " +
                 std::to_string(x[1]) + " in " + std::to_string(a.group) + " group(s)");
  if (a.kernel_shape[0] != w[2] || a.kernel_shape[1] != w[3])
    fail(op, "kernel_shape does not match weight shape " + shape_to_string(w));
  const int64_t m = w[1] * a.group;
  if (in.size() == 3 && in[2] != Shape{m})
    fail(op, "bias must have shape [" + std::to_string(m) + "], got " + shape_to_string(in[2]));
  Shape out = {x[0], m, 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    const int64_t s = a.strides[i], d = a.dilations[i];
    if (s < 1 || d < 1) fail(op, "strides and dilations must be >= 1");
    out[2 + i] = (x[2 + i] - 1) * s - a.pads[i] - a.pads[2 + i] + d * (a.kernel_shape[i] - 1) + 1;
    if (out[2 + i] < 1)
      fail(op, "output dim " + std::to_string(2 + i) + " would be " + std::to_string(out[2 + i]));
  }
  return out;
}

Shape conv_shape(const Operator& op, const std::vector<Shape>& in) {
  // A fused residual (graph/fuse_residual.hpp) is input 3, a fused input
  // scale (graph/fuse_input_scale.hpp) the last input, the bias then always
  // present.
  const InputCount count = conv_input_count(op.attrs);
  check_input_count(op, in, count.min, count.max);
  if (op.attrs.fused_input_scale) {
    const Shape& s = in.back();
    if (in[0].size() != 4 || s.size() != 4 || (s[0] != in[0][0] && s[0] != 1) || s[1] != in[0][1] ||
        s[2] != 1 || s[3] != 1)
      fail(op, "fused input scale " + shape_to_string(s) + " is not [N or 1, C, 1, 1] of X " +
                   shape_to_string(in[0]));
    if (op.attrs.group != 1 || in[1].size() != 4 || in[1][2] != 1 || in[1][3] != 1)
      fail(op, "a fused input scale needs a 1x1 conv with group 1");
  }
  // A fused expansion (graph/fuse_expand_depthwise.hpp): the depthwise conv
  // reads EW's C channels, computed from X's Cin at the same pixels.
  Shape expanded;
  if (op.attrs.fused_expand) {
    const size_t e = expand_weight_input(op.attrs);
    const Shape& ew = in[e];
    const Shape& eb = in[e + 1];
    check_rank(op, in[0], 4, "input X");
    if (ew.size() != 4 || ew[1] != in[0][1] || ew[2] != 1 || ew[3] != 1 || eb != Shape{ew[0]})
      fail(op, "fused expansion weight " + shape_to_string(ew) + " and bias " +
                   shape_to_string(eb) + " are not [C, " + std::to_string(in[0][1]) +
                   ", 1, 1] and [C]");
    if (op.attrs.group != ew[0] || in[1].size() != 4 || in[1][0] != ew[0] || in[1][1] != 1)
      fail(op, "a fused expansion needs a depthwise conv over its " + std::to_string(ew[0]) +
                   " channels");
    if (op.attrs.fused_input_scale) fail(op, "has both a fused expansion and an input scale");
    expanded = {in[0][0], ew[0], in[0][2], in[0][3]};
  }
  const Shape& x = op.attrs.fused_expand ? expanded : in[0];
  const Shape& w = in[1];
  check_rank(op, x, 4, "input X");
  check_rank(op, w, 4, "weight W");
  const OpAttributes& a = op.attrs;
  if (a.group < 1 || a.group > x[1])
    fail(op, "group must be >= 1 and <= the input channels, got " + std::to_string(a.group));
  int64_t m = w[0];
  if (x[1] != w[1] * a.group)
    fail(op, "input channels " + std::to_string(x[1]) + " != weight channels " +
                 std::to_string(w[1]) + " * group " + std::to_string(a.group));
  if (m % a.group != 0)
    fail(op, "output channels " + std::to_string(m) + " not divisible by group " +
                 std::to_string(a.group));
  if (a.kernel_shape.size() == 2 && (a.kernel_shape[0] != w[2] || a.kernel_shape[1] != w[3]))
    fail(op, "kernel_shape does not match weight shape " + shape_to_string(w));
  if (in.size() >= 3 && (in[2].size() != 1 || in[2][0] != m))
    fail(op, "bias must have shape [" + std::to_string(m) + "], got " + shape_to_string(in[2]));
  auto hw = spatial_output(op, x, false, false);
  Shape out = {x[0], m, hw[0], hw[1]};
  if (op.attrs.fused_residual && in[3] != out)
    fail(op, "fused residual " + shape_to_string(in[3]) + " differs from the output shape " +
                 shape_to_string(out));
  return out;
}

Shape pool_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  check_rank(op, in[0], 4, "input X");
  auto hw = spatial_output(op, in[0], op.attrs.ceil_mode, true);
  return {in[0][0], in[0][1], hw[0], hw[1]};
}

// A fused residual (graph/fuse_residual.hpp) of a Gemm or MatMul is input 3,
// with input 2 (C or the bias) always present, and has the output's shape.
void check_fused_residual(const Operator& op, const std::vector<Shape>& in, const Shape& out) {
  if (op.attrs.fused_residual && in[3] != out)
    fail(op, "fused residual " + shape_to_string(in[3]) + " is not the output's shape " +
                 shape_to_string(out));
}

// The inputs without a fused residual (input 3).
std::vector<Shape> without_residual(const Operator& op, const std::vector<Shape>& in) {
  if (!op.attrs.fused_residual) return in;
  check_input_count(op, in, 4, 4);
  return {in.begin(), in.end() - 1};
}

Shape gemm_shape(const Operator& op, const std::vector<Shape>& all_inputs) {
  const std::vector<Shape> in = without_residual(op, all_inputs);
  check_input_count(op, in, 2, 3);
  check_rank(op, in[0], 2, "input A");
  check_rank(op, in[1], 2, "input B");
  const OpAttributes& a = op.attrs;
  int64_t m = a.trans_a ? in[0][1] : in[0][0];
  int64_t ka = a.trans_a ? in[0][0] : in[0][1];
  int64_t kb = a.trans_b ? in[1][1] : in[1][0];
  int64_t n = a.trans_b ? in[1][0] : in[1][1];
  if (ka != kb)
    fail(op, "inner dimensions differ: A " + shape_to_string(in[0]) + " B " +
                 shape_to_string(in[1]) + " (trans_a=" + std::to_string(a.trans_a) +
                 ", trans_b=" + std::to_string(a.trans_b) + ")");
  if (in.size() == 3) {
    const Shape& c = in[2];
    if (c.size() > 2) fail(op, "C must have rank <= 2, got " + shape_to_string(c));
    Shape full = {m, n};
    for (size_t i = 0; i < c.size(); ++i) {
      int64_t want = full[2 - c.size() + i];
      if (c[i] != 1 && c[i] != want)
        fail(op, "C " + shape_to_string(c) + " is not broadcastable to [" + std::to_string(m) +
                     "," + std::to_string(n) + "]");
    }
  }
  check_fused_residual(op, all_inputs, {m, n});
  return {m, n};
}

Shape matmul_shape(const Operator& op, const std::vector<Shape>& all_inputs) {
  // Input 2, when present, is a fused per-column bias (graph/fuse_matmul_bias.hpp).
  const std::vector<Shape> in = without_residual(op, all_inputs);
  check_input_count(op, in, 2, 3);
  if (in.size() == 3 && (in[0].size() < 2 || in[1].size() != 2 || in[2] != Shape{in[1].back()}))
    fail(op, "a fused bias needs A of rank >= 2, a 2-D B and a bias of shape [" +
                 (in[1].empty() ? std::string("N") : std::to_string(in[1].back())) + "], got A " +
                 shape_to_string(in[0]) + ", B " + shape_to_string(in[1]) + ", bias " +
                 shape_to_string(in[2]));
  Shape a = in[0], b = in[1];
  if (a.empty() || b.empty()) fail(op, "operands must have rank >= 1");
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    fail(op, "inner dimensions differ: " + shape_to_string(in[0]) + " x " + shape_to_string(in[1]));
  Shape batch = broadcast_shapes(op, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape out = batch;
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  check_fused_residual(op, all_inputs, out);
  return out;
}

// graph/fuse_attention.hpp: Q [..., M, D], KT [..., D, S], V [..., S, DV],
// the same leading dims, and a mask broadcasting to the scores [..., M, S].
Shape attention_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 3, 4);
  const Shape &q = in[0], &kt = in[1], &v = in[2];
  if (!attention_operands_fit(q, kt, v))
    fail(op, "Q " + shape_to_string(q) + ", K^T " + shape_to_string(kt) + " and V " +
                 shape_to_string(v) + " are not [..., M, D], [..., D, S], [..., S, DV]");
  Shape scores = q;
  scores.back() = kt.back();
  if (in.size() == 4 && !broadcasts_to(in[3], scores))
    fail(op, "mask " + shape_to_string(in[3]) + " does not broadcast to the scores " +
                 shape_to_string(scores));
  Shape out = q;
  out.back() = v.back();
  return out;
}

Shape flatten_or_reshape_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const Shape& ns = op.attrs.new_shape;
  if (ns.empty()) fail(op, "new_shape is empty");
  check_shape(op, ns, "new_shape");
  if (shape_numel(ns) != shape_numel(in[0]))
    fail(op, "new_shape " + shape_to_string(ns) + " has a different element count than input " +
                 shape_to_string(in[0]));
  if (op.type == OpType::Flatten) {
    int64_t axis = op.attrs.axis;
    if (axis < 0 || axis > static_cast<int64_t>(in[0].size()))
      fail(op, "axis " + std::to_string(axis) + " out of range for rank " +
                   std::to_string(in[0].size()));
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= in[0][i];
    if (ns.size() != 2 || ns[0] != outer)
      fail(op, "new_shape " + shape_to_string(ns) + " does not match flattening " +
                   shape_to_string(in[0]) + " at axis " + std::to_string(axis));
  }
  return ns;
}

Shape concat_shape(const Operator& op, const std::vector<Shape>& in) {
  if (in.empty()) fail(op, "expects at least 1 input");
  check_input_count(op, in, 1, in.size());
  size_t rank = in[0].size();
  int64_t axis = op.attrs.axis;
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    fail(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  Shape out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].size() != rank)
      fail(op, "input " + std::to_string(i) + " " + shape_to_string(in[i]) +
                   " has a different rank than input 0 " + shape_to_string(in[0]));
    for (size_t d = 0; d < rank; ++d) {
      if (static_cast<int64_t>(d) == axis) continue;
      if (in[i][d] != in[0][d])
        fail(op, "input " + std::to_string(i) + " " + shape_to_string(in[i]) +
                     " differs from input 0 " + shape_to_string(in[0]) + " outside the axis");
    }
    out[axis] += in[i][axis];
  }
  check_shape(op, out, "output");
  return out;
}

Shape softmax_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 2);
  int64_t axis = op.attrs.axis;
  if (axis < 0 || axis >= static_cast<int64_t>(in[0].size()))
    fail(op,
         "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(in[0].size()));
  // A fused mask (graph/fuse_softmax_input.hpp) broadcasts to X and leaves its shape.
  if (in.size() == 2 && broadcast_shapes(op, in[0], in[1]) != in[0])
    fail(op,
         "mask " + shape_to_string(in[1]) + " does not broadcast to X " + shape_to_string(in[0]));
  return in[0];
}

Shape batch_norm_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 5, 5);
  const Shape& x = in[0];
  if (x.size() < 2) fail(op, "input X must have rank >= 2, got " + shape_to_string(x));
  static const char* kNames[] = {"", "scale", "B", "mean", "var"};
  for (size_t i = 1; i < 5; ++i)
    if (in[i].size() != 1 || in[i][0] != x[1])
      fail(op, std::string(kNames[i]) + " must have shape [" + std::to_string(x[1]) + "], got " +
                   shape_to_string(in[i]));
  if (!(op.attrs.epsilon >= 0.0f)) fail(op, "epsilon must be >= 0");
  return x;
}

Shape transpose_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const size_t rank = in[0].size();
  const auto& perm = op.attrs.perm;
  if (perm.size() != rank)
    fail(op, "perm has " + std::to_string(perm.size()) + " entries for an input of rank " +
                 std::to_string(rank));
  std::vector<bool> seen(rank, false);
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t p = perm[i];
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(p)])
      fail(op, "perm is not a permutation of the " + std::to_string(rank) + " input dims");
    seen[static_cast<size_t>(p)] = true;
    out[i] = in[0][static_cast<size_t>(p)];
  }
  return out;
}

Shape gather_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 2);
  const Shape& data = in[0];
  const int64_t axis = op.attrs.axis;
  if (axis < 0 || axis >= static_cast<int64_t>(data.size()))
    fail(op, "axis " + std::to_string(axis) + " out of range for data of rank " +
                 std::to_string(data.size()));
  Shape indices_shape;
  if (in.size() == 2) {
    if (!op.attrs.indices.empty() || !op.attrs.indices_shape.empty())
      fail(op, "has both an indices input and constant indices");
    indices_shape = in[1];
  } else {
    indices_shape = op.attrs.indices_shape;
    check_shape(op, indices_shape, "indices_shape");
    if (static_cast<int64_t>(op.attrs.indices.size()) != shape_numel(indices_shape))
      fail(op, "has " + std::to_string(op.attrs.indices.size()) + " constant indices for shape " +
                   shape_to_string(indices_shape));
    const int64_t n = data[static_cast<size_t>(axis)];
    for (int64_t i : op.attrs.indices)
      if (i < -n || i >= n)
        fail(op, "index " + std::to_string(i) + " is out of range for axis " +
                     std::to_string(axis) + " of size " + std::to_string(n));
  }
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), indices_shape.begin(), indices_shape.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  check_shape(op, out, "output");
  return out;
}

Shape where_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 3, 3);
  return broadcast_shapes(op, broadcast_shapes(op, in[0], in[1]), in[2]);
}

Shape expand_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const Shape& ns = op.attrs.new_shape;
  if (ns.empty()) fail(op, "new_shape is empty");
  check_shape(op, ns, "new_shape");
  if (in[0].size() > ns.size() || broadcast_shapes(op, in[0], ns) != ns)
    fail(op, "input " + shape_to_string(in[0]) + " does not broadcast to new_shape " +
                 shape_to_string(ns));
  return ns;
}

Shape reduction_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const auto& axes = op.attrs.axes;
  const auto rank = static_cast<int64_t>(in[0].size());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= rank || (i > 0 && axes[i] <= axes[i - 1]))
      fail(op, "axes must be sorted, unique and in [0, " + std::to_string(rank) + ")");
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      out.push_back(in[0][static_cast<size_t>(d)]);
    else if (op.attrs.keepdims)
      out.push_back(1);
  }
  return out;
}

Shape layer_norm_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 2, op.type == OpType::RMSNormalization ? 2 : 3);
  const Shape& x = in[0];
  const int64_t axis = op.attrs.axis;
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()))
    fail(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(x.size()));
  const Shape normalized(x.begin() + axis, x.end());
  static const char* kNames[] = {"", "Scale", "B"};
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i] != normalized)
      fail(op, std::string(kNames[i]) + " must have shape " + shape_to_string(normalized) +
                   " (X's dims from axis " + std::to_string(axis) + "), got " +
                   shape_to_string(in[i]));
  if (!(op.attrs.epsilon >= 0.0f)) fail(op, "epsilon must be >= 0");
  return x;
}

Shape slice_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const Shape& x = in[0];
  const OpAttributes& a = op.attrs;
  if (a.starts.size() != x.size() || a.steps.size() != x.size() || a.new_shape.size() != x.size())
    fail(op, "starts, steps and new_shape must have one entry per input dim (" +
                 std::to_string(x.size()) + ")");
  check_shape(op, a.new_shape, "new_shape");
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t start = a.starts[d], step = a.steps[d], count = a.new_shape[d];
    if (start < 0 || start >= x[d])
      fail(op, "start " + std::to_string(start) + " is outside dim " + std::to_string(d) +
                   " of size " + std::to_string(x[d]));
    if (step == 0 || step < -kMaxDim || step > kMaxDim)
      fail(op, "step " + std::to_string(step) + " of dim " + std::to_string(d) + " is invalid");
    // The last index read, start + (count - 1) * step, must stay inside the
    // dim; compared by division so that nothing overflows.
    const int64_t room = step > 0 ? (x[d] - 1 - start) / step : start / -step;
    if (count - 1 > room)
      fail(op, std::to_string(count) + " elements with step " + std::to_string(step) + " from " +
                   std::to_string(start) + " overrun dim " + std::to_string(d) + " of size " +
                   std::to_string(x[d]));
  }
  return a.new_shape;
}

Shape pad_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const Shape& x = in[0];
  const OpAttributes& a = op.attrs;
  if (a.pads.size() != 2 * x.size())
    fail(op, "pads has " + std::to_string(a.pads.size()) + " entries for an input of rank " +
                 std::to_string(x.size()) + " (needs 2 per dim)");
  if (a.pad_mode > kLastPadMode)
    fail(op, "pad mode " + std::to_string(static_cast<int>(a.pad_mode)) + " is unknown");
  Shape out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t pb = a.pads[d], pe = a.pads[d + x.size()];
    if (pb < -kMaxDim || pb > kMaxDim || pe < -kMaxDim || pe > kMaxDim)
      fail(op, "pads of dim " + std::to_string(d) + " are out of range");
    out[d] = x[d] + pb + pe;
  }
  check_shape(op, out, "output");
  return out;
}

Shape resize_shape(const Operator& op, const std::vector<Shape>& in) {
  check_input_count(op, in, 1, 1);
  const Shape& x = in[0];
  const OpAttributes& a = op.attrs;
  // The kernel sums 2^rank interpolation corners per element.
  constexpr size_t kMaxResizeRank = 8;
  if (x.size() > kMaxResizeRank)
    fail(op, "input rank " + std::to_string(x.size()) + " is above Resize's limit of 8");
  if (a.new_shape.size() != x.size() || a.scales.size() != x.size())
    fail(op, "new_shape and scales must have one entry per input dim (" + std::to_string(x.size()) +
                 ")");
  check_shape(op, a.new_shape, "new_shape");
  for (float s : a.scales)
    if (!(s > 0.0f) || !std::isfinite(s))
      fail(op, "scales must be positive and finite, got " + std::to_string(s));
  if (a.resize_mode > kLastResizeMode || a.coordinate_mode > kLastCoordinateMode ||
      a.nearest_mode > kLastNearestMode)
    fail(op, "resize mode, coordinate mode or nearest mode is unknown");
  return a.new_shape;
}

}  // namespace

bool attention_operands_fit(const Shape& q, const Shape& kt, const Shape& v) {
  const size_t rank = q.size();
  return rank >= 2 && kt.size() == rank && v.size() == rank &&
         std::equal(q.begin(), q.end() - 2, kt.begin()) &&
         std::equal(q.begin(), q.end() - 2, v.begin()) && kt[rank - 2] == q[rank - 1] &&
         v[rank - 2] == kt[rank - 1];
}

Shape infer_output_shape(const Operator& op, const std::vector<Shape>& input_shapes) {
  const auto& in = input_shapes;
  if (op.attrs.fused_residual && op.type != OpType::Conv && op.type != OpType::Gemm &&
      op.type != OpType::MatMul)
    fail(op, "has a fused residual, which only Conv, Gemm and MatMul support");
  if (op.attrs.fused_input_scale && op.type != OpType::Conv)
    fail(op, "has a fused input scale, which only Conv supports");
  if (op.attrs.fused_expand && op.type != OpType::Conv)
    fail(op, "has a fused expansion, which only Conv supports");
  // graph/fuse_expand_depthwise.cpp fuses expansions with these activations
  // only (the expansion has no slope field for a LeakyRelu).
  if (const Activation e = op.attrs.expand_activation;
      e != Activation::None && e != Activation::Relu && e != Activation::Clip &&
      e != Activation::Sigmoid && e != Activation::Silu)
    fail(op, "has a fused expansion activation " + std::to_string(static_cast<int>(e)) +
                 ", which the expansion kernels do not apply");
  // Only the ops whose kernels apply an epilogue may carry a fused activation.
  if (op.attrs.activation != Activation::None && op.type != OpType::Conv &&
      op.type != OpType::Gemm && op.type != OpType::MatMul)
    fail(op, "has a fused activation, which only Conv, Gemm and MatMul support");
  // The Conv kernels apply SiLU (EfficientNet) but not GELU (no CNN needs it).
  if (op.type == OpType::Conv &&
      (op.attrs.activation == Activation::Gelu || op.attrs.activation == Activation::GeluTanh))
    fail(op, "has a fused GELU activation, which only Gemm and MatMul support");
  switch (op.type) {
    case OpType::Conv:
      return conv_shape(op, in);
    case OpType::MaxPool:
    case OpType::AveragePool:
      return pool_shape(op, in);
    case OpType::GlobalAveragePool: {
      check_input_count(op, in, 1, 1);
      if (in[0].size() < 3) fail(op, "input X must have rank >= 3, got " + shape_to_string(in[0]));
      Shape out(in[0].size(), 1);
      out[0] = in[0][0];
      out[1] = in[0][1];
      return out;
    }
    case OpType::Gemm:
      return gemm_shape(op, in);
    case OpType::MatMul:
      return matmul_shape(op, in);
    case OpType::FusedAttention:
      return attention_shape(op, in);
    case OpType::Relu:
    case OpType::Sigmoid:
    case OpType::Clip:
      check_input_count(op, in, 1, 1);
      return in[0];
    case OpType::Add:
    case OpType::Mul: {
      check_input_count(op, in, 2, 2);
      return broadcast_shapes(op, in[0], in[1]);
    }
    case OpType::Flatten:
    case OpType::Reshape:
      return flatten_or_reshape_shape(op, in);
    case OpType::Concat:
      return concat_shape(op, in);
    case OpType::Softmax:
    case OpType::LogSoftmax:
      return softmax_shape(op, in);
    case OpType::BatchNormalization:
      return batch_norm_shape(op, in);
    case OpType::Transpose:
      return transpose_shape(op, in);
    case OpType::Gather:
      return gather_shape(op, in);
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
      check_input_count(op, in, 2, 2);
      return broadcast_shapes(op, in[0], in[1]);
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
      check_input_count(op, in, 1, 1);
      return in[0];
    case OpType::Where:
      return where_shape(op, in);
    case OpType::Expand:
      return expand_shape(op, in);
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSum:
    case OpType::ReduceLogSumExp:
      return reduction_shape(op, in);
    case OpType::ConvTranspose:
      return conv_transpose_shape(op, in);
    case OpType::LayerNormalization:
    case OpType::RMSNormalization:
      return layer_norm_shape(op, in);
    case OpType::Slice:
      return slice_shape(op, in);
    case OpType::LeakyRelu:
    case OpType::HardSigmoid:
    case OpType::HardSwish:
    case OpType::Neg:
    case OpType::Exp:
    case OpType::Log:
    case OpType::Reciprocal:
    case OpType::Abs:
    case OpType::Softplus:
    case OpType::Sin:
    case OpType::Cos:
    case OpType::Floor:
    case OpType::Ceil:
    case OpType::Round:
    case OpType::Sign:
    case OpType::IsNaN:
    case OpType::Cast:
    case OpType::ToIndex:
      check_input_count(op, in, 1, 1);
      return in[0];
    case OpType::CumSum:
      check_input_count(op, in, 1, 1);
      if (op.attrs.axis < 0 || op.attrs.axis >= static_cast<int64_t>(in[0].size()))
        fail(op, "axis " + std::to_string(op.attrs.axis) + " is out of range");
      return in[0];
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Max:
    case OpType::Min:
      check_input_count(op, in, 2, 2);
      return broadcast_shapes(op, in[0], in[1]);
    case OpType::Pad:
      return pad_shape(op, in);
    case OpType::Resize:
      return resize_shape(op, in);
  }
  fail(op, "unknown operator type " + std::to_string(static_cast<int>(op.type)));
}

DType operand_dtype(const Operator& op, size_t input) {
  const bool integer = (op.type == OpType::Gather && input == 1) || op.type == OpType::Cast;
  return integer ? DType::Int64 : DType::Float32;
}

DType output_dtype(const Operator& op) {
  return op.type == OpType::ToIndex ? DType::Int64 : DType::Float32;
}

void check_operand_dtypes(const Operator& op, const std::vector<DType>& inputs, DType output) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType want = operand_dtype(op, i);
    if (inputs[i] != want)
      fail(op, "input " + std::to_string(i) + " is " + std::string(dtype_name(inputs[i])) +
                   " but must be " + std::string(dtype_name(want)));
  }
  const DType want = output_dtype(op);
  if (output != want)
    fail(op, "output is " + std::string(dtype_name(output)) + " but must be " +
                 std::string(dtype_name(want)));
}

}  // namespace tessera::graph
