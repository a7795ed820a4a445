// `tessera compile MODEL.onnx -o MODEL.tess`: import, compile, save, report.
#include <cstdio>
#include <string>
#include <thread>

#include "apps/commands.hpp"
#include "apps/format.hpp"
#include "graph/compiler.hpp"
#include "graph/error.hpp"
#include "kernels/kernel_choice.hpp"
#include "kernels/layout_assignment.hpp"
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
  std::string layout = "auto";
  bool no_residual_fusion = false;
};

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

void print_report(const CompileArgs& a, const graph::CompileReport& r,
                  const kernels::LayoutAssignment& layouts) {
  std::printf("tessera compile: %s -> %s\n", a.model.c_str(), a.output.c_str());
  std::printf("  ops %zu, tile nodes %lld, edges %lld, arena %s (%s without reuse), weights %s\n",
              r.ops.size(), static_cast<long long>(r.nodes), static_cast<long long>(r.edges),
              format_bytes(r.arena_bytes).c_str(),
              format_bytes(r.arena_bytes_without_reuse).c_str(),
              format_bytes(r.weight_bytes).c_str());
  std::printf("  %-32s %-20s %-18s %s\n", "op", "type", "kernel", "tiles");
  for (const auto& op : r.ops)
    std::printf("  %-32s %-20s %-18s %d%s%s\n", op.name.c_str(),
                std::string(graph::op_type_name(op.type)).c_str(), op.kernel.c_str(), op.tiles,
                op.note.empty() ? "" : "  ", op.note.c_str());
  std::printf("  layout: %d/%d rank-4 activation tensors stored NHWC (--layout %s)\n",
              layouts.nhwc_tensors, layouts.material_tensors, a.layout.c_str());
  for (const auto& note : r.notes) std::printf("  note: %s\n", note.c_str());
  for (const auto& why : layouts.kept_nchw) std::printf("  note: %s\n", why.c_str());
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
  sub->add_option(
         "--layout", args->layout,
         "Activation layout: auto (NHWC where the kernels allow it) or nchw (for A/B runs)")
      ->check(CLI::IsMember({"auto", "nchw"}));
  sub->add_flag("--no-residual-fusion", args->no_residual_fusion,
                "Keep residual Adds as separate ops (for A/B runs)");
  return [args] {
    graph::Graph g = serialization::import_onnx_file(args->model);
    graph::CompileOptions options;
    options.tiles = args->tiles;
    options.threads = args->threads > 0 ? args->threads
                                        : static_cast<int32_t>(std::thread::hardware_concurrency());
    options.target = machine_target();
    options.fuse_residual = !args->no_residual_fusion;
    graph::CompileReport report;
    graph::TileGraph tiles = graph::compile_graph(std::move(g), options, &report);
    const auto choices = kernels::choose_kernels(tiles, args->reference_kernels
                                                            ? kernels::KernelPolicy::ReferenceOnly
                                                            : kernels::KernelPolicy::Fastest);
    for (size_t i = 0; i < choices.size(); ++i) {
      report.ops[i].kernel = choices[i].kernel;
      for (const std::string& skipped : choices[i].skipped)
        report.ops[i].note += (report.ops[i].note.empty() ? "not " : "; not ") + skipped;
    }
    const kernels::LayoutAssignment layouts = kernels::assign_layouts(
        tiles, args->layout == "nchw" ? kernels::LayoutPolicy::Nchw : kernels::LayoutPolicy::Auto);
    for (size_t i = 0; i < tiles.ops.size(); ++i)
      if (tiles.tensors[static_cast<size_t>(tiles.ops[i].outputs[0])].layout == graph::Layout::NHWC)
        report.ops[i].note += (report.ops[i].note.empty() ? "" : "; ") + std::string("NHWC out");
    serialization::write_tess_file(tiles, args->output);
    if (!args->quiet) print_report(*args, report, layouts);
    return 0;
  };
}

}  // namespace tessera::apps
