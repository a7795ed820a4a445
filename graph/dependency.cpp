// Dependency functions (ASPEN §3.1): the exact box of every operand that
// computing one region of an op's output reads. The tiler turns them into
// tile-to-tile edges, so a box that is too small is a data race and one that
// is too large costs parallelism; tests compare them with brute force.
#include "graph/dependency.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "graph/error.hpp"
#include "graph/source_index.hpp"

namespace tessera::graph {
namespace {

[[noreturn]] void fail(const Operator& op, const std::string& what) {
  throw Error(std::string(op_type_name(op.type)) + " '" + op.name + "': " + what);
}

void need_inputs(const Operator& op, const std::vector<Shape>& in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi)
    fail(op, "dependency: expected " + std::to_string(lo) + " to " + std::to_string(hi) +
                 " input shapes, got " + std::to_string(in.size()));
}

void need_rank(const Operator& op, const Shape& s, size_t rank) {
  if (s.size() != rank) fail(op, "dependency: operand " + shape_to_string(s) + " has wrong rank");
}

// Adds the dependency when it reads something; clamps it to the operand.
void add(std::vector<InputDependency>& deps, int32_t operand, Region r, const Shape& shape) {
  for (size_t d = 0; d < r.rank(); ++d) {
    r.begin[d] = std::max<int64_t>(r.begin[d], 0);
    r.end[d] = std::min<int64_t>(r.end[d], shape[d]);
  }
  if (!r.empty()) deps.push_back({operand, std::move(r)});
}

// Maps an output region onto an operand that is broadcast (numpy rules,
// right-aligned) to the output: size-1 dims read element 0.
Region broadcast_map(const Region& out, const Shape& in) {
  Region r{std::vector<int64_t>(in.size()), std::vector<int64_t>(in.size())};
  size_t offset = out.rank() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == 1) {
      r.begin[i] = 0;
      r.end[i] = 1;
    } else {
      r.begin[i] = out.begin[offset + i];
      r.end[i] = out.end[offset + i];
    }
  }
  return r;
}

// Bounding range of the input positions that the windows of outputs
// [o0, o1) actually touch inside [0, size): taps landing in padding read
// nothing, and with dilation a window may skip the input's border rows.
// Empty ([0,0)) when no tap lands inside.
std::pair<int64_t, int64_t> window_range(int64_t o0, int64_t o1, int64_t size, int64_t kernel,
                                         int64_t stride, int64_t pad, int64_t dilation) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  for (int64_t o = o0; o < o1; ++o) {
    int64_t start = o * stride - pad;
    // First tap at or after 0.
    int64_t j_first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    // Last tap before `size`.
    int64_t last_tap = start + (kernel - 1) * dilation;
    int64_t j_last = last_tap < size ? kernel - 1 : (size - 1 - start) / dilation;
    if (size - 1 - start < 0) continue;  // window starts past the input
    if (j_first > j_last || j_first >= kernel) continue;
    lo = std::min(lo, start + j_first * dilation);
    hi = std::max(hi, start + j_last * dilation + 1);
  }
  if (lo >= hi) return {0, 0};
  return {lo, hi};
}

// ConvTranspose along one spatial dim: input position i feeds output i·stride
// − pad + j·dilation for taps j. The input positions and the taps that reach
// output positions [o0, o1), each as [lo, hi); both empty when none does.
struct TransposedWindow {
  int64_t in_lo, in_hi, tap_lo, tap_hi;
};
TransposedWindow transposed_window(int64_t o0, int64_t o1, int64_t size, int64_t kernel,
                                   int64_t stride, int64_t pad, int64_t dilation) {
  TransposedWindow w{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  for (int64_t o = o0; o < o1; ++o)
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t at = o + pad - j * dilation;  // i · stride
      if (at < 0 || at % stride != 0 || at / stride >= size) continue;
      w.in_lo = std::min(w.in_lo, at / stride);
      w.in_hi = std::max(w.in_hi, at / stride + 1);
      w.tap_lo = std::min(w.tap_lo, j);
      w.tap_hi = std::max(w.tap_hi, j + 1);
    }
  if (w.in_lo >= w.in_hi) return {0, 0, 0, 0};
  return w;
}

void spatial_deps(const Operator& op, const Shape& x, const Region& out, Region& xr) {
  const OpAttributes& a = op.attrs;
  if (a.kernel_shape.size() != 2 || a.strides.size() != 2 || a.dilations.size() != 2 ||
      a.pads.size() != 4)
    fail(op, "dependency: spatial attributes have wrong sizes");
  for (size_t i = 0; i < 2; ++i) {
    auto [lo, hi] = window_range(out.begin[2 + i], out.end[2 + i], x[2 + i], a.kernel_shape[i],
                                 a.strides[i], a.pads[i], a.dilations[i]);
    xr.begin[2 + i] = lo;
    xr.end[2 + i] = hi;
  }
}

// Smallest box of `shape` covering the flat (row-major) index range
// [f0, f1]. Per dim the coordinate is (f / stride) mod size, and f / stride
// takes every value between its ends, so a dim is fully covered when that
// quotient runs through `size` values or wraps around.
Region flat_range_box(int64_t f0, int64_t f1, const Shape& shape) {
  auto strides = shape_strides(shape);
  Region r{std::vector<int64_t>(shape.size()), std::vector<int64_t>(shape.size())};
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t q0 = f0 / strides[d], q1 = f1 / strides[d];
    int64_t c0 = q0 % shape[d], c1 = q1 % shape[d];
    if (q1 - q0 + 1 >= shape[d] || c0 > c1) {
      r.begin[d] = 0;
      r.end[d] = shape[d];
    } else {
      r.begin[d] = c0;
      r.end[d] = c1 + 1;
    }
  }
  return r;
}

int64_t flat_index(const std::vector<int64_t>& coord, const Shape& shape) {
  auto strides = shape_strides(shape);
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f += coord[d] * strides[d];
  return f;
}

// The box of the input (shape `in`) that a box `out` of the reshaped output
// reads. The output box is a set of contiguous flat runs; the answer is the
// union of each run's covering box. Past kMaxRuns runs, the covering box of
// the whole flat span (a superset: still safe) bounds the work.
Region reshape_box(const Region& out, const Shape& out_shape, const Shape& in) {
  constexpr int64_t kMaxRuns = int64_t{1} << 14;
  const size_t rank = out.rank();
  // Dims [run_dim, rank) form one contiguous run: every dim after run_dim
  // is covered whole.
  size_t run_dim = rank;
  while (run_dim > 0) {
    --run_dim;
    if (out.extent(run_dim) != out_shape[run_dim]) break;
  }
  int64_t runs = 1;
  for (size_t d = 0; d < run_dim && runs <= kMaxRuns; ++d) runs *= out.extent(d);
  std::vector<int64_t> last(out.end);
  for (auto& v : last) --v;
  if (rank == 0 || runs > kMaxRuns)
    return flat_range_box(flat_index(out.begin, out_shape), flat_index(last, out_shape), in);
  Region box;
  std::vector<int64_t> first = out.begin;  // first element of the current run
  for (int64_t r = 0; r < runs; ++r) {
    std::vector<int64_t> run_last = first;
    for (size_t d = run_dim; d < rank; ++d) run_last[d] = last[d];
    Region part = flat_range_box(flat_index(first, out_shape), flat_index(run_last, out_shape), in);
    if (box.rank() == 0) {
      box = part;
    } else {
      for (size_t d = 0; d < in.size(); ++d) {
        box.begin[d] = std::min(box.begin[d], part.begin[d]);
        box.end[d] = std::max(box.end[d], part.end[d]);
      }
    }
    // Next run: odometer over dims [0, run_dim).
    for (size_t d = run_dim; d-- > 0;) {
      if (++first[d] < out.end[d]) break;
      first[d] = out.begin[d];
    }
  }
  return box;
}

}  // namespace

std::vector<InputDependency> tile_dependencies(const Operator& op, const std::vector<Shape>& in,
                                               const Shape& output_shape, const Region& out) {
  if (!region_inside(out, output_shape) || out.empty())
    fail(op, "dependency: region " + region_to_string(out) + " is empty or outside the output " +
                 shape_to_string(output_shape));
  std::vector<InputDependency> deps;
  const OpAttributes& a = op.attrs;
  switch (op.type) {
    case OpType::ConvTranspose: {
      need_inputs(op, in, 2, 3);
      need_rank(op, in[0], 4);
      need_rank(op, in[1], 4);
      need_rank(op, output_shape, 4);
      const Shape& x = in[0];
      const Shape& w = in[1];
      if (a.group < 1 || x[1] % a.group != 0 || a.kernel_shape.size() != 2 ||
          a.strides.size() != 2 || a.dilations.size() != 2 || a.pads.size() != 4)
        fail(op, "dependency: bad group or spatial attributes");
      // The output channels' groups read their input channels and, of W, the
      // rows of those channels and the columns of the output channels
      // within their group (all columns once the tile spans groups).
      const int64_t in_per_group = x[1] / a.group, out_per_group = w[1];
      const int64_t g0 = out.begin[1] / out_per_group, g1 = (out.end[1] - 1) / out_per_group + 1;
      Region xr{{out.begin[0], g0 * in_per_group, 0, 0}, {out.end[0], g1 * in_per_group, 0, 0}};
      Region wr{{g0 * in_per_group, 0, 0, 0}, {g1 * in_per_group, out_per_group, 0, 0}};
      if (g1 - g0 == 1) {
        wr.begin[1] = out.begin[1] - g0 * out_per_group;
        wr.end[1] = out.end[1] - g0 * out_per_group;
      }
      bool reached = true;
      for (size_t i = 0; i < 2; ++i) {
        const TransposedWindow tw =
            transposed_window(out.begin[2 + i], out.end[2 + i], x[2 + i], a.kernel_shape[i],
                              a.strides[i], a.pads[i], a.dilations[i]);
        xr.begin[2 + i] = tw.in_lo;
        xr.end[2 + i] = tw.in_hi;
        wr.begin[2 + i] = tw.tap_lo;
        wr.end[2 + i] = tw.tap_hi;
        reached = reached && tw.in_lo < tw.in_hi;
      }
      // Output rows no input reaches (stride gaps, negative end pads) hold the bias alone.
      if (reached) {
        add(deps, 0, xr, x);
        add(deps, 1, wr, w);
      }
      if (in.size() == 3) {
        need_rank(op, in[2], 1);
        add(deps, 2, Region{{out.begin[1]}, {out.end[1]}}, in[2]);
      }
      break;
    }
    case OpType::Conv: {
      const InputCount count = conv_input_count(a);
      need_inputs(op, in, count.min, count.max);
      need_rank(op, in[0], 4);
      need_rank(op, in[1], 4);
      need_rank(op, output_shape, 4);
      const Shape& x = in[0];
      if (a.group < 1 || output_shape[1] % a.group != 0) fail(op, "dependency: bad group");
      int64_t out_per_group = output_shape[1] / a.group;
      int64_t in_per_group = in[1][1];
      int64_t g0 = out.begin[1] / out_per_group, g1 = (out.end[1] - 1) / out_per_group + 1;
      Region xr{{out.begin[0], g0 * in_per_group, 0, 0}, {out.end[0], g1 * in_per_group, 0, 0}};
      spatial_deps(op, x, out, xr);
      // A fused expansion computes the depthwise input's channels from all
      // of X's at the same pixels; its weight rows are the tile's channels.
      if (a.fused_expand) {
        xr.begin[1] = 0;
        xr.end[1] = x[1];
      }
      add(deps, 0, xr, x);
      if (a.fused_expand) {
        const size_t e = expand_weight_input(a);
        need_rank(op, in[e], 4);
        need_rank(op, in[e + 1], 1);
        add(deps, static_cast<int32_t>(e),
            Region{{out.begin[1], 0, 0, 0}, {out.end[1], in[e][1], 1, 1}}, in[e]);
        add(deps, static_cast<int32_t>(e + 1), Region{{out.begin[1]}, {out.end[1]}}, in[e + 1]);
      }
      add(deps, 1, Region{{out.begin[1], 0, 0, 0}, {out.end[1], in[1][1], in[1][2], in[1][3]}},
          in[1]);
      if (in.size() >= 3) {
        need_rank(op, in[2], 1);
        add(deps, 2, Region{{out.begin[1]}, {out.end[1]}}, in[2]);
      }
      if (a.fused_residual) {  // the same elements as the output
        need_rank(op, in[3], 4);
        add(deps, 3, out, in[3]);
      }
      if (a.fused_input_scale) {  // the tile's images (or the one shared), X's channels
        const size_t i = in.size() - 1;
        need_rank(op, in[i], 4);
        const bool shared = in[i][0] == 1;
        add(deps, static_cast<int32_t>(i),
            Region{{shared ? 0 : out.begin[0], xr.begin[1], 0, 0},
                   {shared ? 1 : out.end[0], xr.end[1], 1, 1}},
            in[i]);
      }
      break;
    }
    case OpType::MaxPool:
    case OpType::AveragePool: {
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], 4);
      need_rank(op, output_shape, 4);
      Region xr = out;
      spatial_deps(op, in[0], out, xr);
      add(deps, 0, xr, in[0]);
      break;
    }
    case OpType::GlobalAveragePool: {
      need_inputs(op, in, 1, 1);
      if (in[0].size() != out.rank() || in[0].size() < 3) fail(op, "dependency: bad rank");
      Region xr = Region::whole(in[0]);
      for (size_t d = 0; d < 2; ++d) {
        xr.begin[d] = out.begin[d];
        xr.end[d] = out.end[d];
      }
      add(deps, 0, xr, in[0]);
      break;
    }
    case OpType::Gemm: {
      need_inputs(op, in, a.fused_residual ? 4 : 2, a.fused_residual ? 4 : 3);
      need_rank(op, in[0], 2);
      need_rank(op, in[1], 2);
      need_rank(op, output_shape, 2);
      int64_t k = a.trans_a ? in[0][0] : in[0][1];
      int64_t m0 = out.begin[0], m1 = out.end[0], n0 = out.begin[1], n1 = out.end[1];
      add(deps, 0, a.trans_a ? Region{{0, m0}, {k, m1}} : Region{{m0, 0}, {m1, k}}, in[0]);
      add(deps, 1, a.trans_b ? Region{{n0, 0}, {n1, k}} : Region{{0, n0}, {k, n1}}, in[1]);
      if (in.size() >= 3) {
        if (in[2].size() > 2) fail(op, "dependency: C has rank > 2");
        add(deps, 2, broadcast_map(out, in[2]), in[2]);
      }
      if (in.size() == 4) {  // fused residual: the same elements as the output
        if (in[3] != output_shape) fail(op, "dependency: residual is not the output's shape");
        add(deps, 3, out, in[3]);
      }
      break;
    }
    case OpType::MatMul: {
      // Input 2: a fused bias [N], read at the tile's columns; input 3: a
      // fused residual of the output's shape, read at the tile's elements.
      need_inputs(op, in, a.fused_residual ? 4 : 2, a.fused_residual ? 4 : 3);
      Shape sa = in[0], sb = in[1];
      if (sa.empty() || sb.empty()) fail(op, "dependency: rank-0 operand");
      bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
      if (a_vec) sa.insert(sa.begin(), 1);
      if (b_vec) sb.push_back(1);
      size_t batch_rank = std::max(sa.size(), sb.size()) - 2;
      if (output_shape.size() != batch_rank + (a_vec ? 0 : 1) + (b_vec ? 0 : 1))
        fail(op, "dependency: output rank does not match operands");
      // The output region with the vector dims put back as [0,1).
      Region full{Shape(out.begin.begin(), out.begin.begin() + batch_rank),
                  Shape(out.end.begin(), out.end.begin() + batch_rank)};
      size_t pos = batch_rank;
      int64_t m0 = 0, m1 = 1, n0 = 0, n1 = 1;
      if (!a_vec) m0 = out.begin[pos], m1 = out.end[pos], ++pos;
      if (!b_vec) n0 = out.begin[pos], n1 = out.end[pos];
      int64_t k = sa.back();
      Region ar = broadcast_map(full, Shape(sa.begin(), sa.end() - 2));
      ar.begin.insert(ar.begin.end(), {m0, 0});
      ar.end.insert(ar.end.end(), {m1, k});
      Region br = broadcast_map(full, Shape(sb.begin(), sb.end() - 2));
      br.begin.insert(br.begin.end(), {0, n0});
      br.end.insert(br.end.end(), {k, n1});
      if (a_vec) ar = Region{{0}, {k}};
      if (b_vec) {
        br.begin.pop_back();
        br.end.pop_back();
      }
      add(deps, 0, ar, in[0]);
      add(deps, 1, br, in[1]);
      if (in.size() >= 3) {
        need_rank(op, in[2], 1);
        if (b_vec || in[2][0] != sb.back()) fail(op, "dependency: bias is not [N]");
        add(deps, 2, Region{{n0}, {n1}}, in[2]);
      }
      if (in.size() == 4) {
        if (in[3] != output_shape) fail(op, "dependency: residual is not the output's shape");
        add(deps, 3, out, in[3]);
      }
      break;
    }
    case OpType::FusedAttention: {
      // Each output row reads its row of Q, all of KT and V (at the
      // columns the tile writes), and its row of the mask (all S columns):
      // the softmax normalises a whole row of scores.
      need_inputs(op, in, 3, 4);
      const size_t rank = out.rank();
      if (rank < 2) fail(op, "dependency: rank < 2");
      need_rank(op, in[0], rank);
      need_rank(op, in[1], rank);
      need_rank(op, in[2], rank);
      const int64_t d = in[0][rank - 1], s = in[1][rank - 1];
      Region q = out, kt = out, v = out;
      q.begin[rank - 1] = 0, q.end[rank - 1] = d;
      kt.begin[rank - 2] = 0, kt.end[rank - 2] = d;
      kt.begin[rank - 1] = 0, kt.end[rank - 1] = s;
      v.begin[rank - 2] = 0, v.end[rank - 2] = s;
      add(deps, 0, q, in[0]);
      add(deps, 1, kt, in[1]);
      add(deps, 2, v, in[2]);
      if (in.size() == 4) {
        if (in[3].size() > rank) fail(op, "dependency: mask rank > output rank");
        Region scores = out;
        scores.begin[rank - 1] = 0, scores.end[rank - 1] = s;
        add(deps, 3, broadcast_map(scores, in[3]), in[3]);
      }
      break;
    }
    case OpType::Relu:
    case OpType::Sigmoid:
    case OpType::Clip:
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      add(deps, 0, out, in[0]);
      break;
    case OpType::Add:
    case OpType::Mul:
      need_inputs(op, in, 2, 2);
      for (int32_t i = 0; i < 2; ++i) {
        if (in[i].size() > out.rank()) fail(op, "dependency: operand rank > output rank");
        add(deps, i, broadcast_map(out, in[i]), in[i]);
      }
      break;
    case OpType::Flatten:
    case OpType::Reshape: {
      need_inputs(op, in, 1, 1);
      if (shape_numel(in[0]) != shape_numel(output_shape))
        fail(op, "dependency: element counts differ");
      add(deps, 0, reshape_box(out, output_shape, in[0]), in[0]);
      break;
    }
    case OpType::Concat: {
      if (in.empty()) fail(op, "dependency: no inputs");
      size_t axis = static_cast<size_t>(a.axis);
      if (a.axis < 0 || axis >= out.rank()) fail(op, "dependency: bad axis");
      int64_t offset = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        need_rank(op, in[i], out.rank());
        Region r = out;
        r.begin[axis] = std::max(out.begin[axis], offset) - offset;
        r.end[axis] = std::min(out.end[axis], offset + in[i][axis]) - offset;
        offset += in[i][axis];
        add(deps, static_cast<int32_t>(i), r, in[i]);
      }
      break;
    }
    case OpType::Softmax:
    case OpType::LogSoftmax: {
      need_inputs(op, in, 1, op.type == OpType::Softmax ? 2 : 1);
      need_rank(op, in[0], out.rank());
      size_t axis = static_cast<size_t>(a.axis);
      if (a.axis < 0 || axis >= out.rank()) fail(op, "dependency: bad axis");
      Region r = out;
      size_t last = a.softmax_coerce_2d ? out.rank() : axis + 1;
      for (size_t d = axis; d < last; ++d) {
        r.begin[d] = 0;
        r.end[d] = in[0][d];
      }
      add(deps, 0, r, in[0]);
      if (in.size() == 2) add(deps, 1, broadcast_map(r, in[1]), in[1]);  // a fused mask
      break;
    }
    case OpType::BatchNormalization: {
      need_inputs(op, in, 5, 5);
      need_rank(op, in[0], out.rank());
      if (out.rank() < 2) fail(op, "dependency: X rank < 2");
      add(deps, 0, out, in[0]);
      for (int32_t i = 1; i < 5; ++i) {
        need_rank(op, in[i], 1);
        add(deps, i, Region{{out.begin[1]}, {out.end[1]}}, in[i]);
      }
      break;
    }
    case OpType::Transpose: {
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      if (a.perm.size() != out.rank()) fail(op, "dependency: perm has the wrong size");
      // Output dim i is input dim perm[i]: the box is permuted back.
      Region r = Region::whole(in[0]);
      for (size_t i = 0; i < out.rank(); ++i) {
        const auto p = static_cast<size_t>(a.perm[i]);
        if (p >= out.rank()) fail(op, "dependency: bad perm");
        r.begin[p] = out.begin[i];
        r.end[p] = out.end[i];
      }
      add(deps, 0, r, in[0]);
      break;
    }
    case OpType::Gather: {
      need_inputs(op, in, 1, 2);
      const Shape& data = in[0];
      const auto axis = static_cast<size_t>(a.axis);
      if (a.axis < 0 || axis >= data.size()) fail(op, "dependency: bad axis");
      const Shape indices_shape = in.size() == 2 ? in[1] : Shape(a.indices_shape);
      const size_t q = indices_shape.size();
      if (out.rank() != data.size() - 1 + q) fail(op, "dependency: output rank does not match");
      // Output dims [axis, axis + q) index the indices; the others map onto data.
      Region ir{Shape(out.begin.begin() + axis, out.begin.begin() + axis + q),
                Shape(out.end.begin() + axis, out.end.begin() + axis + q)};
      Region dr = Region::whole(data);
      for (size_t d = 0; d < axis; ++d) dr.begin[d] = out.begin[d], dr.end[d] = out.end[d];
      for (size_t d = axis + 1; d < data.size(); ++d)
        dr.begin[d] = out.begin[d - 1 + q], dr.end[d] = out.end[d - 1 + q];
      if (in.size() == 2) {
        // Indices known only at run time: any row of the data along the axis.
        add(deps, 1, ir, in[1]);
      } else {
        // Constant indices: exactly the rows the region's indices name.
        const int64_t n = data[axis];
        int64_t lo = n, hi = 0;
        std::vector<int64_t> idx = ir.begin;
        if (static_cast<int64_t>(a.indices.size()) != shape_numel(indices_shape))
          fail(op, "dependency: indices do not match indices_shape");
        for (bool more = !ir.empty(); more;) {
          int64_t v = a.indices[static_cast<size_t>(flat_index(idx, indices_shape))];
          if (v < 0) v += n;
          lo = std::min(lo, v);
          hi = std::max(hi, v + 1);
          more = false;
          for (size_t d = q; d-- > 0;) {
            if (++idx[d] < ir.end[d]) {
              more = true;
              break;
            }
            idx[d] = ir.begin[d];
          }
        }
        dr.begin[axis] = lo;
        dr.end[axis] = hi;
      }
      add(deps, 0, dr, data);
      break;
    }
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
    case OpType::Where:
    case OpType::Expand:
      need_inputs(op, in,
                  op.type == OpType::Where    ? 3
                  : op.type == OpType::Expand ? 1
                                              : 2,
                  op.type == OpType::Where    ? 3
                  : op.type == OpType::Expand ? 1
                                              : 2);
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i].size() > out.rank()) fail(op, "dependency: operand rank > output rank");
        add(deps, static_cast<int32_t>(i), broadcast_map(out, in[i]), in[i]);
      }
      break;
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      add(deps, 0, out, in[0]);
      break;
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSum:
    case OpType::ReduceLogSumExp: {
      need_inputs(op, in, 1, 1);
      // Whole reduced axes; the others follow the output (which lacks the
      // reduced dims unless keepdims).
      Region r = Region::whole(in[0]);
      size_t o = 0;
      for (size_t d = 0; d < in[0].size(); ++d) {
        const bool reduced =
            std::binary_search(a.axes.begin(), a.axes.end(), static_cast<int64_t>(d));
        if (!reduced) {
          if (o >= out.rank()) fail(op, "dependency: output rank does not match");
          r.begin[d] = out.begin[o];
          r.end[d] = out.end[o];
        }
        if (!reduced || a.keepdims) ++o;
      }
      if (o != out.rank()) fail(op, "dependency: output rank does not match");
      add(deps, 0, r, in[0]);
      break;
    }
    case OpType::LayerNormalization:
    case OpType::RMSNormalization: {
      need_inputs(op, in, 2, 3);
      need_rank(op, in[0], out.rank());
      const auto axis = static_cast<size_t>(a.axis);
      if (a.axis < 0 || axis >= out.rank()) fail(op, "dependency: bad axis");
      // Whole rows over the normalised dims [axis, rank) (the statistics);
      // Scale and B only where the region lies in those dims.
      Region r = out;
      for (size_t d = axis; d < out.rank(); ++d) r.begin[d] = 0, r.end[d] = in[0][d];
      add(deps, 0, r, in[0]);
      const Region params{Shape(out.begin.begin() + a.axis, out.begin.end()),
                          Shape(out.end.begin() + a.axis, out.end.end())};
      for (size_t i = 1; i < in.size(); ++i) {
        need_rank(op, in[i], params.rank());
        add(deps, static_cast<int32_t>(i), params, in[i]);
      }
      break;
    }
    case OpType::Slice: {
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      if (a.starts.size() != out.rank() || a.steps.size() != out.rank())
        fail(op, "dependency: starts/steps have the wrong size");
      // Bounding box of the strided positions start + i * step, i in the region.
      Region r = out;
      for (size_t d = 0; d < out.rank(); ++d) {
        const int64_t first = a.starts[d] + out.begin[d] * a.steps[d];
        const int64_t last = a.starts[d] + (out.end[d] - 1) * a.steps[d];
        r.begin[d] = std::min(first, last);
        r.end[d] = std::max(first, last) + 1;
      }
      add(deps, 0, r, in[0]);
      break;
    }
    case OpType::CumSum: {
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      Region r = out;  // every element up to the tile's last along the axis
      r.begin[static_cast<size_t>(op.attrs.axis)] = 0;
      add(deps, 0, r, in[0]);
      break;
    }
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
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      add(deps, 0, out, in[0]);
      break;
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Max:
    case OpType::Min:
      need_inputs(op, in, 2, 2);
      for (int32_t i = 0; i < 2; ++i) {
        if (in[i].size() > out.rank()) fail(op, "dependency: operand rank > output rank");
        add(deps, i, broadcast_map(out, in[i]), in[i]);
      }
      break;
    case OpType::Pad:
    case OpType::Resize: {
      need_inputs(op, in, 1, 1);
      need_rank(op, in[0], out.rank());
      const size_t rank = out.rank();
      if (op.type == OpType::Pad && a.pads.size() != 2 * rank)
        fail(op, "dependency: pads have the wrong size");
      if (op.type == OpType::Resize && a.scales.size() != rank)
        fail(op, "dependency: scales have the wrong size");
      // Both ops are separable (graph/source_index.hpp): the elements read
      // are the product of each dim's sources, so the exact box is the
      // per-dim range of sources. Constant padding reads nothing where a
      // dim's outputs all fall in the padding.
      Region r{std::vector<int64_t>(rank), std::vector<int64_t>(rank)};
      for (size_t d = 0; d < rank; ++d) {
        int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
        for (int64_t o = out.begin[d]; o < out.end[d]; ++o) {
          if (op.type == OpType::Pad) {
            const int64_t i = pad_source_index(o, a.pads[d], in[0][d], a.pad_mode);
            if (i < 0) continue;
            lo = std::min(lo, i);
            hi = std::max(hi, i + 1);
          } else {
            const ResizeTaps t = resize_taps(a, d, o, in[0][d], output_shape[d]);
            lo = std::min(lo, t.lo);
            hi = std::max(hi, t.hi + 1);
          }
        }
        if (lo >= hi) return deps;  // every output of the region is padding
        r.begin[d] = lo;
        r.end[d] = hi;
      }
      add(deps, 0, r, in[0]);
      break;
    }
  }
  return deps;
}

}  // namespace tessera::graph
