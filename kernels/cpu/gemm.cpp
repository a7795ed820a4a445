// Tile-level SGEMM driver: ISA dispatch, B packing, cache blocking and the
// edges. Compiled for the baseline ISA; the microkernels live in
// gemm_<isa>.cpp. Loop order follows BLIS (Van Zee & van de Geijn 2015) with
// the roles of A and B swapped for row-major C: the MR×KC micro-panel of A
// stays in L1 while the inner loop walks the KC×NC block of B panels in L2.
#include "kernels/cpu/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/cpu/aligned_scratch.hpp"
#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "kernels/cpu/vector_ops.hpp"

namespace tessera::kernels::cpu {
namespace {

constexpr GemmMicrokernel kMicrokernels[] = {
#define TESSERA_GEMM_MICROKERNEL(isa, function, pack_a_function, mr, nr) \
  {GemmIsa::isa, #function, mr, nr, function, pack_a_function},
#include "kernels/cpu/gemm_microkernels.inc"
#undef TESSERA_GEMM_MICROKERNEL
};

constexpr GemmMicrokernel kEdgeMicrokernels[] = {
#define TESSERA_GEMM_MICROKERNEL(isa, function, pack_a_function, mr, nr) \
  {GemmIsa::isa, #function, mr, nr, function, pack_a_function},
#include "kernels/cpu/gemm_edge_microkernels.inc"
#undef TESSERA_GEMM_MICROKERNEL
};

constexpr int kMaxMr = 16;
constexpr int kMaxNr = 64;
constexpr auto kFitsLimits = [](const GemmMicrokernel& k) {
  return k.mr <= kMaxMr && k.nr <= kMaxNr;
};
static_assert(std::ranges::all_of(kMicrokernels, kFitsLimits));
static_assert(std::ranges::all_of(kEdgeMicrokernels, kFitsLimits));

// Cache blocking (BLIS's loops, Van Zee & van de Geijn 2015, with A and B
// swapped for row-major C; see GemmBlocking). Forced only by tuning code and
// tests, before any gemm_tile() runs.
std::optional<GemmBlocking> g_forced_blocking;

// A kernel's own blocking, from this machine's caches (cache_sizes.hpp;
// measured with bench/kernels/sgemm.cpp on Sapphire Rapids' 48 KiB L1d and
// 2 MiB L2, the figures below):
//  - kc: the MR×kc micro-panel of A, reused across every B panel of a
//    column block, fills half of L1 (the other half takes the streaming B
//    panel lines and C): 6 rows → 1024, 12 → 512, 14 → 432. A large kc
//    also means fewer passes over C (each slice after the first loads and
//    stores the whole tile of C again).
//  - nc: the kc×nc block of B panels fills a quarter of L2: 6×64 → 128
//    columns (512 KiB at kc 1024), 14×32 → 288, so that it, the next block
//    (prefetched while this one runs, see gemm_tile()) and the packed A fit
//    in L2 together.
//  - mc: only bounds the packed-A scratch (mc·kc floats).
//  - A packed once the tile spans ≥ 16 panels: below that the copy (a
//    stream of A from memory with no FMAs to hide it behind) costs more than
//    the row pointers and L1 conflicts of reading A in place.
GemmBlocking own_blocking(const GemmMicrokernel& kernel) {
  const int64_t mr = kernel.mr, nr = kernel.nr;
  const CacheSizes& caches = cache_sizes();
  GemmBlocking blocking;
  blocking.kc = std::max<int64_t>(8, caches.l1d / 2 / (mr * 4) / 8 * 8);
  blocking.nc = std::max<int64_t>(nr, caches.l2 / 4 / (blocking.kc * 4) / nr * nr);
  blocking.mc = std::max<int64_t>(mr, 768 / mr * mr);
  blocking.pack_a_min_columns = 16 * nr;
  blocking.l1_panel_bytes = 0;
  return blocking;
}

bool cpu_supports(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return true;
#if defined(__x86_64__) || defined(__i386__)
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
#endif
    default:
      return false;
  }
}

GemmIsa best_isa() {
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2})
    if (cpu_supports(isa)) return isa;
  return GemmIsa::kPortable;
}

// Chosen once at start-up (XNNPACK's habit): no per-call ISA branching.
std::atomic<GemmIsa> g_isa{best_isa()};

const GemmMicrokernel& first_microkernel(GemmIsa isa) {
  for (const GemmMicrokernel& k : kMicrokernels)
    if (k.isa == isa) return k;
  throw std::invalid_argument("no SGEMM microkernel for ISA " + std::string(gemm_isa_name(isa)));
}

// Per-thread scratch, grown on a thread's first call (and when the blocking
// grows), never per call: the packed block of A.
AlignedScratch& thread_a_block() {
  thread_local AlignedScratch scratch;
  return scratch;
}

}  // namespace

std::span<const GemmMicrokernel> gemm_microkernels() {
  return kMicrokernels;
}

std::span<const GemmMicrokernel> gemm_edge_microkernels() {
  return kEdgeMicrokernels;
}

const GemmMicrokernel& gemm_edge_microkernel(const GemmMicrokernel& kernel, int64_t rows) {
  const GemmMicrokernel* best = &kernel;
  for (const GemmMicrokernel& e : kEdgeMicrokernels)
    if (e.isa == kernel.isa && e.nr == kernel.nr && e.mr >= rows && e.mr < best->mr) best = &e;
  return *best;
}

int64_t gemm_computed_rows(const GemmMicrokernel& kernel, int64_t m) {
  const int64_t whole = m / kernel.mr * kernel.mr, rest = m - whole;
  return whole + (rest > 0 ? gemm_edge_microkernel(kernel, rest).mr : 0);
}

bool gemm_isa_supported(GemmIsa isa) {
  for (const GemmMicrokernel& k : kMicrokernels)
    if (k.isa == isa) return cpu_supports(isa);
  return false;
}

std::string_view gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return "portable";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

int64_t gemm_isa_vector_floats(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return 16;
    case GemmIsa::kAvx2:
      return 8;
    case GemmIsa::kPortable:
      break;
  }
  return 4;
}

GemmIsa gemm_isa() {
  return g_isa.load(std::memory_order_relaxed);
}

void set_gemm_isa(GemmIsa isa) {
  if (!gemm_isa_supported(isa))
    throw std::invalid_argument("this CPU cannot run the " + std::string(gemm_isa_name(isa)) +
                                " SGEMM microkernels");
  g_isa.store(isa, std::memory_order_relaxed);
}

const GemmMicrokernel& gemm_default_microkernel() {
  return first_microkernel(gemm_isa());
}

int64_t gemm_microkernel_column_cost(const GemmMicrokernel& kernel, int64_t n) {
  const int64_t padded = (n + kernel.nr - 1) / kernel.nr * kernel.nr;
  const bool one_vector = kernel.nr == gemm_isa_vector_floats(kernel.isa);
  return padded * (one_vector ? 5 : 4);
}

namespace {

// The kernel of the default's ISA with the least cost; a tie with the
// default keeps the default, other ties go to the widest NR (fewer
// broadcasts of A per FMA), then the most rows (fewer loads of B per FMA).
// MobileNetV2's 14×14 projections (196×96×576) ran 12x32 at 158 GFLOP/s
// against 8x48's 182 (bench_sgemm), and 0.163 ms against ORT's 0.129 in a
// one-block model (tessera run --profile); 14x32 beat 12x32 by 4-7% on
// MobileNetV2's 24-, 32- and 160-channel shapes. The default wins its ties
// because the tiler cuts channels at multiples of 16 and 64 (graph/tiler.cpp),
// the default panels' divisors: AVX2's 4x24, wider than 6x16 and as fast on
// a whole 192-channel map, made EfficientNet-B0's 7×7 192-channel convs' 32-
// and 64-channel tiles at 2 threads compute 48 and 72 to 96 columns each
// (0.30 ms at one thread, 0.41 summed over six tiles).
template <class Cost>
const GemmMicrokernel& cheapest_microkernel(Cost cost) {
  const GemmMicrokernel* const fallback = &gemm_default_microkernel();
  const GemmMicrokernel* best = fallback;
  for (const GemmMicrokernel& k : kMicrokernels) {
    if (k.isa != best->isa) continue;
    const int64_t c = cost(k), b = cost(*best);
    const bool wider = k.nr > best->nr || (k.nr == best->nr && k.mr > best->mr);
    if (c < b || (c == b && best != fallback && wider)) best = &k;
  }
  return *best;
}

}  // namespace

const GemmMicrokernel& gemm_microkernel_for_columns(int64_t n) {
  return cheapest_microkernel(
      [n](const GemmMicrokernel& k) { return gemm_microkernel_column_cost(k, n); });
}

const GemmMicrokernel& gemm_microkernel_for_shape(int64_t m, int64_t n) {
  return cheapest_microkernel([m, n](const GemmMicrokernel& k) {
    return gemm_computed_rows(k, std::max<int64_t>(m, 1)) * gemm_microkernel_column_cost(k, n);
  });
}

GemmBlocking gemm_blocking_for(const GemmMicrokernel& kernel) {
  return g_forced_blocking ? *g_forced_blocking : own_blocking(kernel);
}

GemmBlocking gemm_blocking() {
  return gemm_blocking_for(gemm_default_microkernel());
}

void reset_gemm_blocking() {
  g_forced_blocking.reset();
}

void set_gemm_blocking(const GemmBlocking& blocking) {
  if (blocking.kc < 1 || blocking.mc < 1 || blocking.nc < 1 || blocking.pack_a_min_columns < 0 ||
      blocking.l1_panel_bytes < 0)
    throw std::invalid_argument("set_gemm_blocking: block sizes must be positive");
  g_forced_blocking = blocking;
}

void PackedMatrix::FreeAligned::operator()(float* p) const {
  std::free(p);
}

PackedMatrix pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed) {
  return pack_b(b, k, n, ldb, transposed, gemm_default_microkernel());
}

PackedMatrix pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool transposed,
                    const GemmMicrokernel& kernel) {
  PackedMatrix packed;
  pack_b_into(packed, b, k, n, ldb, transposed, kernel);
  return packed;
}

void pack_b_into(PackedMatrix& packed, const float* b, int64_t k, int64_t n, int64_t ldb,
                 bool transposed, const GemmMicrokernel& kernel, const float* k_scale) {
  if (k < 0 || n < 0 || ldb < (transposed ? k : n))
    throw std::invalid_argument("pack_b: bad shape or leading dimension");
  if (!cpu_supports(kernel.isa))
    throw std::invalid_argument("pack_b: this CPU cannot run " + std::string(kernel.name));
  const int64_t nr = kernel.nr;
  const int64_t panels = (n + nr - 1) / nr;
  const size_t floats = static_cast<size_t>(panels * k * nr);
  if (packed.capacity_ < floats || !packed.data_) {
    packed.data_.reset(allocate_aligned_floats(floats));
    packed.capacity_ = floats;
  }
  packed.k_ = k;
  packed.n_ = n;
  packed.kernel_ = &kernel;
  float* out = packed.data_.get();
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j0 = p * nr, width = std::min(nr, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      float* row = out + (p * k + kk) * nr;
      for (int64_t j = 0; j < width; ++j)
        row[j] = transposed ? b[(j0 + j) * ldb + kk] : b[kk * ldb + j0 + j];
      if (k_scale)
        for (int64_t j = 0; j < width; ++j) row[j] *= k_scale[kk];
      std::fill(row + width, row + nr, 0.0f);
    }
  }
}

namespace {

// gemm_tile() and gemm_tile_indirect(): A[m, k] at a + m·lda + k, or at
// a + m·lda + a_offsets[k] when a_offsets is given (then never packed).
// Over B's first k_rows rows (panels keep their stride, b.k() rows).
void run_gemm_tile(const float* a, int64_t lda, const int32_t* a_offsets, const PackedMatrix& b,
                   int64_t k_rows, float* c, int64_t ldc, const GemmTile& tile,
                   const GemmEpilogue& epilogue, const PackedMatrix* next_b) {
  if (b.empty()) throw std::invalid_argument("gemm_tile: B is not packed");
  if (k_rows < 0 || k_rows > b.k()) throw std::invalid_argument("gemm_tile: K outside B");
  if (tile.m0 < 0 || tile.n0 < 0 || tile.m1 < tile.m0 || tile.n1 < tile.n0 || tile.n1 > b.n())
    throw std::invalid_argument("gemm_tile: tile outside the matrices");
  if (tile.m1 == tile.m0 || tile.n1 == tile.n0) return;
  if (epilogue.bias_kind != GemmBias::kNone && !epilogue.bias)
    throw std::invalid_argument("gemm_tile: bias kind set without bias");

  const GemmMicrokernel& kernel = b.microkernel();
  const int mr = kernel.mr;
  const int64_t nr = kernel.nr, k = k_rows, panel_rows = b.k();
  const int64_t panel_begin = tile.n0 / nr, panel_end = (tile.n1 + nr - 1) / nr;
  const GemmBlocking blocking = gemm_blocking_for(kernel);
  // Equal slices no longer than 1.25 × blocking.kc: K = 1152 runs as one
  // slice, not 2 × 576 (each slice after the first loads and stores the
  // tile of C again; the MR×K micro-panel of A still leaves L1 room for B's
  // lines), and K = 1536 as 2 × 768, not 1024 + 512. bench_sgemm,
  // 64×128×1152 on gemm_6x64 (kc 1024): 158-163 → 169-173 GFLOP/s in three
  // interleaved rounds; 196×256×2304 (2 slices instead of 3) 158-170 →
  // 162-170.
  const int64_t kc_limit = blocking.kc + blocking.kc / 4;
  const int64_t k_blocks = std::max<int64_t>(1, (k + kc_limit - 1) / kc_limit);
  const int64_t kc_max = std::max<int64_t>(1, (k + k_blocks - 1) / k_blocks);
  // A block of panels holds nc columns of a kc-deep slice (a quarter of
  // L2): a shallower slice takes proportionally more columns, so a short-K
  // GEMM sweeps whole rows of C (and of a fused residual) instead of strips
  // of nc columns, rows ldc apart. ResNet-50's 784×128×512 1×1 conv with a
  // residual, C, A and residual from memory: 787-837 → 628-780 µs in
  // several noisy runs; ResNet-50's own 28×28 residual convs (--profile,
  // 1 thread) 0.79 → 0.72 ms each.
  const int64_t panels_per_block =
      std::max<int64_t>(1, blocking.nc * std::max(blocking.kc, kc_max) / kc_max / nr);
  const int64_t rows_per_block = std::max<int64_t>(1, blocking.mc / mr) * mr;
  const bool pack_a = !a_offsets && tile.n1 - tile.n0 >= blocking.pack_a_min_columns;
  float* a_block =
      pack_a ? thread_a_block().at_least(std::min(rows_per_block, tile.m1 - tile.m0 + mr) * kc_max)
             : nullptr;

  GemmMicrotileEpilogue micro_ep{.bias_kind = epilogue.bias_kind,
                                 .activation = epilogue.activation,
                                 .clip_min = epilogue.clip_min,
                                 .clip_max = epilogue.clip_max,
                                 .leaky_alpha = epilogue.leaky_alpha,
                                 .ld_residual = epilogue.ld_residual,
                                 .residual_position = epilogue.residual_position};
  const bool has_epilogue = epilogue.bias_kind != GemmBias::kNone ||
                            epilogue.activation != GemmActivation::kNone || epilogue.residual;
  GemmMicrokernelArgs args;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const int64_t k0 = kb * kc_max, kc = std::min(kc_max, k - k0);
    const bool first = kb == 0, last = kb == k_blocks - 1;
    const bool panels_outer =
        kc * nr * static_cast<int64_t>(sizeof(float)) <= blocking.l1_panel_bytes;
    args.kc = kc;
    for (int64_t mb = tile.m0; mb < tile.m1; mb += rows_per_block) {
      const int64_t me = std::min(mb + rows_per_block, tile.m1);
      // The rows past the last whole MR block, if any, go to an edge kernel
      // (reading A in place) where one has fewer rows than MR.
      const int64_t edge_rows = (me - mb) % mr;
      const GemmMicrokernel& edge_kernel =
          edge_rows > 0 ? gemm_edge_microkernel(kernel, edge_rows) : kernel;
      const int64_t packed_end = &edge_kernel == &kernel ? me : me - edge_rows;
      if (pack_a)
        for (int64_t m = mb; m < packed_end; m += mr)
          kernel.pack_a(a + m * lda + k0, lda, std::min<int64_t>(mr, me - m), kc,
                        a_block + (m - mb) * kc);
      // One MR×NR block: rows [m, m + MR) against panel p.
      auto run_block = [&](int64_t m, int64_t p, int64_t panels) {
        const int64_t mv = std::min<int64_t>(mr, me - m);
        args.m_valid = mv;
        if (pack_a && m < packed_end) {
          args.a = a_block + (m - mb) * kc;
          args.a_row_stride = 1;
          args.a_k_stride = mr;
        } else if (a_offsets) {
          args.a = a + m * lda;
          args.a_row_stride = lda;
          args.a_offsets = a_offsets + k0;
        } else {
          args.a = a + m * lda + k0;
          args.a_row_stride = lda;
          args.a_k_stride = 1;
        }
        const GemmMicrokernel& block_kernel = m < packed_end ? kernel : edge_kernel;
        // The block's columns inside the tile, [col_lo, col_hi) of panel
        // [j0, j0 + NR), go straight to C: accumulated and given the
        // epilogue in registers, edges (N not a multiple of NR, a tile
        // starting or ending inside the panel) through masked moves.
        const int64_t j0 = p * nr;
        const int64_t col_lo = std::max(tile.n0, j0), col_hi = std::min(tile.n1, j0 + nr);
        args.b = b.data() + (p * panel_rows + k0) * nr;
        args.panels = panels;
        args.b_panel_stride = panel_rows * nr;
        args.n_begin = col_lo - j0;
        args.n_valid = col_hi - j0;
        args.c = c + m * ldc + j0;
        args.ldc = ldc;
        args.load_c = !first || epilogue.accumulate;
        args.epilogue = nullptr;
        if (last && has_epilogue) {
          if (epilogue.bias_kind != GemmBias::kNone)
            micro_ep.bias = epilogue.bias + (epilogue.bias_kind == GemmBias::kPerRow ? m : j0);
          micro_ep.residual =
              epilogue.residual ? epilogue.residual + m * epilogue.ld_residual + j0 : nullptr;
          args.epilogue = &micro_ep;
        }
        block_kernel.fn(args);
      };
      const int64_t row_blocks = (me - mb + mr - 1) / mr;
      for (int64_t pb = panel_begin; pb < panel_end; pb += panels_per_block) {
        const int64_t pe = std::min(pb + panels_per_block, panel_end);
        // The block of B panels read next: the next columns of this slice,
        // else the first ones of the next row block or slice. Its panel
        // pb_next + i is fetched into L2 by this block's calls against panel
        // pb + i, each row block taking its share of the lines, so B streams
        // in at the pace of the FMAs instead of stalling the first row
        // block of every block. That matters where B is read from memory
        // once and few rows share it: GPT-2's LM head (M = 128, 768 × 50257
        // weights, 154 MB) took 82.7-96.8 ms against 88.2-105.7 ms per run
        // without, in four interleaved rounds (tessera run --profile, 1
        // thread), with nc a quarter of L2 (own_blocking) so that the block,
        // the next one and the packed A fit together.
        int64_t pb_next = pe, k_next = k0, kc_next = kc;
        const float* next_data = b.data();
        int64_t next_k = panel_rows;
        if (pb_next >= panel_end) {
          pb_next = panel_begin;
          if (me >= tile.m1) {
            k_next = k0 + kc_max;
            kc_next = std::min(kc_max, k - k_next);
            // The last block of the call: the caller's next B, if any
            // (Winograd's 36 small GEMMs, each over a B read from memory).
            if (kc_next <= 0 && next_b && !next_b->empty() && next_b->n() >= tile.n1 &&
                next_b->microkernel().nr == nr) {
              next_data = next_b->data();
              next_k = next_b->k();
              k_next = 0;
              kc_next = std::min(kc_max, next_k);
            }
          }
        }
        const int64_t pe_next =
            kc_next > 0 ? std::min(pb_next + panels_per_block, panel_end) : pb_next;
        const int64_t panel_lines = kc_next * nr / 16;
        const int64_t share = (panel_lines + row_blocks - 1) / row_blocks;
        auto run_prefetching = [&](int64_t m, int64_t p, int64_t panels) {
          const int64_t q = pb_next + (p - pb);
          const int64_t first_line = ((m - mb) / mr) * share;
          if (q < pe_next && first_line < panel_lines) {
            args.prefetch_next = next_data + (q * next_k + k_next) * nr + first_line * 16;
            args.prefetch_lines = std::min(share, panel_lines - first_line);
            args.prefetch_panels = std::min(panels, pe_next - q);
            args.next_panel_stride = next_k * nr;
          } else {
            args.prefetch_next = nullptr;
            args.prefetch_panels = 0;
          }
          run_block(m, p, panels);
        };
        if (panels_outer) {
          for (int64_t p = pb; p < pe; ++p)
            for (int64_t m = mb; m < me; m += mr) run_prefetching(m, p, 1);
        } else {
          // Panels wholly inside the tile go to the microkernel together,
          // one call per row block; a partial first or last panel alone.
          auto whole = [&](int64_t p) { return p * nr >= tile.n0 && (p + 1) * nr <= tile.n1; };
          for (int64_t m = mb; m < me; m += mr)
            for (int64_t p = pb; p < pe;) {
              int64_t panels = 1;
              if (whole(p))
                while (p + panels < pe && whole(p + panels)) ++panels;
              run_prefetching(m, p, panels);
              p += panels;
            }
        }
      }
    }
  }
}

}  // namespace

void gemm_tile(const float* a, int64_t lda, const PackedMatrix& b, float* c, int64_t ldc,
               const GemmTile& tile, const GemmEpilogue& epilogue, const PackedMatrix* next_b) {
  run_gemm_tile(a, lda, nullptr, b, b.k(), c, ldc, tile, epilogue, next_b);
}

void gemm_tile_leading_rows(const float* a, int64_t lda, const PackedMatrix& b, int64_t k_rows,
                            float* c, int64_t ldc, const GemmTile& tile,
                            const GemmEpilogue& epilogue) {
  run_gemm_tile(a, lda, nullptr, b, k_rows, c, ldc, tile, epilogue, nullptr);
}

void gemm_tile_indirect(const float* a, int64_t row_stride, const int32_t* k_offsets,
                        const PackedMatrix& b, float* c, int64_t ldc, const GemmTile& tile,
                        const GemmEpilogue& epilogue) {
  if (!k_offsets) throw std::invalid_argument("gemm_tile_indirect: no k offsets");
  run_gemm_tile(a, row_stride, k_offsets, b, b.k(), c, ldc, tile, epilogue, nullptr);
}

float apply_epilogue_scalar(float x, const GemmEpilogue& ep, int64_t m, int64_t n) {
  if (ep.bias_kind == GemmBias::kPerColumn) x += ep.bias[n];
  if (ep.bias_kind == GemmBias::kPerRow) x += ep.bias[m];
  const bool residual_before = ep.residual_position == GemmResidual::kBeforeActivation;
  if (ep.residual && residual_before) x += ep.residual[m * ep.ld_residual + n];
  switch (ep.activation) {
    case GemmActivation::kNone:
      break;
    case GemmActivation::kRelu:
      x = std::max(x, 0.0f);
      break;
    case GemmActivation::kClip:
      x = std::min(std::max(x, ep.clip_min), ep.clip_max);
      break;
    case GemmActivation::kLeakyRelu:
      x = x >= 0.0f ? x : ep.leaky_alpha * x;
      break;
    case GemmActivation::kSigmoid:
    case GemmActivation::kGelu:
    case GemmActivation::kGeluTanh:
    case GemmActivation::kSilu:
      vector_ops().activation(ep.activation, ep.clip_min, ep.clip_max, ep.leaky_alpha, &x, 1);
      break;
  }
  if (ep.residual && !residual_before) x += ep.residual[m * ep.ld_residual + n];
  return x;
}

void apply_activation_span(const GemmEpilogue& ep, float* values, int64_t n) {
  if (ep.activation == GemmActivation::kNone) return;
  vector_ops().activation(ep.activation, ep.clip_min, ep.clip_max, ep.leaky_alpha, values, n);
}

}  // namespace tessera::kernels::cpu
