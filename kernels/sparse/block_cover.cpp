// The weighted block cover (SparTA §3.3, Algorithm 3) as an exact pass over
// the nested aligned grids, and the per-machine block costs it weighs with.
#include "kernels/sparse/block_cover.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

#include "kernels/sparse/sparse_gemm.hpp"

namespace tessera::kernels::sparse {
namespace {

// The density crossovers, measured with `bench_spmm --crossover --min`
// (1024³, one thread, AVX-512 Xeon shared with other jobs, fastest of 7,
// against Tessera's dense SGEMM in the same run: 18.5 ms): the fraction of
// B a format may store (elements it multiplies / K·N) before it is slower
// than the dense SGEMM. Their inverses are the built-in costs.
//  - CSR (64-row panels, L1 k-blocks): 8.7 ms at 30%, 15.4 ms at 50%,
//    19.0 ms at 60% ⇒ breaks even near 58%.
constexpr double kCsrDensityCrossover = 0.58;
//  - BSR, from block densities 30–90%: 4×1 (4 lanes: a quarter of the
//    FMA width) 41.2 ms at 30% ⇒ ~13%; 8×1 (8 lanes) 16.0 ms at 30%, 23.3
//    at 50% ⇒ ~37%; 16×1 12.2 ms at 50%, 23.0 at 70% ⇒ ~60%; 32×32 6.6 ms
//    at 30%, 16.0 at 90% (0.85× dense per stored element plus ~1.8 ms of A
//    packing and C writes) ⇒ ~95%.
constexpr double kBsrDensityCrossover[kSparseBlockShapeCount] = {0.13, 0.37, 0.60, 0.95};
// A part beyond the first re-packs the chunk's rows of A (K floats a row)
// and passes over its rows of C (N floats) again, whatever it stores. When
// these constants were set that was ~1.8 ms of the 18.5 ms dense time at
// 1024³ (≈ 50 dense multiply-adds' time per float of a row of A and C).
// The kernels have since lost most of it: bench_spmm (1024³, 1 thread, 2-core
// Zen 5 EPYC, dense 8.8 ms), 32×32 blocks at 90% plus 1% unstructured ran
// 1.84 ms as BSR + CSR against 1.25 ms for the blocks alone and 0.57 ms for
// a 1% CSR alone, and the time of each format against its density has an
// intercept of ~4% of the dense time (CSR 1–50%, BSR 32×32 10–90%): about
// 0.04 · 1024² / (1024 + 1024) ≈ 20 per float. At 50 the cover chose CSR
// alone for that weight (2.13 ms, 4.1× dense); at 20 BSR + CSR (1.86 ms,
// 4.75×), and on the mixed 32×32 + 16×1 + scattered weight BSR 32×32 + CSR
// (2.05 ms) over CSR alone (2.13 ms). The pruned ResNet-50, MobileNetV2 and
// BERT of bench/e2e/compare_sparse.py compile to the same plans either way.
constexpr double kExtraPartPerRowFloat = 20.0;

constexpr const char* kCostsEnv = "TESSERA_SPARSE_COSTS";
constexpr const char* kCacheHeader = "tessera sparse costs 1";

// B[k][n] whichever way it is stored.
struct WeightView {
  const float* b;
  int64_t ldb;
  bool transposed;
  float at(int64_t k, int64_t n) const { return transposed ? b[n * ldb + k] : b[k * ldb + n]; }
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown cpu" : line.substr(start);
  }
  return "unknown cpu";
}

bool plausible_cost(double x) {
  return std::isfinite(x) && x > 0.0 && x < 1000.0;
}

// Seconds of the fastest of `runs` calls of f.
template <class F>
double fastest(int runs, F&& f) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

SparseCosts load_sparse_costs() {
  // Measured costs are opt-in: the ~0.1 s calibration (one 128-row chunk,
  // 768 x 768, each shape at half its blocks) ranked 16x1 blocks ahead of
  // 32x32 on this project's Xeon, which then ran bench_spmm's 1024^3 32x32
  // case at 1.40x dense instead of 2.44x. Until the cover profiles each op's
  // own candidates (SparTA Algorithm 3, Profile), the constants measured on
  // the whole bench_spmm cases are the better default.
  const char* env = std::getenv(kCostsEnv);
  const std::string mode = env ? env : "";
  if (mode != "measure") {
    SparseCosts costs = builtin_sparse_costs();
    costs.source = mode.empty() ? std::string("built-in (") + kCostsEnv +
                                      "=measure times this machine's kernels instead)"
                   : mode == "builtin" ? std::string("built-in (") + kCostsEnv + "=builtin)"
                                       : std::string("built-in (") + kCostsEnv + "=" + mode +
                                             " is not understood; the values are builtin and "
                                             "measure)";
    return costs;
  }
  const std::string key = sparse_cost_cache_key();
  const std::string path = sparse_cost_cache_path();
  if (!path.empty() && std::filesystem::exists(path)) {
    std::string error;
    if (auto cached = read_sparse_costs(path, key, &error)) {
      cached->source = "measured on this machine, cached in " + path;
      return *cached;
    }
    SparseCosts costs = builtin_sparse_costs();
    costs.source =
        "built-in (the cache " + path + " is unusable: " + error + "; delete it to measure again)";
    return costs;
  }
  SparseCosts costs = measure_sparse_costs();
  if (path.empty()) {
    costs.source = "measured on this machine (not cached: neither XDG_CACHE_HOME nor HOME is set)";
    return costs;
  }
  std::string error;
  costs.source = write_sparse_costs(path, key, costs, &error)
                     ? "measured on this machine, cached in " + path
                     : "measured on this machine (not cached: " + error + ")";
  return costs;
}

std::string block_shape_name(int block) {
  if (block < 0 || block >= kSparseBlockShapeCount) return "1x1";
  const SparseBlockShape& s = kSparseBlockShapes[block];
  return std::to_string(s.n) + "x" + std::to_string(s.k);
}

SparseCosts builtin_sparse_costs() {
  SparseCosts costs;
  costs.csr = 1.0 / kCsrDensityCrossover;
  for (int s = 0; s < kSparseBlockShapeCount; ++s) costs.block[s] = 1.0 / kBsrDensityCrossover[s];
  costs.extra_part = kExtraPartPerRowFloat;
  costs.source = "built-in";
  return costs;
}

const SparseCosts& sparse_costs() {
  static std::once_flag once[3];
  static SparseCosts costs[3];
  const int isa = std::clamp(static_cast<int>(cpu::gemm_isa()), 0, 2);
  std::call_once(once[isa], [&] { costs[isa] = load_sparse_costs(); });
  return costs[isa];
}

SparseCosts measure_sparse_costs() {
  // One row chunk of the sparse kernels (128 rows): A and C stay in L2 as
  // they do in a real run; K = N = 768 is large enough that the per-call
  // overheads are small and small enough for ~0.1 s in all. CSR at 30%
  // density, where it competes with the dense kernel and the blocks.
  constexpr int64_t M = 128, K = 768, N = 768;
  constexpr int kRuns = 5;
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<float> a(static_cast<size_t>(M * K)), c(static_cast<size_t>(M * N));
  for (float& x : a) x = value(rng);
  std::vector<float> b(static_cast<size_t>(K * N));
  for (float& x : b) x = value(rng);
  const GemmTile tile{.m0 = 0, .m1 = M, .n0 = 0, .n1 = N};
  const cpu::PackedMatrix dense = cpu::pack_b(b.data(), K, N, N, false);
  auto dense_time = [&] {
    return fastest(kRuns, [&] { cpu::gemm_tile(a.data(), K, dense, c.data(), N, tile); });
  };
  // Each format's fastest time per float it multiplies; divided by the
  // dense time per element at the end, the fastest dense run of those
  // before and after them all (on a shared machine, one quiet moment for
  // the dense kernel would otherwise inflate every ratio).
  double fastest_dense = dense_time();
  auto seconds_per_float = [&](const SparseMatrix& m) {
    sparse_gemm_tile(a.data(), K, m, c.data(), N, tile);  // warm the scratch
    const double t = fastest(kRuns, [&] { sparse_gemm_tile(a.data(), K, m, c.data(), N, tile); });
    return t / static_cast<double>(std::max<int64_t>(1, m.stored_elements()));
  };
  SparseCosts costs = builtin_sparse_costs();
  // CSR at 30% unstructured density.
  std::vector<float> sparse(b.size());
  for (size_t i = 0; i < b.size(); ++i) sparse[i] = coin(rng) < 0.3 ? b[i] : 0.0f;
  {
    const SparseMatrix m = pack_sparse_b(sparse.data(), K, N, N, false, {.block = -1});
    costs.csr = seconds_per_float(m);
  }
  // Each block shape with half of its blocks stored (dense inside).
  for (int s = 0; s < kSparseBlockShapeCount; ++s) {
    const SparseBlockShape shape = kSparseBlockShapes[s];
    std::fill(sparse.begin(), sparse.end(), 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += shape.k)
      for (int64_t n0 = 0; n0 < N; n0 += shape.n) {
        if (coin(rng) >= 0.5) continue;
        for (int64_t kk = k0; kk < std::min(K, k0 + shape.k); ++kk)
          for (int64_t j = n0; j < std::min(N, n0 + shape.n); ++j)
            sparse[kk * N + j] = b[kk * N + j];
      }
    const SparseMatrix m =
        pack_sparse_b(sparse.data(), K, N, N, false, {.block = s, .min_block_nonzeros = 1});
    costs.block[s] = seconds_per_float(m);
  }
  fastest_dense = std::min(fastest_dense, dense_time());
  const double dense_per_float = fastest_dense / static_cast<double>(K * N);
  costs.csr /= dense_per_float;
  for (double& x : costs.block) x /= dense_per_float;
  for (double x : costs.block)
    if (!plausible_cost(x)) return builtin_sparse_costs();
  if (!plausible_cost(costs.csr)) return builtin_sparse_costs();
  costs.source = "measured on this machine";
  return costs;
}

std::string sparse_cost_cache_key() {
  return cpu_model_name() + " | " + std::string(cpu::gemm_isa_name(cpu::gemm_isa()));
}

std::string sparse_cost_cache_path() {
  std::filesystem::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    dir = std::filesystem::path(xdg) / "tessera";
  else if (const char* home = std::getenv("HOME"); home && *home)
    dir = std::filesystem::path(home) / ".cache" / "tessera";
  else
    return {};
  char name[64];
  std::snprintf(name, sizeof name, "sparse_costs_%016llx.txt",
                static_cast<unsigned long long>(fnv1a(sparse_cost_cache_key())));
  return (dir / name).string();
}

std::optional<SparseCosts> read_sparse_costs(const std::string& path, const std::string& key,
                                             std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<SparseCosts> {
    if (error) *error = why;
    return std::nullopt;
  };
  std::ifstream in(path);
  if (!in) return fail("cannot be opened");
  std::string line;
  if (!std::getline(in, line) || line != kCacheHeader) return fail("not a sparse cost file");
  if (!std::getline(in, line) || line != "key " + key)
    return fail("written for another CPU or ISA than \"" + key + "\"");
  SparseCosts costs = builtin_sparse_costs();
  auto read_value = [&](const std::string& name, double& out) {
    if (!std::getline(in, line) || line.rfind(name + " ", 0) != 0) return false;
    const std::string text = line.substr(name.size() + 1);
    char* end = nullptr;
    out = std::strtod(text.c_str(), &end);
    return end != text.c_str() && *end == '\0' && plausible_cost(out);
  };
  if (!read_value("csr", costs.csr)) return fail("bad or missing \"csr\" line");
  for (int s = 0; s < kSparseBlockShapeCount; ++s) {
    const std::string name = "bsr" + block_shape_name(s);
    if (!read_value(name, costs.block[s])) return fail("bad or missing \"" + name + "\" line");
  }
  return costs;
}

bool write_sparse_costs(const std::string& path, const std::string& key, const SparseCosts& costs,
                        std::string* error) {
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  // Written to a temporary name and renamed: concurrent compiles see either
  // no file or a whole one.
  const std::string temporary = path + ".tmp" + std::to_string(std::random_device{}());
  {
    std::ofstream out(temporary);
    if (out) {
      char text[64];
      out << kCacheHeader << "\nkey " << key << "\n";
      std::snprintf(text, sizeof text, "%.4f", costs.csr);
      out << "csr " << text << "\n";
      for (int s = 0; s < kSparseBlockShapeCount; ++s) {
        std::snprintf(text, sizeof text, "%.4f", costs.block[s]);
        out << "bsr" << block_shape_name(s) << " " << text << "\n";
      }
    }
    if (!out) {
      if (error) *error = "cannot write " + temporary;
      std::filesystem::remove(temporary, ec);
      return false;
    }
  }
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    if (error) *error = "cannot rename " + temporary + " to " + path + ": " + ec.message();
    std::filesystem::remove(temporary, ec);
    return false;
  }
  return true;
}

int BlockCover::parts() const {
  int p = csr_nonzeros > 0 ? 1 : 0;
  for (const auto& b : blocks) p += b.empty() ? 0 : 1;
  return p;
}

int64_t block_strips(int64_t n, int block) {
  const int bn = kSparseBlockShapes[block].n;
  return (n + bn - 1) / bn;
}

int64_t block_k_blocks(int64_t k, int block) {
  const int bk = kSparseBlockShapes[block].k;
  return (k + bk - 1) / bk;
}

BlockCover weighted_block_cover(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                                const SparseCosts& costs) {
  if (k < 0 || n < 0 || ldb < (transposed ? k : n))
    throw std::invalid_argument("weighted_block_cover: bad shape or leading dimension");
  static_assert(kSparseBlockShapeCount == 4, "the levels below are 4x1, 8x1, 16x1, 32x32");
  const WeightView w{b, ldb, transposed};
  BlockCover cover;
  cover.k = k;
  cover.n = n;
  // The grids padded to whole 32×32 blocks; padding holds no nonzeros.
  const int64_t kp = (k + 31) / 32 * 32, np = (n + 31) / 32 * 32;
  const int64_t s4 = np / 4, s8 = np / 8, s16 = np / 16, s32 = np / 32, q32 = kp / 32;
  // Nonzeros per 4×1 block, [k][strip]; then per 8×1, 16×1 and 32×32 block.
  std::vector<int32_t> c4(static_cast<size_t>(kp * s4), 0);
  if (transposed) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) c4[kk * s4 + j / 4] += w.at(kk, j) != 0.0f;
  } else {
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < n; ++j) c4[kk * s4 + j / 4] += w.at(kk, j) != 0.0f;
  }
  std::vector<int32_t> c8(static_cast<size_t>(kp * s8)), c16(static_cast<size_t>(kp * s16));
  std::vector<int32_t> c32(static_cast<size_t>(q32 * s32), 0);
  for (int64_t i = 0; i < kp * s8; ++i) c8[i] = c4[2 * i] + c4[2 * i + 1];
  for (int64_t i = 0; i < kp * s16; ++i) c16[i] = c8[2 * i] + c8[2 * i + 1];
  for (int64_t kk = 0; kk < kp; ++kk)
    for (int64_t s = 0; s < s16; ++s) c32[(kk / 32) * s32 + s / 2] += c16[kk * s16 + s];
  for (int32_t x : c32) cover.nonzeros += x;

  // Per level, the weight of one block of that shape (in dense-element
  // times) and the cheapest cover of each block; `chosen` marks the blocks
  // whose own weight is the cheapest cover of their nonzeros.
  double weight[kSparseBlockShapeCount];
  for (int s = 0; s < kSparseBlockShapeCount; ++s)
    weight[s] = kSparseBlockShapes[s].n * kSparseBlockShapes[s].k * costs.block[s];
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<double> cost8(c8.size()), cost16(c16.size());
  // The parts each block's cheapest cover uses: bit s for block shape s,
  // kCsrBit for CSR (the pass of each part beyond the first is charged on
  // the whole cover, so each mask's cover is costed exactly).
  constexpr uint8_t kCsrBit = 1u << kSparseBlockShapeCount;
  std::vector<uint8_t> used8(c8.size()), used16(c16.size());
  std::vector<uint8_t> chosen4, chosen8, chosen16, chosen32;
  // A block with `count` nonzeros: its own weight when that is cheaper than
  // its children's cover (never when it is empty).
  auto best = [](int32_t count, double children, double own, uint8_t children_used, uint8_t own_bit,
                 uint8_t& used, uint8_t* chose) {
    const bool take = count > 0 && own < children;
    if (chose) *chose = take;
    used = count == 0 ? 0 : take ? own_bit : children_used;
    return count == 0 ? 0.0 : take ? own : children;
  };
  struct MaskCost {
    double blocks = 0.0;  // weights of the blocks and CSR nonzeros
    uint8_t used = 0;
  };
  // The cheapest cover using the shapes in `mask` (part passes aside).
  auto cover_cost = [&](unsigned mask, bool record) {
    const double own4 = mask & 1 ? weight[0] : kNever, own8 = mask & 2 ? weight[1] : kNever;
    const double own16 = mask & 4 ? weight[2] : kNever, own32 = mask & 8 ? weight[3] : kNever;
    if (record) {
      chosen4.assign(c4.size(), 0);
      chosen8.assign(c8.size(), 0);
      chosen16.assign(c16.size(), 0);
      chosen32.assign(c32.size(), 0);
    }
    for (size_t i = 0; i < c8.size(); ++i) {
      uint8_t ua = 0, ub = 0;
      const int32_t ca = c4[2 * i], cb = c4[2 * i + 1];
      const double a =
          best(ca, ca * costs.csr, own4, kCsrBit, 1, ua, record ? &chosen4[2 * i] : nullptr);
      const double b2 =
          best(cb, cb * costs.csr, own4, kCsrBit, 1, ub, record ? &chosen4[2 * i + 1] : nullptr);
      cost8[i] = best(c8[i], a + b2, own8, ua | ub, 2, used8[i], record ? &chosen8[i] : nullptr);
    }
    for (size_t i = 0; i < c16.size(); ++i)
      cost16[i] =
          best(c16[i], cost8[2 * i] + cost8[2 * i + 1], own16, used8[2 * i] | used8[2 * i + 1], 4,
               used16[i], record ? &chosen16[i] : nullptr);
    MaskCost result;
    for (int64_t q = 0; q < q32; ++q)
      for (int64_t s = 0; s < s32; ++s) {
        double children = 0.0;
        uint8_t children_used = 0;
        for (int64_t kk = q * 32; kk < q * 32 + 32; ++kk) {
          const int64_t at = kk * s16 + 2 * s;
          children += cost16[at] + cost16[at + 1];
          children_used |= used16[at] | used16[at + 1];
        }
        uint8_t used = 0;
        result.blocks += best(c32[q * s32 + s], children, own32, children_used, 8, used,
                              record ? &chosen32[q * s32 + s] : nullptr);
        result.used |= used;
      }
    return result;
  };
  // Top-down over the recorded choices: the outermost chosen block owns its
  // nonzeros, the rest are CSR's; costed exactly, with the pass of every
  // part beyond the first.
  const double elements = std::max(1.0, static_cast<double>(k) * static_cast<double>(n));
  const double part_cost = costs.extra_part * static_cast<double>(k + n);
  auto trace = [&] {
    BlockCover c;
    c.k = k;
    c.n = n;
    c.nonzeros = cover.nonzeros;
    double stored_cost = 0.0;
    auto take = [&](int shape, int64_t strip, int64_t q, int32_t count) {
      c.blocks[shape].push_back(strip * block_k_blocks(k, shape) + q);
      c.block_nonzeros[shape] += count;
      stored_cost += weight[shape];
    };
    for (int64_t q = 0; q < q32; ++q)
      for (int64_t s = 0; s < s32; ++s) {
        if (chosen32[q * s32 + s]) {
          take(3, s, q, c32[q * s32 + s]);
          continue;
        }
        for (int64_t kk = q * 32; kk < std::min(k, q * 32 + 32); ++kk)
          for (int64_t i16 = 2 * s; i16 < 2 * s + 2; ++i16) {
            const int64_t at16 = kk * s16 + i16;
            if (chosen16[at16]) {
              take(2, i16, kk, c16[at16]);
              continue;
            }
            for (int64_t i8 = 2 * i16; i8 < 2 * i16 + 2; ++i8) {
              const int64_t at8 = kk * s8 + i8;
              if (chosen8[at8]) {
                take(1, i8, kk, c8[at8]);
                continue;
              }
              for (int64_t i4 = 2 * i8; i4 < 2 * i8 + 2; ++i4) {
                const int64_t at4 = kk * s4 + i4;
                if (chosen4[at4])
                  take(0, i4, kk, c4[at4]);
                else
                  c.csr_nonzeros += c4[at4];
              }
            }
          }
      }
    const double total = stored_cost + static_cast<double>(c.csr_nonzeros) * costs.csr +
                         part_cost * std::max(0, c.parts() - 1);
    c.relative_cost = total / elements;
    return c;
  };
  // SparTA §4: every combination of block shapes, each cover costed with
  // its parts' passes; the cheapest is traced. Masks ascend, so CSR alone
  // and then fewer shapes win ties.
  // A shape can only be chosen for a block whose nonzeros cost more in CSR
  // than the block does (its children never cost more than that): shapes
  // with no such block are left out of every mask (random 10% weights: all
  // of them, so one pass instead of 16).
  unsigned useful = 0;
  auto any_above = [&](const std::vector<int32_t>& counts, int shape) {
    const double limit = weight[shape] / costs.csr;
    return std::any_of(counts.begin(), counts.end(),
                       [&](int32_t c) { return static_cast<double>(c) > limit; });
  };
  if (any_above(c4, 0)) useful |= 1;
  if (any_above(c8, 1)) useful |= 2;
  if (any_above(c16, 2)) useful |= 4;
  if (any_above(c32, 3)) useful |= 8;
  unsigned best_mask = 0;
  double best_total = kNever;
  for (unsigned mask = 0; mask < (1u << kSparseBlockShapeCount); ++mask) {
    if (mask & ~useful) continue;
    const MaskCost c = cover_cost(mask, false);
    const double total = c.blocks + part_cost * std::max(0, std::popcount(c.used) - 1);
    if (total < best_total) {
      best_total = total;
      best_mask = mask;
    }
  }
  cover_cost(best_mask, true);
  BlockCover best_cover = trace();
  for (auto& blocks : best_cover.blocks) std::sort(blocks.begin(), blocks.end());
  return best_cover;
}

std::string cover_name(const BlockCover& cover) {
  std::string name;
  for (int s = kSparseBlockShapeCount - 1; s >= 0; --s)
    if (!cover.blocks[s].empty()) name += (name.empty() ? "bsr" : "+bsr") + block_shape_name(s);
  if (cover.csr_nonzeros > 0 || name.empty()) name += name.empty() ? "csr" : "+csr";
  return name;
}

std::string cover_parts_summary(const BlockCover& cover) {
  const double nonzeros = std::max<double>(1.0, static_cast<double>(cover.nonzeros));
  std::string text;
  bool first = true;
  auto add = [&](const std::string& name, int64_t count) {
    char part[96];
    std::snprintf(part, sizeof part, "%s%s %.0f%%%s", first ? "" : " + ", name.c_str(),
                  100.0 * static_cast<double>(count) / nonzeros, first ? " of nonzeros" : "");
    text += part;
    first = false;
  };
  for (int s = kSparseBlockShapeCount - 1; s >= 0; --s)
    if (!cover.blocks[s].empty()) add("bsr" + block_shape_name(s), cover.block_nonzeros[s]);
  if (cover.csr_nonzeros > 0 || first) add("csr", cover.csr_nonzeros);
  return text;
}

}  // namespace tessera::kernels::sparse
