// `tessera compile MODEL.onnx -o MODEL.tess`: import, compile, save, report.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "apps/commands.hpp"
#include "apps/format.hpp"
#include "apps/npy.hpp"
#include "apps/tile_tuning.hpp"
#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "kernels/cpu/cache_sizes.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/kernel_forecast.hpp"
#include "kernels/layout_assignment.hpp"
#include "kernels/reference_evaluator.hpp"
#include "serialization/onnx/onnx_importer.hpp"
#include "serialization/tess/tess_writer.hpp"

namespace tessera::apps {

namespace {

struct CompileArgs {
  std::string model;
  std::string output;
  int32_t tiles = 0;
  int32_t threads = 0;
  bool quiet = false;
  bool reference_kernels = false;
  bool no_winograd = false;
  bool no_sparse_kernels = false;
  bool tune = false;
  int32_t tune_iterations = 10;
  std::string layout = "auto";
  bool no_residual_fusion = false;
  bool no_pattern_fusion = false;
  bool no_expand_fusion = false;
  bool no_attention_fusion = false;
  bool no_pool_split = false;
  std::string sparsity;  // "", "auto" or an annotation FILE.json
  int64_t batch = 0;
  std::vector<std::string> shapes;  // NAME=D0,D1,... (repeatable)
  int32_t reuse_distance = graph::CompileOptions::kAutoReuseDistance;
};

// --sparsity: TeSA from the weights' zeros ("auto") plus a file's annotations.
graph::SparsityConfig sparsity_config(const std::string& flag) {
  graph::SparsityConfig config;
  if (flag.empty()) return config;
  config.enabled = true;
  config.evaluate = kernels::reference_evaluator();
  if (flag == "auto") return config;
  config.annotations =
      graph::read_sparsity_file(flag, [](const std::string& path, graph::Shape* shape) {
        NpyArray a = read_npy(path);
        *shape = a.shape;
        if (a.dtype == "int64") return std::vector<float>(a.int64_data.begin(), a.int64_data.end());
        return a.data;
      });
  return config;
}

// `--shape NAME=DIMS`: NAME is an input (DIMS its whole shape) or a
// symbolic dim (one value).
serialization::InputShapeOverrides parse_shape_overrides(const CompileArgs& a) {
  serialization::InputShapeOverrides overrides;
  overrides.batch = a.batch;
  for (const std::string& text : a.shapes) {
    const auto eq = text.rfind('=');
    const std::string usage = "--shape " + text + ": expected NAME=DIMS, e.g. input=1,3,224,224";
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) throw Error(usage);
    std::vector<int64_t> dims;
    size_t at = eq + 1;
    while (at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string part = text.substr(at, comma - at);
      size_t used = 0;
      int64_t v = 0;
      try {
        v = std::stoll(part, &used);
      } catch (const std::exception&) {
        throw Error(usage);
      }
      if (used != part.size() || v < 1)
        throw Error("--shape " + text + ": dims must be positive integers");
      dims.push_back(v);
      at = comma + 1;
    }
    if (!overrides.shapes.emplace(text.substr(0, eq), dims).second)
      throw Error("--shape " + text.substr(0, eq) + " is given twice");
  }
  return overrides;
}

std::string machine_target() {
  std::string t = "x86_64";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) t += " avx2";
  if (__builtin_cpu_supports("fma")) t += " fma";
  if (__builtin_cpu_supports("avx512f")) t += " avx512f";
#else
  t = "generic";
#endif
  return t;
}

// Everything from operator graph to a tile graph ready to save: the compiler's
// passes, the kernel choice (reported per op, with why a faster variant did
// not apply), then each activation tensor's layout from the chosen kernels'
// layout contracts.
struct BuiltTileGraph {
  graph::TileGraph tiles;
  kernels::LayoutAssignment layouts;
};

BuiltTileGraph build_tile_graph(graph::Graph g, const graph::CompileOptions& options,
                                const CompileArgs& args, const graph::SparsityConfig& sparsity,
                                graph::CompileReport* report) {
  std::vector<std::string_view> disabled;
  if (args.no_winograd) {
    disabled.push_back("cpu.conv_winograd");
    disabled.push_back("cpu.conv_winograd_2x2");
  }
  // Tessera-dense on a pruned model (bench/e2e/compare_sparse.py). Names that
  // are not registered (cpu.conv_sparse until it lands) are simply never met.
  if (args.no_sparse_kernels)
    for (std::string_view v : {"cpu.gemm_sparse", "cpu.matmul_sparse", "cpu.conv_sparse"})
      disabled.push_back(v);
  const kernels::KernelPolicy policy = args.reference_kernels ? kernels::KernelPolicy::ReferenceOnly
                                                              : kernels::KernelPolicy::Fastest;
  const kernels::LayoutPolicy layout_policy =
      args.layout == "nchw" ? kernels::LayoutPolicy::Nchw : kernels::LayoutPolicy::Auto;
  // The tiler cuts each conv for the kernel that will run it (a sparse 3x3
  // conv is not cut along Winograd's blocks): it asks the kernel choice.
  graph::CompileOptions with_forecast = options;
  with_forecast.kernel_forecast = std::make_shared<kernels::ChoiceForecast>(
      policy, disabled,
      layout_policy == kernels::LayoutPolicy::Nchw ? graph::Layout::NCHW : graph::Layout::NHWC);
  BuiltTileGraph built{graph::compile_graph(std::move(g), with_forecast, report, &sparsity), {}};
  graph::TileGraph& tiles = built.tiles;
  // Layouts follow from the kernels (NHWC where they all allow it), and some
  // choices follow from the layouts (cpu.conv_sparse's crossovers differ
  // between NCHW and NHWC): choose with every tensor NCHW, assign layouts,
  // choose again with them, and repeat while a choice changes (the variants
  // of one op support the same layouts today, so the second pass agrees).
  auto choices = kernels::choose_kernels(tiles, policy, disabled);
  built.layouts = kernels::assign_layouts(tiles, layout_policy);
  for (int pass = 0; pass < 3; ++pass) {
    auto again = kernels::choose_kernels(tiles, policy, disabled);
    const bool same = std::equal(choices.begin(), choices.end(), again.begin(),
                                 [](const auto& x, const auto& y) { return x.kernel == y.kernel; });
    choices = std::move(again);
    if (same) break;
    built.layouts = kernels::assign_layouts(tiles, layout_policy);
  }
  if (report) {
    for (size_t i = 0; i < choices.size(); ++i) {
      graph::OpReport& op = report->ops[i];
      op.kernel = choices[i].kernel;
      for (const std::string& skipped : choices[i].skipped)
        op.note += (op.note.empty() ? "not " : "; not ") + skipped;
      if (tiles.tensors[static_cast<size_t>(tiles.ops[i].outputs[0])].layout == graph::Layout::NHWC)
        op.note += (op.note.empty() ? "" : "; ") + std::string("NHWC out");
    }
  }
  return built;
}

std::string tiles_label(int32_t tiles) {
  return tiles == 0 ? "rule" : std::to_string(tiles);
}

void print_tuning(const TileTuning& t, int32_t threads) {
  std::printf("  tuning tiles per op for %d thread(s), median ms per run:\n", threads);
  for (const TileCandidate& c : t.candidates)
    std::printf("    tiles %-6s %10.3f%s\n", tiles_label(c.tiles).c_str(), c.median_ms,
                c.tiles == t.best_tiles ? "  <- chosen" : "");
}

double percent(int64_t part, int64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// The TeSA table (SparTA Fig. 14): each tensor's pruned share before and
// after propagation; bench/e2e/sparsity_propagation.py parses it.
void print_sparsity(const CompileArgs& a, const graph::SparsityReport& s) {
  if (!s.ran) return;
  int64_t before = 0, after = 0, total = 0;
  for (const auto& t : s.tensors)
    if (t.is_weight) {
      before += t.pruned_before;
      after += t.pruned_after;
      total += t.numel;
    }
  std::printf(
      "  sparsity (--sparsity %s): %d sweep(s), %lld weight element(s) zeroed by "
      "propagation; weights pruned %.1f%% -> %.1f%%\n",
      a.sparsity.c_str(), s.sweeps, static_cast<long long>(s.weights_zeroed),
      percent(before, total), percent(after, total));
  std::printf("  %-40s %-10s %-32s %12s %8s %8s %4s\n", "tensor", "kind", "op", "elements",
              "before", "after", "bits");
  for (const auto& t : s.tensors)
    std::printf("  %-40s %-10s %-32s %12lld %7.1f%% %7.1f%% %4d\n", t.tensor.c_str(),
                t.is_weight ? "weight" : "activation", t.consumer.c_str(),
                static_cast<long long>(t.numel), percent(t.pruned_before, t.numel),
                percent(t.pruned_after, t.numel), t.bit_width);
  for (const auto& note : s.notes) std::printf("  note: %s\n", note.c_str());
}

void print_report(const CompileArgs& a, const graph::CompileReport& r,
                  const kernels::LayoutAssignment& layouts) {
  std::printf("tessera compile: %s -> %s\n", a.model.c_str(), a.output.c_str());
  std::printf("  ops %zu, tile nodes %lld, edges %lld, arena %s (%s without reuse), weights %s\n",
              r.ops.size(), static_cast<long long>(r.nodes), static_cast<long long>(r.edges),
              format_bytes(r.arena_bytes).c_str(),
              format_bytes(r.arena_bytes_without_reuse).c_str(),
              format_bytes(r.weight_bytes).c_str());
  const kernels::cpu::CacheSizes& caches = kernels::cpu::cache_sizes();
  const std::string_view isa = kernels::cpu::gemm_isa_name(kernels::cpu::gemm_isa());
  std::printf(
      "  this machine: SGEMM ISA %.*s, caches per core L1d %s, L2 %s (%s; kernel blocking "
      "is sized from them)\n",
      static_cast<int>(isa.size()), isa.data(), format_bytes(caches.l1d).c_str(),
      format_bytes(caches.l2).c_str(), caches.source.c_str());
  if (r.ordering_edges > 0)
    std::printf(
        "  memory: %lld ordering edges let tensors %d+ ops apart share bytes (paths run at most "
        "that far ahead of each other; --reuse-distance 0: none)\n",
        static_cast<long long>(r.ordering_edges), r.reuse_distance);
  std::printf("  %-32s %-20s %-18s %s\n", "op", "type", "kernel", "tiles");
  for (const auto& op : r.ops)
    std::printf("  %-32s %-20s %-18s %d%s%s\n", op.name.c_str(),
                std::string(graph::op_type_name(op.type)).c_str(), op.kernel.c_str(), op.tiles,
                op.note.empty() ? "" : "  ", op.note.c_str());
  std::printf("  layout: %d/%d rank-4 activation tensors stored NHWC (--layout %s)\n",
              layouts.nhwc_tensors, layouts.material_tensors, a.layout.c_str());
  for (const auto& note : r.notes) std::printf("  note: %s\n", note.c_str());
  // Transformers keep dozens of rank-4 attention tensors NCHW for the same
  // few reasons: the first ones say why, then a count.
  constexpr size_t kLayoutNotes = 12;
  for (size_t i = 0; i < layouts.kept_nchw.size() && i < kLayoutNotes; ++i)
    std::printf("  note: %s\n", layouts.kept_nchw[i].c_str());
  if (layouts.kept_nchw.size() > kLayoutNotes)
    std::printf("  note: ... and %zu more tensors stay NCHW\n",
                layouts.kept_nchw.size() - kLayoutNotes);
  print_sparsity(a, r.sparsity);
}

}  // namespace

Command add_compile_command(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  auto* sub = app.add_subcommand("compile", "Compile an ONNX model into a .tess tile graph");
  sub->add_option("model", args->model, "ONNX model file")->required();
  sub->add_option("-o,--output", args->output, "Output .tess file")->required();
  sub->add_option("--tiles", args->tiles, "Tiles per operator (default: chosen per op)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--threads", args->threads, "Thread count to tune for (default: all cores)")
      ->check(CLI::Range(1, 4096));
  sub->add_flag("-q,--quiet", args->quiet, "Print nothing on success");
  sub->add_flag("--reference-kernels", args->reference_kernels,
                "Use the scalar reference kernels everywhere (for checking and A/B runs)");
  sub->add_flag("--no-winograd", args->no_winograd,
                "Never use the Winograd 3x3 conv kernels (cpu.conv_winograd, "
                "cpu.conv_winograd_2x2), for A/B runs");
  sub->add_flag("--no-sparse-kernels", args->no_sparse_kernels,
                "Never use the sparse-weight kernels (cpu.gemm_sparse, cpu.matmul_sparse, "
                "cpu.conv_sparse): pruned weights run dense, for A/B runs");
  sub->add_flag("--tune", args->tune,
                "Measure candidate tiles-per-op settings on this machine at --threads and keep "
                "the fastest (ASPEN Fig. 10a)");
  sub->add_option("--tune-iterations", args->tune_iterations, "Timed runs per candidate")
      ->check(CLI::Range(1, 10000));
  sub->add_option(
         "--layout", args->layout,
         "Activation layout: auto (NHWC where the kernels allow it) or nchw (for A/B runs)")
      ->check(CLI::IsMember({"auto", "nchw"}));
  sub->add_flag("--no-residual-fusion", args->no_residual_fusion,
                "Keep residual Adds as separate ops (for A/B runs)");
  sub->add_flag("--no-pattern-fusion", args->no_pattern_fusion,
                "Keep MatMul bias Adds, GELU chains and decomposed LayerNorms as separate ops "
                "(for A/B runs)");
  sub->add_flag("--no-expand-fusion", args->no_expand_fusion,
                "Keep 1x1 expansion convs apart from the depthwise convs that read them (for A/B "
                "runs; --layout nchw implies it)");
  sub->add_flag("--no-attention-fusion", args->no_attention_fusion,
                "Keep attention's MatMul, Softmax and MatMul as three ops instead of one "
                "FusedAttention (for A/B runs)");
  sub->add_flag("--no-pool-split", args->no_pool_split,
                "Keep each GlobalAveragePool one op instead of row means and their mean (for A/B "
                "runs)");
  sub->add_option("--reuse-distance", args->reuse_distance,
                  "Let tensors this many ops apart share arena bytes by ordering their tiles, "
                  "bounding how far independent paths run ahead (0: only provably safe reuse; "
                  "default: the smallest of 1, 2, 4, 8, 16 whose edges leave the longest path "
                  "through the tiles as at 16, at most 64 edges per tile)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--sparsity", args->sparsity,
                  "TeSA pruning attributes, propagated through the graph (SparTA §3.2): auto "
                  "(the weights' zeros) or FILE.json naming weights and patterns");
  sub->add_option("--batch", args->batch,
                  "Batch size: fixes dim 0 of every input where the model leaves it symbolic")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--shape", args->shapes,
                  "NAME=DIMS: an input's shape (NAME=1,3,224,224) or a symbolic dim's value "
                  "(seq=128); repeatable")
      ->allow_extra_args(false);
  return [args] {
    const graph::SparsityConfig sparsity = sparsity_config(args->sparsity);
    graph::Graph g = serialization::import_onnx_file(args->model, parse_shape_overrides(*args));
    graph::CompileOptions options;
    options.tiles = args->tiles;
    options.threads = args->threads > 0 ? args->threads
                                        : static_cast<int32_t>(std::thread::hardware_concurrency());
    options.target = machine_target();
    options.fuse_residual = !args->no_residual_fusion;
    options.fuse_patterns = !args->no_pattern_fusion;
    // The fused kernel reads and writes NHWC only (cpu.conv_expand_depthwise).
    options.fuse_expand_depthwise = !args->no_expand_fusion && args->layout != "nchw";
    options.split_global_pools = !args->no_pool_split;
    options.fuse_attention = !args->no_attention_fusion;
    options.reuse_distance = args->reuse_distance;
    if (args->tune && args->tiles > 0)
      throw Error("--tune searches the tile count: give --tune or --tiles, not both");
    std::optional<TileTuning> tuning;
    if (args->tune) {
      tuning = tune_tiles(
          [&](int32_t tiles) {
            graph::CompileOptions candidate = options;
            candidate.tiles = tiles;
            return build_tile_graph(g, candidate, *args, sparsity, nullptr).tiles;
          },
          options.threads, args->tune_iterations, args->output + ".tuning");
      options.tiles = tuning->best_tiles;
    }
    graph::CompileReport report;
    BuiltTileGraph built = build_tile_graph(std::move(g), options, *args, sparsity, &report);
    serialization::write_tess_file(built.tiles, args->output);
    if (!args->quiet) {
      print_report(*args, report, built.layouts);
      if (tuning) print_tuning(*tuning, options.threads);
    }
    return 0;
  };
}

}  // namespace tessera::apps
