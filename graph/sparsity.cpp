// TeSA propagation (SparTA §3.2, Algorithms 1–2): the pruning rule as a
// forward sweep of zeros (TeSA algebra, Table 2; tensor scrambling where an
// op has no rule) and a backward sweep of liveness (the output→input and
// input→input rules the paper derives from each op's backward operator: for
// Y = A·X, gA = gY·Xᵀ, so A[i,k] matters iff some live Y[i,j] has a non-zero
// X[k,j]). Dead weights are zeroed and the sweeps repeat to a fixed point.
#include "graph/sparsity.hpp"

#include <algorithm>
#include <bit>
#include <random>

#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/op_shape.hpp"

namespace tessera::graph {

int64_t ElementMask::count() const {
  int64_t n = 0;
  for (uint64_t w : words_) n += std::popcount(w);
  return n;
}

bool ElementMask::none() const {
  return std::all_of(words_.begin(), words_.end(), [](uint64_t w) { return w == 0; });
}

bool ElementMask::merge(const ElementMask& other) {
  bool changed = false;
  for (size_t i = 0; i < words_.size(); ++i) {
    uint64_t w = words_[i] | other.words_[i];
    changed |= w != words_[i];
    words_[i] = w;
  }
  return changed;
}

ElementMask ElementMask::operator|(const ElementMask& other) const {
  ElementMask r = *this;
  r.merge(other);
  return r;
}

ElementMask ElementMask::operator~() const {
  ElementMask r = *this;
  for (uint64_t& w : r.words_) w = ~w;
  // Bits past numel stay clear so count() is exact.
  if (numel_ % 64 != 0 && !r.words_.empty()) r.words_.back() &= (uint64_t{1} << (numel_ % 64)) - 1;
  return r;
}

namespace {

using Masks = std::vector<const ElementMask*>;

bool activation_keeps_zero(const Operator& op) {
  switch (op.attrs.activation) {
    case Activation::None:
    case Activation::Relu:
    case Activation::Gelu:  // gelu(0) = silu(0) = 0
    case Activation::GeluTanh:
    case Activation::Silu:
    case Activation::LeakyRelu:  // leaky(0) = 0
      return true;
    case Activation::Clip:
      return op.attrs.clip_min <= 0.0f && 0.0f <= op.attrs.clip_max;
    case Activation::Sigmoid:
      return false;
  }
  return false;
}

// Unary elementwise ops with f(0) = 0 (Table 2: x = φ → y = φ).
bool unary_keeps_zero(const Operator& op) {
  switch (op.type) {
    case OpType::Relu:
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
      return true;
    case OpType::Clip:
      return op.attrs.clip_min <= 0.0f && 0.0f <= op.attrs.clip_max;
    default:
      return false;
  }
}

bool is_unary_elementwise(OpType t) {
  switch (t) {
    case OpType::Relu:
    case OpType::Clip:
    case OpType::Sigmoid:
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
      return true;
    default:
      return false;
  }
}

bool is_broadcasting_elementwise(OpType t) {
  switch (t) {
    case OpType::Add:
    case OpType::Sub:
    case OpType::Mul:
    case OpType::Div:
    case OpType::Pow:
    case OpType::Where:
      return true;
    default:
      return false;
  }
}

// For every output element (row-major), the flat index of the input element
// numpy broadcasting reads (input right-aligned, size-1 dims repeated).
std::vector<int64_t> broadcast_map(const Shape& in, const Shape& out) {
  const size_t rank = out.size();
  std::vector<int64_t> in_stride(rank, 0);
  const std::vector<int64_t> in_strides = shape_strides(in);
  for (size_t d = 0; d < in.size(); ++d) {
    size_t od = rank - in.size() + d;
    in_stride[od] = in[d] == 1 ? 0 : in_strides[d];
  }
  const int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> coord(rank, 0);
  int64_t flat_in = 0;
  for (int64_t o = 0; o < n; ++o) {
    map[static_cast<size_t>(o)] = flat_in;
    for (size_t d = rank; d-- > 0;) {
      if (++coord[d] < out[d]) {
        flat_in += in_stride[d];
        break;
      }
      flat_in -= in_stride[d] * (out[d] - 1);
      coord[d] = 0;
    }
  }
  return map;
}

// Output flat index → input flat index of a Transpose (output dim i is input dim perm[i]).
std::vector<int64_t> transpose_map(const Shape& in, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = in[static_cast<size_t>(perm[i])];
  const std::vector<int64_t> in_strides = shape_strides(in);
  std::vector<int64_t> stride(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) stride[i] = in_strides[static_cast<size_t>(perm[i])];
  const int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> coord(out.size(), 0);
  int64_t flat_in = 0;
  for (int64_t o = 0; o < n; ++o) {
    map[static_cast<size_t>(o)] = flat_in;
    for (size_t d = out.size(); d-- > 0;) {
      if (++coord[d] < out[d]) {
        flat_in += stride[d];
        break;
      }
      flat_in -= stride[d] * (out[d] - 1);
      coord[d] = 0;
    }
  }
  return map;
}

// Calls fn(flat index) for every element of `r` inside a tensor of shape `s`.
template <typename Fn>
void for_each_in_region(const Region& r, const Shape& s, Fn&& fn) {
  if (r.empty()) return;
  const std::vector<int64_t> strides = shape_strides(s);
  std::vector<int64_t> coord = r.begin;
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat += coord[d] * strides[d];
  while (true) {
    fn(flat);
    size_t d = s.size();
    while (d-- > 0) {
      if (++coord[d] < r.end[d]) {
        flat += strides[d];
        break;
      }
      flat -= strides[d] * (r.end[d] - 1 - r.begin[d]);
      coord[d] = r.begin[d];
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

Region element_region(int64_t flat, const Shape& s) {
  Region r{std::vector<int64_t>(s.size()), std::vector<int64_t>(s.size())};
  for (size_t d = s.size(); d-- > 0;) {
    r.begin[d] = flat % s[d];
    r.end[d] = r.begin[d] + 1;
    flat /= s[d];
  }
  return r;
}

// ---------------------------------------------------------------- MatMul / Gemm

// The 2-D view of a (batched) matrix product: Y[b,i,j] = Σ_k A(b,i,k) · B(b,k,j).
struct ProductView {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  std::vector<int64_t> a_base, b_base;  // per output batch: flat offset of A's / B's matrix
  bool trans_a = false, trans_b = false;
  int64_t a(int64_t b, int64_t i, int64_t kk) const {
    return a_base[static_cast<size_t>(b)] + (trans_a ? kk * m + i : i * k + kk);
  }
  int64_t bidx(int64_t b, int64_t kk, int64_t j) const {
    return b_base[static_cast<size_t>(b)] + (trans_b ? j * k + kk : kk * n + j);
  }
};

ProductView matmul_view(const Shape& a_shape, const Shape& b_shape) {
  Shape a = a_shape, b = b_shape;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  ProductView v;
  v.m = a[a.size() - 2];
  v.k = a.back();
  v.n = b.back();
  Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  Shape batch(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    int64_t ad = d + a_batch.size() >= rank ? a_batch[d + a_batch.size() - rank] : 1;
    int64_t bd = d + b_batch.size() >= rank ? b_batch[d + b_batch.size() - rank] : 1;
    batch[d] = std::max(ad, bd);
  }
  v.batch = shape_numel(batch);
  std::vector<int64_t> am = broadcast_map(a_batch, batch), bm = broadcast_map(b_batch, batch);
  for (int64_t i = 0; i < v.batch; ++i) {
    v.a_base.push_back(am[static_cast<size_t>(i)] * v.m * v.k);
    v.b_base.push_back(bm[static_cast<size_t>(i)] * v.k * v.n);
  }
  return v;
}

ProductView gemm_view(const Operator& op, const Shape& a, const Shape& b) {
  ProductView v;
  v.trans_a = op.attrs.trans_a;
  v.trans_b = op.attrs.trans_b;
  v.m = v.trans_a ? a[1] : a[0];
  v.k = v.trans_a ? a[0] : a[1];
  v.n = v.trans_b ? b[0] : b[1];
  v.a_base = {0};
  v.b_base = {0};
  return v;
}

// Output zero iff every product term has a zero factor and the added term
// (Gemm's C, nullptr if none) is zero.
// For batch b: lists[outer] = the inner indices whose element is not zero,
// e.g. per column j of B the k with B(k, j) != 0. Weights are mostly zero
// at the sparsities TeSA is for, so the rules below walk these lists instead
// of every (i, k, j) term: BERT-base at 95% took a minute to compile.
template <class Index>
std::vector<std::vector<int32_t>> nonzero_lists(int64_t outer, int64_t inner,
                                                const ElementMask& zero, Index&& index) {
  std::vector<std::vector<int32_t>> lists(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      if (!zero.test(index(o, i))) lists[static_cast<size_t>(o)].push_back(static_cast<int32_t>(i));
  return lists;
}

ElementMask product_forward(const ProductView& v, const ElementMask& az, const ElementMask& bz,
                            const ElementMask* cz, const std::vector<int64_t>* c_map,
                            bool terms_vanish, bool keeps_zero) {
  ElementMask out(v.batch * v.m * v.n);
  if (!keeps_zero) return out;
  std::vector<std::vector<int32_t>> b_columns;  // per j: the k with B(k, j) != 0
  for (int64_t b = 0; b < v.batch; ++b) {
    if (!terms_vanish &&
        (b == 0 || v.b_base[static_cast<size_t>(b)] != v.b_base[static_cast<size_t>(b - 1)]))
      b_columns =
          nonzero_lists(v.n, v.k, bz, [&](int64_t j, int64_t kk) { return v.bidx(b, kk, j); });
    for (int64_t i = 0; i < v.m; ++i)
      for (int64_t j = 0; j < v.n; ++j) {
        const int64_t o = (b * v.m + i) * v.n + j;
        if (cz && !cz->test((*c_map)[static_cast<size_t>(o)])) continue;
        // Zero iff every term a(i, k)·b(k, j) has a zero factor.
        bool zero = true;
        if (!terms_vanish)
          for (int32_t kk : b_columns[static_cast<size_t>(j)])
            if (!az.test(v.a(b, i, kk))) {
              zero = false;
              break;
            }
        if (zero) out.set(o);
      }
  }
  return out;
}

// A(b,i,k) is live iff some live Y[b,i,j] has a non-zero B(b,k,j); B likewise.
void product_backward(const ProductView& v, const ElementMask& az, const ElementMask& bz,
                      const ElementMask& live, ElementMask& a_live, ElementMask& b_live) {
  std::vector<char> row_live(static_cast<size_t>(v.batch * v.m), 0);
  std::vector<char> col_live(static_cast<size_t>(v.batch * v.n), 0);
  for (int64_t b = 0; b < v.batch; ++b)
    for (int64_t i = 0; i < v.m; ++i)
      for (int64_t j = 0; j < v.n; ++j)
        if (live.test((b * v.m + i) * v.n + j)) {
          row_live[static_cast<size_t>(b * v.m + i)] = 1;
          col_live[static_cast<size_t>(b * v.n + j)] = 1;
        }
  for (int64_t b = 0; b < v.batch; ++b) {
    // Per k: the j with B(k, j) != 0, and the i with A(i, k) != 0.
    const auto b_rows =
        nonzero_lists(v.k, v.n, bz, [&](int64_t kk, int64_t j) { return v.bidx(b, kk, j); });
    const auto a_columns =
        nonzero_lists(v.k, v.m, az, [&](int64_t kk, int64_t i) { return v.a(b, i, kk); });
    for (int64_t i = 0; i < v.m; ++i) {
      if (!row_live[static_cast<size_t>(b * v.m + i)]) continue;
      for (int64_t kk = 0; kk < v.k; ++kk) {
        const int64_t ai = v.a(b, i, kk);
        if (a_live.test(ai)) continue;
        for (int32_t j : b_rows[static_cast<size_t>(kk)])
          if (live.test((b * v.m + i) * v.n + j)) {
            a_live.set(ai);
            break;
          }
      }
    }
    for (int64_t j = 0; j < v.n; ++j) {
      if (!col_live[static_cast<size_t>(b * v.n + j)]) continue;
      for (int64_t kk = 0; kk < v.k; ++kk) {
        const int64_t bi = v.bidx(b, kk, j);
        if (b_live.test(bi)) continue;
        for (int32_t i : a_columns[static_cast<size_t>(kk)])
          if (live.test((b * v.m + i) * v.n + j)) {
            b_live.set(bi);
            break;
          }
      }
    }
  }
}

// ---------------------------------------------------------------- Conv (im2col view)

// Conv as a product of W [M, C/g·kh·kw] with im2col(X); 1-D convs as H = 1.
struct ConvView {
  int64_t n = 1, c = 1, h = 1, w = 1, m = 1, cg = 1, kh = 1, kw = 1, oh = 1, ow = 1, group = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t x(int64_t nn, int64_t cc, int64_t ih, int64_t iw) const {
    return ((nn * c + cc) * h + ih) * w + iw;
  }
  int64_t wt(int64_t mm, int64_t cc, int64_t r, int64_t s) const {
    return ((mm * cg + cc) * kh + r) * kw + s;
  }
  int64_t y(int64_t nn, int64_t mm, int64_t i, int64_t j) const {
    return ((nn * m + mm) * oh + i) * ow + j;
  }
  int64_t in_channel(int64_t mm, int64_t cc) const { return (mm / (m / group)) * cg + cc; }
};

ConvView conv_view(const Operator& op, const Shape& x, const Shape& w, const Shape& y) {
  ConvView v;
  const OpAttributes& a = op.attrs;
  const bool two_d = x.size() == 4;
  v.n = x[0];
  v.c = x[1];
  v.h = two_d ? x[2] : 1;
  v.w = x.back();
  v.m = w[0];
  v.cg = w[1];
  v.kh = two_d ? w[2] : 1;
  v.kw = w.back();
  v.oh = two_d ? y[2] : 1;
  v.ow = y.back();
  v.group = a.group;
  if (two_d) {
    v.sh = a.strides[0];
    v.sw = a.strides[1];
    v.ph = a.pads[0];
    v.pw = a.pads[1];
    v.dh = a.dilations[0];
    v.dw = a.dilations[1];
  } else {
    v.sw = a.strides[0];
    v.pw = a.pads[0];
    v.dw = a.dilations[0];
  }
  return v;
}

struct Tap {
  int64_t other;  // the input channel (per output channel) or output channel (per input channel)
  int64_t r, s;
  int64_t weight;  // flat index into W
};

ElementMask conv_forward(const Operator& op, const std::vector<Shape>& in, const Shape& out,
                         const Masks& z) {
  const ConvView v = conv_view(op, in[0], in[1], out);
  ElementMask y(shape_numel(out));
  if (!activation_keeps_zero(op)) return y;
  const ElementMask* bias = in.size() > 2 ? z[2] : nullptr;
  const ElementMask* residual = in.size() > 3 ? z[3] : nullptr;
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(v.m));
  for (int64_t mm = 0; mm < v.m; ++mm)
    for (int64_t cc = 0; cc < v.cg; ++cc)
      for (int64_t r = 0; r < v.kh; ++r)
        for (int64_t s = 0; s < v.kw; ++s)
          if (!z[1]->test(v.wt(mm, cc, r, s)))
            taps[static_cast<size_t>(mm)].push_back(
                {v.in_channel(mm, cc), r, s, v.wt(mm, cc, r, s)});
  for (int64_t nn = 0; nn < v.n; ++nn)
    for (int64_t mm = 0; mm < v.m; ++mm) {
      if (bias && !bias->test(mm)) continue;
      for (int64_t i = 0; i < v.oh; ++i)
        for (int64_t j = 0; j < v.ow; ++j) {
          const int64_t o = v.y(nn, mm, i, j);
          if (residual && !residual->test(o)) continue;
          bool zero = true;
          for (const Tap& t : taps[static_cast<size_t>(mm)]) {
            const int64_t ih = i * v.sh - v.ph + t.r * v.dh, iw = j * v.sw - v.pw + t.s * v.dw;
            if (ih < 0 || ih >= v.h || iw < 0 || iw >= v.w) continue;  // padding is zero
            if (!z[0]->test(v.x(nn, t.other, ih, iw))) {
              zero = false;
              break;
            }
          }
          if (zero) y.set(o);
        }
    }
  return y;
}

void conv_backward(const Operator& op, const std::vector<Shape>& in, const Shape& out,
                   const Masks& z, const ElementMask& live, std::vector<ElementMask>& in_live) {
  const ConvView v = conv_view(op, in[0], in[1], out);
  // X[n,c,ih,iw] is live iff a live output reads it through a non-zero weight.
  // Per input channel and kernel offset (r, s): the output channels whose
  // weight there is non-zero. An offset that reads X from no output position
  // (stride skips it, or padding) costs one check, not one per output channel.
  const int64_t offsets = v.kh * v.kw;
  std::vector<std::vector<int64_t>> readers(static_cast<size_t>(v.c * offsets));
  for (int64_t mm = 0; mm < v.m; ++mm)
    for (int64_t cc = 0; cc < v.cg; ++cc)
      for (int64_t r = 0; r < v.kh; ++r)
        for (int64_t s = 0; s < v.kw; ++s)
          if (!z[1]->test(v.wt(mm, cc, r, s)))
            readers[static_cast<size_t>(v.in_channel(mm, cc) * offsets + r * v.kw + s)].push_back(
                mm);
  for (int64_t nn = 0; nn < v.n; ++nn)
    for (int64_t cc = 0; cc < v.c; ++cc)
      for (int64_t ih = 0; ih < v.h; ++ih)
        for (int64_t iw = 0; iw < v.w; ++iw) {
          bool found = false;
          for (int64_t r = 0; r < v.kh && !found; ++r) {
            const int64_t hnum = ih + v.ph - r * v.dh;
            if (hnum < 0 || hnum % v.sh != 0 || hnum / v.sh >= v.oh) continue;
            for (int64_t s = 0; s < v.kw && !found; ++s) {
              const int64_t wnum = iw + v.pw - s * v.dw;
              if (wnum < 0 || wnum % v.sw != 0 || wnum / v.sw >= v.ow) continue;
              for (int64_t mm : readers[static_cast<size_t>(cc * offsets + r * v.kw + s)])
                if (live.test(v.y(nn, mm, hnum / v.sh, wnum / v.sw))) {
                  found = true;
                  break;
                }
            }
          }
          if (found) in_live[0].set(v.x(nn, cc, ih, iw));
        }
  // W[m,c,r,s] is live iff some live output of channel m reads a non-zero X through it.
  // Whole dead output channels and all-zero input channels (channel pruning) skip the search.
  std::vector<char> out_channel_live(static_cast<size_t>(v.m), 0);
  std::vector<char> in_channel_nonzero(static_cast<size_t>(v.c), 0);
  for (int64_t nn = 0; nn < v.n; ++nn) {
    for (int64_t mm = 0; mm < v.m; ++mm)
      for (int64_t i = 0; i < v.oh * v.ow && !out_channel_live[static_cast<size_t>(mm)]; ++i)
        out_channel_live[static_cast<size_t>(mm)] = live.test(v.y(nn, mm, 0, 0) + i);
    for (int64_t cc = 0; cc < v.c; ++cc)
      for (int64_t i = 0; i < v.h * v.w && !in_channel_nonzero[static_cast<size_t>(cc)]; ++i)
        in_channel_nonzero[static_cast<size_t>(cc)] = !z[0]->test(v.x(nn, cc, 0, 0) + i);
  }
  for (int64_t mm = 0; mm < v.m; ++mm)
    for (int64_t cc = 0; cc < v.cg; ++cc)
      for (int64_t r = 0; r < v.kh; ++r)
        for (int64_t s = 0; s < v.kw; ++s) {
          const int64_t cin = v.in_channel(mm, cc);
          if (!out_channel_live[static_cast<size_t>(mm)] ||
              !in_channel_nonzero[static_cast<size_t>(cin)])
            continue;
          bool found = false;
          for (int64_t nn = 0; nn < v.n && !found; ++nn)
            // From the centre outwards: interior positions read no padding, so a
            // live weight is usually found at the first one.
            for (int64_t ii = 0; ii < v.oh && !found; ++ii)
              for (int64_t jj = 0; jj < v.ow && !found; ++jj) {
                const int64_t i = (ii + v.oh / 2) % v.oh, j = (jj + v.ow / 2) % v.ow;
                const int64_t ih = i * v.sh - v.ph + r * v.dh, iw = j * v.sw - v.pw + s * v.dw;
                if (ih < 0 || ih >= v.h || iw < 0 || iw >= v.w) continue;
                found = live.test(v.y(nn, mm, i, j)) && !z[0]->test(v.x(nn, cin, ih, iw));
              }
          if (found) in_live[1].set(v.wt(mm, cc, r, s));
        }
  if (in.size() > 2)
    for (int64_t nn = 0; nn < v.n; ++nn)
      for (int64_t mm = 0; mm < v.m; ++mm)
        for (int64_t i = 0; i < v.oh * v.ow; ++i)
          if (live.test(v.y(nn, mm, 0, 0) + i)) {
            in_live[2].set(mm);
            break;
          }
  if (in.size() > 3) in_live[3].merge(live);
}

// ---------------------------------------------------------------- generic rules

// Reductions (ReduceMean, GlobalAveragePool, ReduceSum, ReduceMax/Min,
// ReduceSumSquare, ReduceL1/L2): the output is zero iff every input element
// it reads is zero (its dependency region). ReduceProd (zero if any is) and
// ReduceLogSum/LogSumExp (not zero for zeros) are left to scrambling.
ElementMask aggregate_forward(const Operator& op, const std::vector<Shape>& in, const Shape& out,
                              const Masks& z) {
  ElementMask y(shape_numel(out));
  for (int64_t o = 0; o < y.size(); ++o) {
    bool zero = true;
    for (const InputDependency& d : tile_dependencies(op, in, out, element_region(o, out))) {
      if (d.operand != 0) continue;
      for_each_in_region(d.region, in[0], [&](int64_t f) { zero = zero && z[0]->test(f); });
    }
    if (zero) y.set(o);
  }
  return y;
}

// Any op: an input element is live iff the dependency region of some live
// output contains it. Whole live rows take one dependency call.
void dependency_backward(const Operator& op, const std::vector<Shape>& in, const Shape& out,
                         const ElementMask& live, std::vector<ElementMask>& in_live) {
  auto mark = [&](const Region& r) {
    for (const InputDependency& d : tile_dependencies(op, in, out, r))
      for_each_in_region(d.region, in[static_cast<size_t>(d.operand)],
                         [&](int64_t f) { in_live[static_cast<size_t>(d.operand)].set(f); });
  };
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  const int64_t row = out.empty() ? 1 : out.back();
  for (int64_t start = 0; start < n; start += row) {
    int64_t live_count = 0;
    for (int64_t e = start; e < start + row; ++e) live_count += live.test(e);
    if (live_count == 0) continue;
    if (live_count == row && !out.empty()) {
      Region r = element_region(start, out);
      r.begin.back() = 0;
      r.end.back() = row;
      mark(r);
      continue;
    }
    for (int64_t e = start; e < start + row; ++e)
      if (live.test(e)) mark(element_region(e, out));
  }
}

bool scramblable(const Operator& op) {
  // Integer operands (Gather's run-time indices, Cast's input) and outputs
  // (ToIndex's) are data, not float values to scramble.
  for (size_t i = 0; i < op.inputs.size(); ++i)
    if (operand_dtype(op, i) != DType::Float32) return false;
  return output_dtype(op) == DType::Float32;
}

}  // namespace

ElementMask scramble_zero(const Operator& op, const std::vector<Shape>& input_shapes,
                          const Shape& output_shape, const Masks& zeros,
                          const SparsityConfig& config) {
  const int64_t n = shape_numel(output_shape);
  ElementMask none(n);
  if (!config.evaluate || !scramblable(op)) return none;
  std::mt19937_64 rng(config.seed ^ (static_cast<uint64_t>(op.type) << 32) ^
                      static_cast<uint64_t>(n));
  std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
  std::vector<char> always_zero(static_cast<size_t>(n), 1);
  std::vector<std::vector<float>> data(input_shapes.size());
  std::vector<const std::vector<float>*> ptrs;
  for (const auto& d : data) ptrs.push_back(&d);
  for (int32_t trial = 0; trial < config.scramble_trials; ++trial) {
    for (size_t i = 0; i < data.size(); ++i) {
      data[i].assign(static_cast<size_t>(shape_numel(input_shapes[i])), 0.0f);
      for (size_t e = 0; e < data[i].size(); ++e)
        if (!zeros[i]->test(static_cast<int64_t>(e)))
          data[i][e] = (rng() & 1 ? 1.0f : -1.0f) * magnitude(rng);
    }
    std::vector<float> y;
    try {
      y = config.evaluate(op, ptrs, input_shapes, output_shape);
    } catch (const Error&) {
      return none;
    }
    bool any = false;
    for (int64_t e = 0; e < n; ++e) {
      char& z = always_zero[static_cast<size_t>(e)];
      z = z && y[static_cast<size_t>(e)] == 0.0f;
      any = any || z;
    }
    if (!any) break;
  }
  ElementMask out(n);
  for (int64_t e = 0; e < n; ++e)
    if (always_zero[static_cast<size_t>(e)]) out.set(e);
  return out;
}

ElementMask forward_zero(const Operator& op, const std::vector<Shape>& in, const Shape& out,
                         const Masks& z, const SparsityConfig& config, bool* used_scrambling) {
  if (used_scrambling) *used_scrambling = false;
  const int64_t n = shape_numel(out);
  ElementMask y(n);
  if (is_unary_elementwise(op.type)) {
    if (unary_keeps_zero(op)) y = *z[0];
    return y;
  }
  switch (op.type) {
    case OpType::Reshape:
    case OpType::Flatten:
      return *z[0];  // same row-major order
    case OpType::Transpose: {
      const std::vector<int64_t> map = transpose_map(in[0], op.attrs.perm);
      for (int64_t o = 0; o < n; ++o)
        if (z[0]->test(map[static_cast<size_t>(o)])) y.set(o);
      return y;
    }
    case OpType::Add:
    case OpType::Sub:
    case OpType::Mul:
    case OpType::Div: {
      const std::vector<int64_t> ma = broadcast_map(in[0], out), mb = broadcast_map(in[1], out);
      for (int64_t o = 0; o < n; ++o) {
        const bool za = z[0]->test(ma[static_cast<size_t>(o)]);
        const bool zb = z[1]->test(mb[static_cast<size_t>(o)]);
        // Table 2: + and − need both zero; × either; x / y a zero x over a y
        // not known to be zero (0 / 0 is NaN).
        const bool zero = op.type == OpType::Mul   ? za || zb
                          : op.type == OpType::Div ? za && !zb
                                                   : za && zb;
        if (zero) y.set(o);
      }
      return y;
    }
    case OpType::MatMul: {
      const ProductView v = matmul_view(in[0], in[1]);
      if (in.size() > 2) {  // a fused bias [N]: the added term of output (b, i, j) is bias[j]
        std::vector<int64_t> bias_map(static_cast<size_t>(n));
        for (int64_t o = 0; o < n; ++o) bias_map[static_cast<size_t>(o)] = o % v.n;
        y = product_forward(v, *z[0], *z[1], z[2], &bias_map, false, activation_keeps_zero(op));
      } else {
        y = product_forward(v, *z[0], *z[1], nullptr, nullptr, false, activation_keeps_zero(op));
      }
      // A fused residual (input 3, the output's shape) is added before the
      // activation: zero only where the residual is zero too.
      if (in.size() > 3) y = ~(~y | ~*z[3]);
      return y;
    }
    case OpType::Gemm: {
      const ProductView v = gemm_view(op, in[0], in[1]);
      const Shape mn = {v.m, v.n};
      std::vector<int64_t> c_map;
      ElementMask c_zero;
      if (in.size() > 2 && op.attrs.beta != 0.0f) {
        c_map = broadcast_map(in[2], mn);
        c_zero = *z[2];
      } else {
        c_map.assign(static_cast<size_t>(n), 0);
        c_zero = ~ElementMask(1);
      }
      y = product_forward(v, *z[0], *z[1], &c_zero, &c_map, op.attrs.alpha == 0.0f,
                          activation_keeps_zero(op));
      if (in.size() > 3) y = ~(~y | ~*z[3]);  // the fused residual, as for MatMul
      return y;
    }
    case OpType::Conv:
      return conv_forward(op, in, out, z);
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::GlobalAveragePool:
      return aggregate_forward(op, in, out, z);
    default:
      break;
  }
  if (used_scrambling) *used_scrambling = true;
  return scramble_zero(op, in, out, z, config);
}

std::vector<ElementMask> backward_live(const Operator& op, const std::vector<Shape>& in,
                                       const Shape& out, const Masks& z, const ElementMask& live) {
  std::vector<ElementMask> in_live;
  for (const Shape& s : in) in_live.emplace_back(shape_numel(s));
  const int64_t n = shape_numel(out);
  if (is_unary_elementwise(op.type) || op.type == OpType::Reshape || op.type == OpType::Flatten) {
    in_live[0] = live;
    return in_live;
  }
  if (op.type == OpType::Transpose) {
    const std::vector<int64_t> map = transpose_map(in[0], op.attrs.perm);
    for (int64_t o = 0; o < n; ++o)
      if (live.test(o)) in_live[0].set(map[static_cast<size_t>(o)]);
    return in_live;
  }
  if (is_broadcasting_elementwise(op.type)) {
    std::vector<std::vector<int64_t>> maps;
    for (const Shape& s : in) maps.push_back(broadcast_map(s, out));
    for (int64_t o = 0; o < n; ++o) {
      if (!live.test(o)) continue;
      for (size_t i = 0; i < in.size(); ++i) {
        const int64_t f = maps[i][static_cast<size_t>(o)];
        // x·y: a factor whose partner is zero does not matter (the product is 0).
        if (op.type == OpType::Mul && z[1 - i]->test(maps[1 - i][static_cast<size_t>(o)])) continue;
        // Where(c, X, Y): X is not read where the condition is zero.
        if (op.type == OpType::Where && i == 1 && z[0]->test(maps[0][static_cast<size_t>(o)]))
          continue;
        in_live[i].set(f);
      }
    }
    return in_live;
  }
  switch (op.type) {
    case OpType::MatMul: {
      const ProductView v = matmul_view(in[0], in[1]);
      product_backward(v, *z[0], *z[1], live, in_live[0], in_live[1]);
      if (in.size() > 2)  // the fused bias [N]
        for (int64_t o = 0; o < n; ++o)
          if (live.test(o)) in_live[2].set(o % v.n);
      if (in.size() > 3) in_live[3].merge(live);  // the fused residual, elementwise
      return in_live;
    }
    case OpType::Gemm: {
      const ProductView v = gemm_view(op, in[0], in[1]);
      if (op.attrs.alpha != 0.0f) product_backward(v, *z[0], *z[1], live, in_live[0], in_live[1]);
      if (in.size() > 2 && op.attrs.beta != 0.0f) {
        const std::vector<int64_t> c_map = broadcast_map(in[2], {v.m, v.n});
        for (int64_t o = 0; o < n; ++o)
          if (live.test(o)) in_live[2].set(c_map[static_cast<size_t>(o)]);
      }
      if (in.size() > 3) in_live[3].merge(live);  // the fused residual, elementwise
      return in_live;
    }
    case OpType::Conv:
      conv_backward(op, in, out, z, live, in_live);
      return in_live;
    default:
      dependency_backward(op, in, out, live, in_live);
      return in_live;
  }
}

std::vector<TensorSparsity> propagate_sparsity(Graph& graph, const SparsityConfig& config,
                                               SparsityReport* report) {
  const size_t count = graph.tensors.size();
  std::vector<TensorSparsity> tesa(count);
  std::vector<int64_t> before(count, 0);
  for (size_t t = 0; t < count; ++t) {
    const TensorInfo& info = graph.tensors[t];
    const int64_t n = shape_numel(info.shape);
    tesa[t].zero = ElementMask(n);
    tesa[t].dead = ElementMask(n);
    if (info.is_weight)
      for (int64_t e = 0; e < n; ++e)
        if (info.weight[static_cast<size_t>(e)] == 0.0f) tesa[t].zero.set(e);
    before[t] = tesa[t].zero.count();
    for (const SparsityAnnotation& a : config.annotations)
      if (a.tensor == info.name) tesa[t].bit_width = a.bit_width;
  }
  auto shapes_of = [&](const Operator& op) {
    std::vector<Shape> s;
    for (int32_t t : op.inputs) s.push_back(graph.tensors[static_cast<size_t>(t)].shape);
    return s;
  };
  auto zeros_of = [&](const Operator& op) {
    Masks m;
    for (int32_t t : op.inputs) m.push_back(&tesa[static_cast<size_t>(t)].zero);
    return m;
  };

  std::vector<std::string> scrambled;
  int32_t sweeps = 0;
  int64_t zeroed = 0;
  for (;;) {
    ++sweeps;
    // Forward: zeros flow from inputs to outputs (Table 2; scrambling otherwise).
    scrambled.clear();
    for (const Operator& op : graph.ops) {
      const size_t o = static_cast<size_t>(op.outputs[0]);
      bool used_scrambling = false;
      tesa[o].zero.merge(forward_zero(op, shapes_of(op), graph.tensors[o].shape, zeros_of(op),
                                      config, &used_scrambling));
      if (used_scrambling) scrambled.push_back(op.name);
    }
    // Backward: liveness flows from the graph outputs to every tensor.
    std::vector<ElementMask> live(count);
    for (size_t t = 0; t < count; ++t) live[t] = ElementMask(tesa[t].zero.size());
    for (int32_t t : graph.outputs) live[static_cast<size_t>(t)] = ~live[static_cast<size_t>(t)];
    for (size_t i = graph.ops.size(); i-- > 0;) {
      const Operator& op = graph.ops[i];
      const std::vector<Shape> shapes = shapes_of(op);
      const size_t o = static_cast<size_t>(op.outputs[0]);
      std::vector<ElementMask> in_live =
          backward_live(op, shapes, graph.tensors[o].shape, zeros_of(op), live[o]);
      for (size_t k = 0; k < op.inputs.size(); ++k)
        live[static_cast<size_t>(op.inputs[k])].merge(in_live[k]);
    }
    for (size_t t = 0; t < count; ++t) tesa[t].dead = ~live[t];
    // Dead weights become zeros: this changes no output, and may zero more.
    int64_t newly = 0;
    for (size_t t = 0; t < count; ++t) {
      TensorInfo& info = graph.tensors[t];
      if (!info.is_weight) continue;
      for (int64_t e = 0; e < tesa[t].dead.size(); ++e)
        if (tesa[t].dead.test(e) && !tesa[t].zero.test(e)) {
          info.weight[static_cast<size_t>(e)] = 0.0f;
          tesa[t].zero.set(e);
          ++newly;
        }
    }
    zeroed += newly;
    if (newly == 0) break;
  }

  if (report) {
    *report = SparsityReport{};
    report->ran = true;
    report->sweeps = sweeps;
    report->weights_zeroed = zeroed;
    std::vector<std::string> owner(count);
    for (const Operator& op : graph.ops) {
      owner[static_cast<size_t>(op.outputs[0])] = op.name;
      for (int32_t t : op.inputs)
        if (graph.tensors[static_cast<size_t>(t)].is_weight &&
            owner[static_cast<size_t>(t)].empty())
          owner[static_cast<size_t>(t)] = op.name;
    }
    for (int32_t t : graph.inputs) owner[static_cast<size_t>(t)] = "(model-input)";
    for (size_t t = 0; t < count; ++t) {
      const TensorInfo& info = graph.tensors[t];
      report->tensors.push_back({info.name, info.is_weight, owner[t], tesa[t].zero.size(),
                                 before[t], tesa[t].pruned().count(), tesa[t].bit_width});
    }
    if (!scrambled.empty()) {
      std::string list;
      for (const std::string& s : scrambled) list += (list.empty() ? "" : ", ") + s;
      report->notes.push_back(
          config.evaluate
              ? "TeSA: tensor scrambling (" + std::to_string(config.scramble_trials) +
                    " random draws) for ops without an algebra rule: " + list
              : "TeSA: no algebra rule and no evaluator for scrambling, no zeros propagated "
                "through: " +
                    list);
    }
  }
  return tesa;
}

}  // namespace tessera::graph
