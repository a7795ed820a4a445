// The int8 GEMM's driver, B quantization and portable path (baseline x86-64);
// the AVX-512 VNNI row kernel is gemm_int8_avx512.cpp.
#include "kernels/cpu/gemm_int8.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/gemm_int8_impl.hpp"

namespace tessera::kernels::cpu {
namespace {

using int8_detail::RowBlock;

bool cpu_has_vnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
  return has;
}

std::atomic<Int8Isa> g_int8_isa{cpu_has_vnni() ? Int8Isa::kAvx512Vnni : Int8Isa::kPortable};

// Rows per quantized block: 96 rows × K bytes stay in L2 for any K the
// models have, and the block's rows are reused across every panel.
constexpr int64_t kRowBlock = 96;

struct Int8Scratch {
  std::vector<uint8_t> qa;
  std::vector<float> sa;
};

// The epilogue on C[m, n0:n1], in apply_epilogue_scalar()'s order (the
// activation through apply_activation_span(): the same bits).
void apply_epilogue_row(float* row, int64_t m, int64_t n0, int64_t n1, const GemmEpilogue& ep) {
  const bool before = ep.residual_position == GemmResidual::kBeforeActivation;
  const float* residual = ep.residual ? ep.residual + m * ep.ld_residual : nullptr;
  if (ep.bias_kind == GemmBias::kPerColumn)
    for (int64_t n = n0; n < n1; ++n) row[n] += ep.bias[n];
  if (ep.bias_kind == GemmBias::kPerRow)
    for (int64_t n = n0; n < n1; ++n) row[n] += ep.bias[m];
  if (residual && before)
    for (int64_t n = n0; n < n1; ++n) row[n] += residual[n];
  apply_activation_span(ep.activation, ep.clip_min, ep.clip_max, row + n0, n1 - n0);
  if (residual && !before)
    for (int64_t n = n0; n < n1; ++n) row[n] += residual[n];
}

}  // namespace

bool int8_isa_supported(Int8Isa isa) {
  return isa == Int8Isa::kPortable || cpu_has_vnni();
}

std::string_view int8_isa_name(Int8Isa isa) {
  return isa == Int8Isa::kAvx512Vnni ? "avx512-vnni" : "portable";
}

Int8Isa int8_isa() {
  return g_int8_isa.load(std::memory_order_relaxed);
}

void set_int8_isa(Int8Isa isa) {
  if (!int8_isa_supported(isa))
    throw std::invalid_argument("this CPU cannot run the " + std::string(int8_isa_name(isa)) +
                                " int8 GEMM");
  g_int8_isa.store(isa, std::memory_order_relaxed);
}

void QuantizedMatrix::Free::operator()(int8_t* p) const {
  std::free(p);
}

QuantizedMatrix quantize_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed) {
  if (k < 1 || n < 1 || ldb < (transposed ? k : n))
    throw std::invalid_argument("quantize_b: bad shape K=" + std::to_string(k) +
                                " N=" + std::to_string(n) + " ldb=" + std::to_string(ldb));
  // 255 · 127 · K must fit an s32 sum with room for the compensation.
  if (k >= (int64_t{1} << 16))
    throw std::invalid_argument("quantize_b: K=" + std::to_string(k) +
                                " is too deep for s32 sums of u8·s8 products (K < 65536)");
  QuantizedMatrix q;
  q.k_ = k;
  q.n_ = n;
  q.isa_ = int8_isa();
  const auto at = [&](int64_t kk, int64_t j) {
    return transposed ? b[j * ldb + kk] : b[kk * ldb + j];
  };
  const int64_t columns = q.panels() * QuantizedMatrix::kPanel;
  const int64_t bytes = q.panels() * q.k_groups() * QuantizedMatrix::kPanel * 4;
  q.data_.reset(static_cast<int8_t*>(std::aligned_alloc(64, static_cast<size_t>(bytes))));
  if (!q.data_) throw std::bad_alloc();
  std::memset(q.data_.get(), 0, static_cast<size_t>(bytes));
  q.scale_.assign(static_cast<size_t>(columns), 0.0f);
  q.compensation_.assign(static_cast<size_t>(columns), 0);
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = at(kk, j);
      if (!std::isfinite(v))
        throw std::invalid_argument("quantize_b: weight (" + std::to_string(kk) + ", " +
                                    std::to_string(j) + ") is not finite");
      amax = std::max(amax, std::fabs(v));
    }
    float inv = 0.0f;
    int8_detail::row_scale(amax, &q.scale_[static_cast<size_t>(j)], &inv);
    int8_t* panel = q.data_.get() + (j / QuantizedMatrix::kPanel) * q.k_groups() * 64;
    const int64_t lane = j % QuantizedMatrix::kPanel;
    int32_t sum = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      const auto v = static_cast<int8_t>(int8_detail::quantize_scalar(at(kk, j), inv) - 128);
      panel[(kk / 4) * 64 + lane * 4 + kk % 4] = v;
      sum += v;
    }
    q.compensation_[static_cast<size_t>(j)] = 128 * sum;
  }
  return q;
}

namespace int8_detail {

void rows_portable(const RowBlock& blk) {
  const QuantizedMatrix& b = *blk.b;
  const int64_t k = b.k(), groups = b.k_groups();
  for (int64_t m = blk.m0; m < blk.m1; ++m) {
    const float* a = blk.a + m * blk.lda;
    uint8_t* qa = blk.qa + (m - blk.m0) * blk.qa_stride;
    float amax = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(a[kk]));
    float inv = 0.0f;
    float& sa = blk.sa[m - blk.m0];
    row_scale(amax, &sa, &inv);
    for (int64_t kk = 0; kk < k; ++kk) qa[kk] = quantize_scalar(a[kk], inv);
    for (int64_t kk = k; kk < groups * 4; ++kk) qa[kk] = 128;
    float* c = blk.c + m * blk.ldc;
    for (int64_t j = blk.n0; j < blk.n1; ++j) {
      const int8_t* panel =
          b.panel(j / QuantizedMatrix::kPanel) + (j % QuantizedMatrix::kPanel) * 4;
      int32_t acc = 0;
      for (int64_t g = 0; g < groups; ++g)
        for (int t = 0; t < 4; ++t) acc += int32_t{qa[g * 4 + t]} * int32_t{panel[g * 64 + t]};
      const float scale = sa * b.scale()[j];
      c[j] = static_cast<float>(acc - b.compensation()[j]) * scale;
    }
  }
}

}  // namespace int8_detail

void int8_gemm_tile(const float* a, int64_t lda, const QuantizedMatrix& b, float* c, int64_t ldc,
                    const GemmTile& tile, const GemmEpilogue& epilogue) {
  if (epilogue.accumulate)
    throw std::invalid_argument("int8_gemm_tile: accumulate is not supported");
  if (tile.m0 < 0 || tile.m1 < tile.m0 || tile.n0 < 0 || tile.n1 < tile.n0 || tile.n1 > b.n() ||
      lda < b.k() || ldc < tile.n1)
    throw std::invalid_argument("int8_gemm_tile: bad tile or leading dimension");
  if (tile.m1 == tile.m0 || tile.n1 == tile.n0) return;
  thread_local Int8Scratch scratch;
  RowBlock blk{.a = a, .lda = lda, .b = &b, .c = c, .ldc = ldc, .n0 = tile.n0, .n1 = tile.n1};
  // Rows padded to 64 bytes so every row starts cache-aligned.
  blk.qa_stride = (b.k_groups() * 4 + 63) / 64 * 64;
  const int64_t rows = std::min(kRowBlock, tile.m1 - tile.m0);
  scratch.qa.resize(static_cast<size_t>(rows * blk.qa_stride));
  scratch.sa.resize(static_cast<size_t>(rows));
  blk.qa = scratch.qa.data();
  blk.sa = scratch.sa.data();
  const auto run =
      b.isa() == Int8Isa::kAvx512Vnni ? int8_detail::rows_avx512_vnni : int8_detail::rows_portable;
  const bool has_epilogue = epilogue.bias_kind != GemmBias::kNone || epilogue.residual ||
                            epilogue.activation != GemmActivation::kNone;
  for (int64_t m = tile.m0; m < tile.m1; m += kRowBlock) {
    blk.m0 = m;
    blk.m1 = std::min(tile.m1, m + kRowBlock);
    run(blk);
    if (has_epilogue)
      for (int64_t r = blk.m0; r < blk.m1; ++r)
        apply_epilogue_row(c + r * ldc, r, tile.n0, tile.n1, epilogue);
  }
}

double int8_error_bound(const float* a_row, const float* b, int64_t k, int64_t n_index, int64_t ldb,
                        bool transposed) {
  double amax = 0.0, bmax = 0.0, sum_a = 0.0, sum_b = 0.0, exact = 0.0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const double bv = transposed ? b[n_index * ldb + kk] : b[kk * ldb + n_index];
    amax = std::max(amax, std::fabs(double{a_row[kk]}));
    bmax = std::max(bmax, std::fabs(bv));
    sum_a += std::fabs(double{a_row[kk]});
    sum_b += std::fabs(bv);
    exact += std::fabs(double{a_row[kk]} * bv);
  }
  const double ea = amax / 127.0 / 2.0, eb = bmax / 127.0 / 2.0;
  // The rounding of a·inv adds at most one float ulp to each half step.
  const double slack = 1e-5 * (exact + sum_a * bmax + sum_b * amax);
  return sum_a * eb + sum_b * ea + static_cast<double>(k) * ea * eb + slack;
}

}  // namespace tessera::kernels::cpu
