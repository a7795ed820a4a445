// The tiler (APU, ASPEN §3.1). Tiles are cut "column-wise first" (DESIGN.md):
// a tile holds all channels/features of a run of pixels rows or tokens, so
// each tile chain is an independent path through the network. Edges come
// from the per-op dependency functions and are exact. Convs with too few
// pixels per image for that many runs cut channels too (tile_op_output).
#include "graph/tiler.hpp"

#include <algorithm>
#include <thread>
#include <tuple>

#include "graph/compiler.hpp"
#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/op_shape.hpp"

namespace tessera::graph {
namespace {

// Below this many multiply-accumulates (or elements for cheap ops) per tile
// the scheduling overhead of a node outweighs the parallelism it adds.
constexpr int64_t kMinWorkPerTile = 16 * 1024;
// The fewest output pixels of a conv tile that the automatic rule cuts into
// runs of rows; past that it cuts channels (tile_op_output): two AVX-512
// vectors of GEMM rows.
constexpr int64_t kMinConvPixelsPerTile = 32;
// Column and channel tiles are cut at multiples of this: the widest GEMM
// panel; one head of BERT-base.
constexpr int64_t kColumnTileAlign = 64;
// The fewest rows of a column tile cut into runs of rows as well: the 8x48
// and 6x64 microkernels' blocks, several times over.
constexpr int64_t kMinRowsPerColumnTile = 32;
// Convs and MatMuls whose constant weights are at least this large get one
// tile per thread, not two (tile_op_output).
constexpr int64_t kLargeWeightBytes = 512 * 1024;

std::vector<Shape> input_shapes(const Graph& graph, const Operator& op) {
  std::vector<Shape> shapes;
  shapes.reserve(op.inputs.size());
  for (int32_t t : op.inputs) shapes.push_back(graph.tensors.at(static_cast<size_t>(t)).shape);
  return shapes;
}

}  // namespace

int64_t op_work(const Operator& op, const std::vector<Shape>& in, const Shape& out) {
  int64_t n = shape_numel(out);
  switch (op.type) {
    case OpType::Conv: {
      int64_t work = n * in[1][1] * in[1][2] * in[1][3];
      // A fused expansion: Cin multiply-adds per expanded input pixel, and
      // stride² input pixels per output pixel.
      if (op.attrs.fused_expand) {
        int64_t pixels_per_output = 1;
        for (int64_t s : op.attrs.strides) pixels_per_output *= s;
        work += n * in[expand_weight_input(op.attrs)][1] * pixels_per_output;
      }
      return work;
    }
    case OpType::MaxPool:
    case OpType::AveragePool:
      return n * op.attrs.kernel_shape[0] * op.attrs.kernel_shape[1];
    case OpType::GlobalAveragePool:
      return shape_numel(in[0]);
    case OpType::Gemm:
      return n * (op.attrs.trans_a ? in[0][0] : in[0][1]);
    case OpType::MatMul:
      return n * in[0].back();
    case OpType::FusedAttention:  // rows × S × (D + DV): both products
      return in[2].back() == 0 ? n
                               : n / in[2].back() * in[1].back() * (in[0].back() + in[2].back());
    default:
      return n;
  }
}

namespace {

// Ops that do a little work per output element and read their inputs at the
// same positions: they would get one tile by their own work, turning every
// residual Add or Relu into a join of all paths. They take the tile count of
// their heaviest producer instead, so their tiles line up with its tiles.
bool follows_producer_tiling(OpType t) {
  switch (t) {
    case OpType::Relu:
    case OpType::Clip:
    case OpType::Sigmoid:
    case OpType::Add:
    case OpType::Mul:
    case OpType::BatchNormalization:
    case OpType::Concat:
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Where:
    case OpType::Gelu:
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
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Max:
    case OpType::Min:
      return true;
    default:
      return false;
  }
}

// A pool whose output row r reads input row r only (a squeeze pool's row
// means, graph/split_global_pool.hpp): cheap per element like the ops
// above, it takes its producer's tile count too, so that each of its runs of
// rows waits for the producer's tile of the same rows only and runs while
// those rows are in cache.
bool pools_rows_in_place(const Operator& op) {
  const OpAttributes& a = op.attrs;
  return (op.type == OpType::AveragePool || op.type == OpType::MaxPool) &&
         a.kernel_shape.size() == 2 && a.kernel_shape[0] == 1 && !a.strides.empty() &&
         a.strides[0] == 1 && std::ranges::all_of(a.pads, [](int64_t p) { return p == 0; });
}

int64_t tiling_work(const Graph& graph, const std::vector<int32_t>& producer, int32_t op_index,
                    std::vector<int64_t>& memo) {
  int64_t& cached = memo[static_cast<size_t>(op_index)];
  if (cached >= 0) return cached;
  const Operator& op = graph.ops[static_cast<size_t>(op_index)];
  const Shape& out = graph.tensors[static_cast<size_t>(op.outputs[0])].shape;
  int64_t work = op_work(op, input_shapes(graph, op), out);
  if (follows_producer_tiling(op.type) || pools_rows_in_place(op))
    for (int32_t t : op.inputs) {
      const int32_t p = producer[static_cast<size_t>(t)];
      if (p >= 0 && p < op_index) work = std::max(work, tiling_work(graph, producer, p, memo));
    }
  cached = work;
  return work;
}

// Dims of the output that may be cut: everything but the softmax axis (and
// the trailing dims it normalises jointly when coerce_2d).
std::vector<bool> splittable_dims(const Operator& op, const Shape& out) {
  std::vector<bool> ok(out.size(), true);
  if (op.type == OpType::Softmax || op.type == OpType::LogSoftmax) {
    size_t axis = static_cast<size_t>(op.attrs.axis);
    size_t last = op.attrs.softmax_coerce_2d ? out.size() : axis + 1;
    for (size_t d = axis; d < last && d < out.size(); ++d) ok[d] = false;
  }
  if (op.type == OpType::LayerNormalization || op.type == OpType::RMSNormalization)
    for (size_t d = static_cast<size_t>(std::max<int64_t>(op.attrs.axis, 0)); d < out.size(); ++d)
      ok[d] = false;
  // A batched MatMul is cut over its batch dims (attention: batch x head)
  // and then its rows (blocks of queries), never its columns: each tile of
  // an attention head is then a path of its own (ASPEN §4.1's parallel paths).
  if (op.type == OpType::MatMul && out.size() >= 3) ok.back() = false;
  // A fused attention tile normalises whole rows of scores: cut it by batch,
  // head and query block only (a column tile would redo its rows' softmax).
  if (op.type == OpType::FusedAttention) ok.back() = false;
  return ok;
}

// The transformer ops (and batched MatMul) are cut on a grid over their
// leading splittable dims: as many parts of the first as it allows, then the
// next, up to `wanted` tiles; so a [batch, heads, tokens, d] tensor is cut
// per batch x head first, then into blocks of tokens.
// Elementwise ops that follow their producer's tiling (an attention mask
// Add after a batched MatMul) follow its kind of tiling too, so that their
// tiles line up per head; after a conv they keep the NCHW row tiling. The
// search through chains of such ops is cut off after kMaxFollowDepth steps
// (bounding the work on wide residual graphs).
constexpr int kMaxFollowDepth = 8;

bool uses_grid_tiling(const Graph& graph, int32_t op_index, int depth = 0) {
  const Operator& op = graph.ops[static_cast<size_t>(op_index)];
  const Shape& out = graph.tensors[static_cast<size_t>(op.outputs[0])].shape;
  if (op.type == OpType::MatMul || op.type == OpType::Softmax || op.type == OpType::LogSoftmax ||
      op.type == OpType::FusedAttention)
    return out.size() >= 3;
  // A channel Concat of maps (YOLO's routes, its space-to-depth stem) takes
  // row tiles whatever its inputs' tiling: their channel runs could not line
  // up with its own anyway, and channel tiles of an NHWC map write every
  // cache line of it from each core (YOLO's 12-channel stem concat: 1.1 ms at
  // one thread, 2.9 ms summed over two as four channel tiles).
  if (op.type == OpType::Concat && out.size() == 4 && op.attrs.axis == 1) return false;
  // An elementwise op on a rank-4 map follows its producers' kind of tiling
  // whatever its type: after a conv, row runs like the conv's. Grid tiles
  // there cut the channels, and an NHWC map's channel tiles write every
  // cache line of it from each core (the YOLO-style detector's unfused
  // LeakyRelu after its stem: 1.0 ms at one thread, 8.5 ms summed over two).
  const bool follower = follows_producer_tiling(op.type);
  if (static_cast<uint16_t>(op.type) > static_cast<uint16_t>(OpType::BatchNormalization) &&
      !(follower && out.size() == 4))
    return true;
  if (!follower || depth >= kMaxFollowDepth) return false;
  for (int32_t t : op.inputs)
    for (int32_t p = op_index; p-- > 0;)
      if (graph.ops[static_cast<size_t>(p)].outputs[0] == t) {
        if (uses_grid_tiling(graph, p, depth + 1)) return true;
        break;
      }
  return false;
}

std::vector<Region> grid_tiles(const Shape& out, const std::vector<bool>& ok, int64_t wanted) {
  std::vector<std::pair<size_t, int64_t>> cuts;  // (dim, parts)
  int64_t tiles = 1;
  for (size_t d = 0; d < out.size() && tiles < wanted; ++d) {
    if (!ok[d] || out[d] < 2) continue;
    const int64_t parts = std::min(out[d], wanted / tiles);  // never more than wanted
    if (parts < 2) break;
    cuts.emplace_back(d, parts);
    tiles *= parts;
  }
  std::vector<Region> regions{Region::whole(out)};
  for (auto [d, parts] : cuts) {
    std::vector<Region> next;
    for (const Region& r : regions)
      for (int64_t i = 0; i < parts; ++i) {
        Region c = r;
        c.begin[d] = i * out[d] / parts;
        c.end[d] = (i + 1) * out[d] / parts;
        next.push_back(std::move(c));
      }
    regions = std::move(next);
  }
  return regions;
}

std::vector<std::pair<int64_t, int64_t>> even_chunks(int64_t extent, int64_t parts) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t i = 0; i < parts; ++i)
    chunks.emplace_back(i * extent / parts, (i + 1) * extent / parts);
  return chunks;
}

// Runs of output channels for a conv's channel tiles: whole GEMM panels
// (kColumnTileAlign; fewer runs than asked where there are at least two
// panels but not enough to go round; 16-channel vectors where there is only
// one), the remainder in the last run. Even runs would start and end
// inside panels: MobileNetV2's 7×7 projections (320 channels, four tiles at
// two threads) ran 80-channel tiles that each computed two 64-wide panels,
// 1.6× the FMAs.
std::vector<std::pair<int64_t, int64_t>> channel_chunks(int64_t channels, int64_t parts) {
  int64_t align = kColumnTileAlign;
  // Two or more whole panels but fewer than parts: one panel each. Runs of
  // 16 would start and end inside panels again: EfficientNet-B0's 7×7
  // projections to 192 channels ran four runs of 48 at two threads, six
  // panels' FMAs for three (0.21 ms at one thread, 0.41 summed over the
  // four tiles, tessera run --profile).
  if (channels / align < parts && channels / align >= 2) parts = channels / align;
  if (channels / align < parts) align = 16;
  const int64_t units = std::max<int64_t>(1, channels / align);
  parts = std::min(parts, units);
  if (parts <= 1) return {{0, channels}};
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t i = 0; i < parts; ++i)
    chunks.emplace_back(i * units / parts * align,
                        i + 1 == parts ? channels : (i + 1) * units / parts * align);
  return chunks;
}

// How many runs channel_chunks() cuts `channels` into at most.
int64_t most_channel_runs(int64_t channels) {
  const int64_t panels = channels / kColumnTileAlign;
  return panels >= 2 ? panels : std::max<int64_t>(1, channels / 16);
}

// The longest any of `threads` cores works on `tiles` (their costs) when
// each core takes the next tile in order as it comes free: the dataflow
// executor's order on an op whose input is all ready.
int64_t busiest_core(const std::vector<int64_t>& tiles, int64_t threads) {
  std::vector<int64_t> load(static_cast<size_t>(std::max<int64_t>(threads, 1)), 0);
  for (int64_t t : tiles) *std::min_element(load.begin(), load.end()) += t;
  return *std::max_element(load.begin(), load.end());
}

// A small map's tiles as runs of rows x runs of channels: (row runs, channel
// parts for channel_chunks()). Runs of whole panels are uneven where the
// panels do not go round: EfficientNet-B0's 7x7 projections to 192 channels
// ran one tile of one panel and one of two at 2 threads (57 and 105 us, the
// first core then idle; `tessera run --trace`), its 320-channel one two and
// three panels (97 and 198 us). This tries every pair of runs down to
// `max_row_runs` and the panels, costs each tile as pixels x channels, and
// keeps the pair whose busiest core has the least, if that is at least
// `min_gain_percent` (10% unless said) less than the given pair's; among
// near ties, the fewest tiles. Pairs with tiles under kMinWorkPerTile
// (work_per_output per output element) are not considered.
std::pair<int64_t, int64_t> balanced_small_map_runs(const Shape& out, int64_t row_runs,
                                                    int64_t channel_parts, int64_t threads,
                                                    int64_t max_row_runs, int64_t work_per_output,
                                                    int64_t min_gain_percent = 10) {
  struct Candidate {
    int64_t busiest = 0, smallest = 0;
    size_t tiles = 0;
  };
  auto cost = [&](int64_t rows, int64_t parts) {
    std::vector<int64_t> costs;  // pixels x channels
    for (auto [r0, r1] : even_chunks(out[2], rows))
      for (auto [c0, c1] : channel_chunks(out[1], parts))
        costs.push_back((r1 - r0) * out[3] * (c1 - c0));
    Candidate c{0, *std::min_element(costs.begin(), costs.end()), costs.size()};
    c.busiest = busiest_core(costs, threads);
    return c;
  };
  const Candidate given = cost(row_runs, channel_parts);
  Candidate best = given;
  std::pair<int64_t, int64_t> choice{row_runs, channel_parts};
  for (int64_t rows = 1; rows <= max_row_runs; ++rows)
    for (int64_t parts = 1; parts <= most_channel_runs(out[1]); ++parts) {
      const Candidate c = cost(rows, parts);
      if (c.smallest * work_per_output < kMinWorkPerTile) continue;
      // Less load on the busiest core, or within 2% of it in fewer tiles.
      if (c.busiest * 50 < best.busiest * 49 ||
          (c.busiest * 50 <= best.busiest * 51 && c.tiles < best.tiles))
        best = c, choice = {rows, parts};
    }
  return best.busiest * 100 <= given.busiest * (100 - min_gain_percent)
             ? choice
             : std::pair<int64_t, int64_t>{row_runs, channel_parts};
}

// Whether the op's second input (a conv's, Gemm's or MatMul's B) is a
// constant weight of kLargeWeightBytes or more.
bool large_constant_weights(const Graph& graph, const Operator& op) {
  if (op.inputs.size() < 2) return false;
  const TensorInfo& w = graph.tensors[static_cast<size_t>(op.inputs[1])];
  return w.is_weight && shape_numel(w.shape) * 4 >= kLargeWeightBytes;
}

// A conv with large constant weights whose output channels outnumber its
// output pixels: its GEMM's B (K x channels) is larger than its A (pixels x
// K), as weight_column_runs() below asks of a MatMul. The YOLO-style head's
// 13x13 convs, 512 -> 1024 channels (18.9 MB of weights) and 256 -> 512.
bool weights_outweigh_map(const Graph& graph, const Operator& op, const Shape& out) {
  return out.size() == 4 && large_constant_weights(graph, op) && out[1] > out[2] * out[3];
}

// A MatMul or Gemm whose B is one [K, N] matrix shared by all its rows, and
// larger than A (N > rows): row tiles would each stream all of B (GPT-2's LM
// head: 154 MB of B, four row tiles, four passes: 44% of the model's time at
// one thread), column tiles each read their own slice of B once and re-read
// only A, which stays in cache. Returns the column runs, whole multiples of
// kColumnTileAlign except the last, or nothing when rows are the better cut.

std::vector<std::pair<int64_t, int64_t>> weight_column_runs(const Operator& op,
                                                            const std::vector<Shape>& in,
                                                            const Shape& out, int64_t wanted) {
  const bool shared_b =
      (op.type == OpType::MatMul && in.size() >= 2 && in[1].size() == 2) || op.type == OpType::Gemm;
  if (!shared_b || out.size() < 2 || wanted < 2) return {};
  const int64_t n = out.back();
  const int64_t rows = shape_numel(out) / std::max<int64_t>(n, 1);
  const int64_t units = n / kColumnTileAlign;
  if (n <= rows || units < 2) return {};
  const int64_t parts = std::min(wanted, units);
  // A last part-panel of half a panel or more costs a panel's FMAs: count it
  // when sharing the panels out (EfficientNet-B0's 1000 classes: runs of 448
  // and 552 columns, 74 and 103 us at 2 threads, tessera run --trace; now 512
  // and 488).
  const int64_t shared = n % kColumnTileAlign >= kColumnTileAlign / 2 ? units + 1 : units;
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t i = 0; i < parts; ++i)
    runs.emplace_back(i * shared / parts * kColumnTileAlign,
                      i + 1 == parts ? n : (i + 1) * shared / parts * kColumnTileAlign);
  return runs;
}

// 3×3 stride-1 convs, on maps of at least 14 rows and columns, run
// cpu.conv_winograd, which covers a tile with 4×4 blocks from the tile's
// first row; its 36 GEMMs have one row per block. The automatic rule keeps
// those tiles large and their runs of rows whole rows of blocks:
//  - maps of 14 to 27 (ResNet-50's 14×14 stage) are cut by output channels
//    over whole maps (runs of 3–7 rows hold too few blocks to pay for the 36
//    transformed weight matrices: `bench_conv 3 winograd`, x0.74 against
//    cpu.conv_gemm on rows 4:7 of 14×14×256, x1.7 on the whole map); each
//    channel tile reads its own slice of the transformed weights;
//  - maps of 28 to 55 get one run of rows per thread, not two (28×28 in
//    four runs of 7 rows: GEMMs of 14 blocks, computed as 18 rows by the
//    6-row microkernel, and 8 rows of blocks per 7; ResNet-50's 28×28×128
//    convs at 2 threads took 0.94-1.02 ms summed over four tiles, 0.77-0.86
//    over two, tessera run --profile); past one run per block row, output
//    channel tiles of at least kColumnTileAlign channels share the rest;
//  - every run of rows is a whole number of block rows (kWinogradBlockRows),
//    and there are at most as many runs as block rows. A run of one or two
//    rows computes a whole block row: tiled for 16 threads, ResNet-50's
//    28×28 convs ran 16 runs of 1–2 rows and took 3.3-3.7× their whole-op
//    time, its 56×56 ones 32 runs and 1.8-2.3× (tessera run --profile, 1
//    thread, on both tilings).
// (Below 32 channels in or out Winograd does not apply either.)
enum class WinogradTiling { kNone, kWholeMaps, kRunPerThread, kBlockRows };

constexpr int64_t kWinogradBlockRows = 4;  // cpu.conv_winograd's F(4×4, 3×3) block side

// Without a forecast, every conv of Winograd's shape is taken to run it. A
// forecast tells apart those that run another kernel (a sparse weight's
// cpu.conv_sparse, or --no-winograd): they get the plain rules. Channel
// tiles of cpu.conv_sparse each stack the whole map's input again: ResNet-50
// pruned to 90% at 2 threads, its five 14x14 3x3 convs as two channel tiles
// each took 2.47-2.50 ms of tile time summed per run, as two runs of rows
// 1.61-1.64 (tessera run --profile, two alternating rounds, this 2-core
// Zen 5 EPYC).
WinogradTiling winograd_tiling(const Graph& graph, int32_t op_index, const std::vector<Shape>& in,
                               const Shape& out, const TilerOptions& options) {
  const Operator& op = graph.ops.at(static_cast<size_t>(op_index));
  const OpAttributes& a = op.attrs;
  if (op.type != OpType::Conv || a.group != 1 || a.kernel_shape != std::vector<int64_t>{3, 3})
    return WinogradTiling::kNone;
  if (in.size() < 2 || in[1].size() != 4 || in[1][1] < 32 || out[1] < 32)
    return WinogradTiling::kNone;
  if (std::ranges::any_of(a.strides, [](int64_t s) { return s != 1; }) ||
      std::ranges::any_of(a.dilations, [](int64_t d) { return d != 1; }))
    return WinogradTiling::kNone;
  const int64_t side = std::min(out[2], out[3]);
  if (side < 14) return WinogradTiling::kNone;
  if (options.kernel_forecast && !options.kernel_forecast->runs_winograd(graph, op_index))
    return WinogradTiling::kNone;
  if (side < 28) return WinogradTiling::kWholeMaps;
  if (side < 56) return WinogradTiling::kRunPerThread;
  return WinogradTiling::kBlockRows;
}

}  // namespace

std::vector<Region> tile_op_output(const Graph& graph, int32_t op_index,
                                   const TilerOptions& options) {
  const Operator& op = graph.ops.at(static_cast<size_t>(op_index));
  const Shape& out = graph.tensors.at(static_cast<size_t>(op.outputs.at(0))).shape;
  auto in = input_shapes(graph, op);

  // Tile-count rule: about two tiles per thread so that DSEs can keep busy
  // while others finish their paths, but never tiles with less than
  // kMinWorkPerTile work; --tiles overrides it. One thread has no one to
  // keep busy: whole ops there (images still get a tile each). Each tile of
  // a conv streams the op's weights again, so ResNet-50 ran 51.8 ms of tile
  // time per run as whole ops against 54.2 as two tiles each (tessera run
  // --profile, 1 thread; 14×14 and 7×7 stages and Winograd gained most);
  // MobileNetV2, EfficientNet-B0, BERT and GPT-2 were the same within noise.
  const int64_t threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  int64_t wanted = options.tiles;
  if (wanted <= 0) {
    std::vector<int32_t> producer(graph.tensors.size(), -1);
    for (size_t i = 0; i < graph.ops.size(); ++i)
      producer[static_cast<size_t>(graph.ops[i].outputs[0])] = static_cast<int32_t>(i);
    std::vector<int64_t> memo(graph.ops.size(), -1);
    const int64_t work = tiling_work(graph, producer, op_index, memo);
    wanted = std::clamp<int64_t>(work / kMinWorkPerTile, 1, threads == 1 ? 1 : 2 * threads);
    // A global average pool reads every pixel of its channels: on an NHWC
    // map each channel tile touches every cache line of it, half of them
    // written by the other core (EfficientNet-B0's 17 squeeze pools: 0.18 ms
    // per run at one thread, 0.89 summed over two, tessera run --profile).
    // One tile per image; the largest of them reads 1.6 MB.
    if (op.type == OpType::GlobalAveragePool && !out.empty())
      wanted = std::min(wanted, std::max<int64_t>(1, out[0]));
    // Row tiles each stream the op's weights again; where they are large
    // (ResNet-50's 3x3 and 1x1 convs from 14x14 on, BERT's projections) the
    // second tile per thread costs more than the balance it buys. At 2
    // threads, 4 interleaved rounds each: ResNet-50 28.7-29.5 -> 27.6-28.2
    // ms, BERT-base 88.0-88.6 -> 84.9-86.4; MobileNetV2, EfficientNet-B0 and
    // GPT-2 the same within noise (tessera run, this 2-core Xeon).
    if ((op.type == OpType::Conv || op.type == OpType::Gemm || op.type == OpType::MatMul) &&
        large_constant_weights(graph, op))
      wanted = std::min(wanted, threads);
  }

  Region whole = Region::whole(out);
  // NCHW maps (conv/pool outputs, and elementwise/concat/BN ops on maps so
  // that their tiles line up 1:1 with the producer's): every image is its
  // own set of tiles; within one, runs of output rows across all channels.
  bool conv_or_pool =
      op.type == OpType::Conv || op.type == OpType::MaxPool || op.type == OpType::AveragePool;
  const bool grid = uses_grid_tiling(graph, op_index);
  bool spatial = out.size() == 4 && op.type != OpType::Softmax && op.type != OpType::LogSoftmax &&
                 !grid && (conv_or_pool || out[2] > 1);
  if (spatial) {
    int64_t images = out[0];
    const int64_t per_image_wanted = (wanted + images - 1) / images;
    int64_t per_image = std::clamp<int64_t>(per_image_wanted, 1, out[2]);
    // A conv with few output pixels per image (ResNet's 7×7 stage) would
    // get runs of one or two rows: 7–14 pixels, too few rows for a GEMM
    // (the sparse CSR kernel computes 16 rows per vector, the dense one 14
    // per register block), so the tiles' cost barely falls as they shrink
    // and extra threads gain nothing there. The automatic rule then keeps
    // runs of at least kMinConvPixelsPerTile pixels and cuts the output
    // channels for the rest of the parallelism (DESIGN.md: rows first,
    // then channels); --tiles keeps rows only.
    int64_t channel_parts = 1;
    const int64_t pixels = out[2] * out[3];
    const WinogradTiling winograd = options.tiles <= 0
                                        ? winograd_tiling(graph, op_index, in, out, options)
                                        : WinogradTiling::kNone;
    // Tiles that can run at once on this op, and the runs of output channels
    // channel_chunks() cuts at most (whole GEMM panels).
    const int64_t busy = std::min(per_image_wanted, threads);
    const int64_t panels = most_channel_runs(out[1]);
    int64_t row_unit = 1;  // runs of rows are cut in multiples of this
    const int64_t block_rows = (out[2] + kWinogradBlockRows - 1) / kWinogradBlockRows;
    if (winograd != WinogradTiling::kNone) {
      row_unit = kWinogradBlockRows;
      per_image = std::min(per_image, block_rows);
    }
    if (winograd == WinogradTiling::kRunPerThread) {
      per_image = std::min(per_image, threads);
      if (busy > per_image) channel_parts = std::min(busy / per_image, panels);
    }
    // The work per output element, for balanced_small_map_runs()'s minimum per tile.
    auto work_per_output = [&] {
      return op_work(op, in, out) / std::max<int64_t>(1, shape_numel(out));
    };
    if (per_image > 1 && winograd == WinogradTiling::kWholeMaps) {
      // At most one channel tile per thread: each repeats the input
      // transform and its GEMMs get narrower (ResNet-50's 14×14×256 convs at
      // 2 threads: 1.46 ms summed over 4 tiles, 1.26 over 2). More threads
      // than panels: runs of block rows as well, down to one block row. Such
      // tiles cost more per pixel (x0.6-0.8 of cpu.conv_gemm's speed, see
      // conv_winograd_applies) but idle cores cost more: ResNet-50's
      // 14×14×256 convs at 16 threads ran four tiles of 0.5-0.95 ms while 12
      // cores idled; with runs of two block rows the model ran 7.87-8.92 ms,
      // with runs of one 7.39-8.03 (5 interleaved rounds, the lent 16-core
      // Xeon).
      channel_parts = std::clamp<int64_t>(busy, 1, out[1]);
      per_image = 1;
      if (busy > panels)
        per_image = std::clamp<int64_t>((busy + panels - 1) / panels, 1, block_rows);
    } else if (op.type == OpType::Conv && options.tiles <= 0 && per_image > 1 &&
               pixels < per_image * kMinConvPixelsPerTile) {
      // Runs of at least min_rows rows: kMinConvPixelsPerTile pixels or more.
      const int64_t min_rows = (kMinConvPixelsPerTile + out[3] - 1) / out[3];
      per_image = std::max<int64_t>(1, out[2] / min_rows);
      channel_parts =
          std::clamp<int64_t>((per_image_wanted + per_image - 1) / per_image, 1, out[1]);
      // More threads than whole panels can keep busy: runs of half as many
      // pixels, down to one tile per thread (ResNet-50's 7×7×512 3×3 convs
      // at 16 threads: eight tiles of 64 channels, 0.5-0.65 ms per conv
      // while half the cores idled, on the lent 16-core Xeon).
      const int64_t fewest_rows = (kMinConvPixelsPerTile / 2 + out[3] - 1) / out[3];
      if (per_image * panels < busy)
        per_image = std::clamp<int64_t>((busy + panels - 1) / panels, per_image,
                                        std::max<int64_t>(per_image, out[2] / fewest_rows));
      std::tie(per_image, channel_parts) =
          balanced_small_map_runs(out, per_image, channel_parts, busy,
                                  std::max<int64_t>(1, out[2] / fewest_rows), work_per_output());
    } else if (op.type == OpType::Conv && options.tiles <= 0 && per_image > 1 &&
               weights_outweigh_map(graph, op, out)) {
      // Runs of rows each stream all the weights, and an odd number of rows
      // splits unevenly; runs of channels each read their own share of the
      // weights once. So channel runs are taken where they leave the busiest
      // core 2% less, not 10%, and no more runs of rows are cut.
      std::tie(per_image, channel_parts) =
          balanced_small_map_runs(out, per_image, 1, busy, per_image, work_per_output(),
                                  /*min_gain_percent=*/2);
    }
    std::vector<Region> tiles;
    for (int64_t n = 0; n < images; ++n)
      for (auto [r0, r1] : even_chunks((out[2] + row_unit - 1) / row_unit, per_image))
        for (auto [c0, c1] : channel_chunks(out[1], channel_parts)) {
          Region r = whole;
          r.begin[0] = n, r.end[0] = n + 1;
          r.begin[1] = c0, r.end[1] = c1;
          r.begin[2] = r0 * row_unit, r.end[2] = std::min(r1 * row_unit, out[2]);
          tiles.push_back(r);
        }
    return tiles;
  }

  const auto column_runs = weight_column_runs(op, in, out, wanted);
  if (!column_runs.empty()) {
    // Fewer column runs than threads (BERT-base's 768-wide projections: 12
    // runs of 64): runs of rows too, of at least kMinRowsPerColumnTile rows
    // (each re-reads its slice of B, which stays in L2). BERT-base at 16
    // threads: 32.3-37.0 -> 29.5-30.7 ms (5 interleaved rounds, the lent
    // 16-core Xeon); tile time summed 215 -> 220 ms (1 thread, --profile).
    const size_t row_dim = out.size() - 2;  // the rows, where every dim before it is 1
    const int64_t rows = out[row_dim];
    const bool one_row_dim = shape_numel(out) == rows * out.back();
    const int64_t busy = std::min(wanted, threads);
    const int64_t columns = static_cast<int64_t>(column_runs.size());
    const int64_t row_parts = one_row_dim && busy > columns
                                  ? std::min((busy + columns - 1) / columns,
                                             std::max<int64_t>(1, rows / kMinRowsPerColumnTile))
                                  : 1;
    std::vector<Region> tiles;
    for (auto [r0, r1] : even_chunks(rows, row_parts))
      for (auto [b, e] : column_runs) {
        Region r = whole;
        r.begin.back() = b, r.end.back() = e;
        r.begin[row_dim] = r0, r.end[row_dim] = r1;
        tiles.push_back(r);
      }
    return tiles;
  }
  auto ok = splittable_dims(op, out);
  if (grid) return grid_tiles(out, ok, wanted);
  int64_t dim = -1;
  if ((op.type == OpType::Gemm || op.type == OpType::MatMul) && out.size() == 2) {
    dim = out[0] > 1 ? 0 : 1;  // rows (tokens) first, else columns (features)
  } else {
    for (size_t d = 0; d < out.size(); ++d)
      if (ok[d] && out[d] >= 2) {
        dim = static_cast<int64_t>(d);
        break;
      }
  }
  if (dim < 0 || out[static_cast<size_t>(dim)] < 2) return {whole};
  size_t d = static_cast<size_t>(dim);
  std::vector<Region> tiles;
  for (auto [b, e] : even_chunks(out[d], std::min(wanted, out[d]))) {
    Region r = whole;
    r.begin[d] = b, r.end[d] = e;
    tiles.push_back(r);
  }
  return tiles;
}

std::vector<TileNode> build_tile_nodes(const Graph& graph, const TilerOptions& options) {
  check_graph(graph);
  std::vector<int32_t> producer(graph.tensors.size(), -1);
  for (size_t i = 0; i < graph.ops.size(); ++i)
    producer[static_cast<size_t>(graph.ops[i].outputs[0])] = static_cast<int32_t>(i);

  std::vector<TileNode> nodes;
  std::vector<int32_t> first_node(graph.ops.size() + 1, 0);
  std::vector<int32_t> parents;
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Operator& op = graph.ops[i];
    auto in = input_shapes(graph, op);
    const Shape& out = graph.tensors[static_cast<size_t>(op.outputs[0])].shape;
    first_node[i] = static_cast<int32_t>(nodes.size());
    for (Region& tile : tile_op_output(graph, static_cast<int32_t>(i), options)) {
      int32_t self = static_cast<int32_t>(nodes.size());
      parents.clear();
      for (const InputDependency& dep : tile_dependencies(op, in, out, tile)) {
        int32_t p = producer[static_cast<size_t>(op.inputs[static_cast<size_t>(dep.operand)])];
        if (p < 0) continue;  // graph input or weight: in memory before any node runs
        for (int32_t q = first_node[static_cast<size_t>(p)];
             q < first_node[static_cast<size_t>(p) + 1]; ++q)
          if (regions_overlap(dep.region, nodes[static_cast<size_t>(q)].region))
            parents.push_back(q);
      }
      std::sort(parents.begin(), parents.end());
      parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
      TileNode node;
      node.op = static_cast<int32_t>(i);
      node.region = std::move(tile);
      node.parent_count = static_cast<int32_t>(parents.size());
      for (int32_t q : parents) {
        nodes[static_cast<size_t>(q)].children.push_back(self);
        node.depth = std::max(node.depth, nodes[static_cast<size_t>(q)].depth + 1);
      }
      nodes.push_back(std::move(node));
    }
    first_node[i + 1] = static_cast<int32_t>(nodes.size());
  }
  return nodes;
}

}  // namespace tessera::graph
