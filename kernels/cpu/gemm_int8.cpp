// The int8 GEMM's driver, B quantization and portable path (baseline x86-64);
// the row kernels for AVX-512 VNNI and AVX2 are gemm_int8_avx512.cpp and
// gemm_int8_avx2.cpp.
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

// The AVX2 row kernel needs what the SGEMM's AVX2 microkernels need.
bool cpu_has_avx2() {
  return gemm_isa_supported(GemmIsa::kAvx2);
}

std::atomic<Int8Isa> g_int8_isa{cpu_has_vnni()   ? Int8Isa::kAvx512Vnni
                                : cpu_has_avx2() ? Int8Isa::kAvx2
                                                 : Int8Isa::kPortable};

// Rows per quantized block: 96 rows × K bytes stay in L2 for any K the
// models have, and the block's rows are reused across every panel.
constexpr int64_t kRowBlock = 96;

struct Int8Scratch {
  std::vector<uint8_t> qa;
  std::vector<float> sa;
};

}  // namespace

bool int8_isa_supported(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kPortable:
      return true;
    case Int8Isa::kAvx512Vnni:
      return cpu_has_vnni();
    case Int8Isa::kAvx2:
      return cpu_has_avx2();
  }
  return false;
}

std::string_view int8_isa_name(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kAvx512Vnni:
      return "avx512-vnni";
    case Int8Isa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

double int8_relative_cost(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kAvx512Vnni:
      return 0.33;
    case Int8Isa::kAvx2:
      return 0.65;
    case Int8Isa::kPortable:
      break;
  }
  return 12.0;
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

double int8_block_coverage(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed) {
  const int64_t kb = (k + kInt8Block - 1) / kInt8Block, nb = (n + kInt8Block - 1) / kInt8Block;
  std::vector<char> used(static_cast<size_t>(kb * nb), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      if ((transposed ? b[j * ldb + kk] : b[kk * ldb + j]) != 0.0f)
        used[static_cast<size_t>((kk / kInt8Block) * nb + j / kInt8Block)] = 1;
  return static_cast<double>(std::count(used.begin(), used.end(), 1)) /
         static_cast<double>(kb * nb);
}

QuantizedMatrix quantize_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                           Int8Layout layout) {
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
  q.layout_ = layout;
  // Every column quantized dense first ([column][k], K rounded up to whole
  // blocks, zero past K); the layout then copies what it stores.
  const int64_t columns = q.strips() * kInt8Block;
  const int64_t depth = (k + kInt8Block - 1) / kInt8Block * kInt8Block;
  std::vector<int8_t> qb(static_cast<size_t>(columns * depth), 0);
  q.scale_.assign(static_cast<size_t>(columns), 0.0f);
  q.compensation_.assign(static_cast<size_t>(columns), 0);
  // In B's storage order (the strided walk down each column of a row-major
  // B was most of a BERT model's load time).
  std::vector<float> inv(static_cast<size_t>(n), 0.0f), amax(static_cast<size_t>(n), 0.0f);
  const int64_t outer = transposed ? n : k, inner = transposed ? k : n;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float v = b[o * ldb + i];
      if (!std::isfinite(v))
        throw std::invalid_argument("quantize_b: weight (" + std::to_string(transposed ? i : o) +
                                    ", " + std::to_string(transposed ? o : i) + ") is not finite");
      float& m = amax[static_cast<size_t>(transposed ? o : i)];
      m = std::max(m, std::fabs(v));
    }
  for (int64_t j = 0; j < n; ++j)
    int8_detail::row_scale(amax[static_cast<size_t>(j)], &q.scale_[static_cast<size_t>(j)],
                           &inv[static_cast<size_t>(j)]);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t kk = transposed ? i : o, j = transposed ? o : i;
      const auto v = static_cast<int8_t>(
          int8_detail::quantize_scalar(b[o * ldb + i], inv[static_cast<size_t>(j)]) - 128);
      qb[static_cast<size_t>(j * depth + kk)] = v;
      q.compensation_[static_cast<size_t>(j)] += 128 * v;
    }
  // One group: 16 columns × 4 k, column-major within (vpdpbusd's operand).
  const auto store_group = [&](int8_t* out, int64_t column0, int64_t kk0) {
    for (int64_t lane = 0; lane < QuantizedMatrix::kPanel; ++lane)
      for (int64_t t = 0; t < 4; ++t)
        out[lane * 4 + t] = qb[static_cast<size_t>((column0 + lane) * depth + kk0 + t)];
  };
  const auto allocate = [&](int64_t bytes) {
    q.data_.reset(static_cast<int8_t*>(std::aligned_alloc(64, static_cast<size_t>(bytes))));
    if (!q.data_) throw std::bad_alloc();
  };
  if (layout == Int8Layout::kDense) {
    allocate(std::max<int64_t>(q.panels() * q.k_groups() * 64, 64));
    for (int64_t p = 0; p < q.panels(); ++p)
      for (int64_t g = 0; g < q.k_groups(); ++g)
        store_group(q.data_.get() + (p * q.k_groups() + g) * 64, p * QuantizedMatrix::kPanel,
                    g * 4);
    return q;
  }
  const int64_t k_blocks = depth / kInt8Block;
  const auto block_is_zero = [&](int64_t s, int64_t kb) {
    for (int64_t j = s * kInt8Block; j < (s + 1) * kInt8Block; ++j)
      for (int64_t kk = kb * kInt8Block; kk < (kb + 1) * kInt8Block; ++kk)
        if (qb[static_cast<size_t>(j * depth + kk)] != 0) return false;
    return true;
  };
  q.strip_blocks_.push_back(0);
  for (int64_t s = 0; s < q.strips(); ++s) {
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      if (!block_is_zero(s, kb)) q.block_group_.push_back(static_cast<int32_t>(kb * 8));
    q.strip_blocks_.push_back(q.stored_blocks());
  }
  allocate(std::max<int64_t>(q.stored_blocks() * 1024, 64));
  for (int64_t s = 0; s < q.strips(); ++s)
    for (int64_t i = q.strip_blocks_[s]; i < q.strip_blocks_[s + 1]; ++i)
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t g = 0; g < 8; ++g)
          store_group(q.data_.get() + i * 1024 + half * 512 + g * 64,
                      s * kInt8Block + half * QuantizedMatrix::kPanel, (q.block_group_[i] + g) * 4);
  return q;
}

namespace int8_detail {

void epilogue_portable(float* c, int64_t ldc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                       const GemmEpilogue& ep) {
  const bool before = ep.residual_position == GemmResidual::kBeforeActivation;
  for (int64_t m = m0; m < m1; ++m) {
    float* row = c + m * ldc;
    const float* residual = ep.residual ? ep.residual + m * ep.ld_residual : nullptr;
    if (ep.bias_kind == GemmBias::kPerColumn)
      for (int64_t n = n0; n < n1; ++n) row[n] += ep.bias[n];
    if (ep.bias_kind == GemmBias::kPerRow)
      for (int64_t n = n0; n < n1; ++n) row[n] += ep.bias[m];
    if (residual && before)
      for (int64_t n = n0; n < n1; ++n) row[n] += residual[n];
    apply_activation_span(ep, row + n0, n1 - n0);
    if (residual && !before)
      for (int64_t n = n0; n < n1; ++n) row[n] += residual[n];
  }
}

void needed_k_blocks(const RowBlock& blk, std::vector<char>& needed) {
  needed.clear();
  const QuantizedMatrix& b = *blk.b;
  if (b.layout() != Int8Layout::kBlocks32) return;
  const int64_t s0 = blk.n0 / kInt8Block, s1 = (blk.n1 + kInt8Block - 1) / kInt8Block;
  needed.assign(static_cast<size_t>(b.a_groups() * 4 / kInt8Block), 0);
  for (int64_t i = b.strip_blocks()[s0]; i < b.strip_blocks()[s1]; ++i)
    needed[static_cast<size_t>(b.block_group()[i] / 8)] = 1;
}

void rows_portable(const RowBlock& blk) {
  const QuantizedMatrix& b = *blk.b;
  const int64_t k = b.k(), padded = b.a_groups() * 4;
  for (int64_t m = blk.m0; m < blk.m1; ++m) {
    const float* a = blk.a + m * blk.lda;
    uint8_t* qa = blk.qa + (m - blk.m0) * blk.qa_stride;
    float amax = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(a[kk]));
    float inv = 0.0f;
    float& sa = blk.sa[m - blk.m0];
    row_scale(amax, &sa, &inv);
    for (int64_t kk = 0; kk < k; ++kk) qa[kk] = quantize_scalar(a[kk], inv);
    for (int64_t kk = k; kk < padded; ++kk) qa[kk] = 128;
    float* c = blk.c + m * blk.ldc;
    for (int64_t j = blk.n0; j < blk.n1; ++j) {
      // Groups of 64 bytes, each 16 columns × 4 k; this column's 4 bytes at lane·4.
      const auto dot = [&](const int8_t* groups, int64_t group0, int64_t count) {
        int32_t acc = 0;
        const int8_t* lane = groups + (j % QuantizedMatrix::kPanel) * 4;
        for (int64_t g = 0; g < count; ++g)
          for (int t = 0; t < 4; ++t)
            acc += int32_t{qa[(group0 + g) * 4 + t]} * int32_t{lane[g * 64 + t]};
        return acc;
      };
      int32_t acc = 0;
      if (b.layout() == Int8Layout::kDense) {
        acc = dot(b.panel(j / QuantizedMatrix::kPanel), 0, b.k_groups());
      } else {
        const int64_t s = j / kInt8Block, half = (j % kInt8Block) / QuantizedMatrix::kPanel;
        for (int64_t i = b.strip_blocks()[s]; i < b.strip_blocks()[s + 1]; ++i)
          acc += dot(b.block(i) + half * 512, b.block_group()[i], 8);
      }
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
  blk.qa_stride = (b.a_groups() * 4 + 63) / 64 * 64;
  const int64_t rows = std::min(kRowBlock, tile.m1 - tile.m0);
  scratch.qa.resize(static_cast<size_t>(rows * blk.qa_stride));
  scratch.sa.resize(static_cast<size_t>(rows));
  blk.qa = scratch.qa.data();
  blk.sa = scratch.sa.data();
  auto run = int8_detail::rows_portable;
  auto finish = int8_detail::epilogue_portable;
  if (b.isa() == Int8Isa::kAvx512Vnni) {
    run = int8_detail::rows_avx512_vnni;
    finish = int8_detail::epilogue_avx512;
  } else if (b.isa() == Int8Isa::kAvx2) {
    run = int8_detail::rows_avx2;
    finish = int8_detail::epilogue_avx2;
  }
  const bool has_epilogue = epilogue.bias_kind != GemmBias::kNone || epilogue.residual ||
                            epilogue.activation != GemmActivation::kNone;
  for (int64_t m = tile.m0; m < tile.m1; m += kRowBlock) {
    blk.m0 = m;
    blk.m1 = std::min(tile.m1, m + kRowBlock);
    run(blk);
    if (has_epilogue) finish(c, ldc, blk.m0, blk.m1, tile.n0, tile.n1, epilogue);
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
