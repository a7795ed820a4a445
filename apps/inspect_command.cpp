// `tessera inspect MODEL.tess`: a verified file's contents, for people or tools.
#include <cstdio>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/format.hpp"
#include "graph/tile_graph.hpp"
#include "serialization/tess/tess_reader.hpp"

namespace tessera::apps {

namespace {

struct InspectArgs {
  std::string model;
  bool json = false;
  bool nodes = false;
};

struct Summary {
  std::vector<int32_t> tiles_per_op;
  int64_t edges = 0;
  int32_t max_depth = 0;
  uint64_t weight_bytes = 0;
};

Summary summarise(const graph::TileGraph& g) {
  Summary s;
  s.tiles_per_op.assign(g.ops.size(), 0);
  for (const auto& n : g.nodes) {
    ++s.tiles_per_op[n.op];
    s.edges += static_cast<int64_t>(n.children.size());
    s.max_depth = std::max(s.max_depth, n.depth);
  }
  for (const auto& t : g.tensors)
    if (t.storage == graph::TensorStorage::Weight) s.weight_bytes += t.weight.size_bytes();
  return s;
}

std::string tensor_list_json(const graph::TileGraph& g, const std::vector<int32_t>& ids) {
  std::string j = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& t = g.tensors[ids[i]];
    j += std::string(i ? ", " : "") + "{\"name\": " + json_string(t.name) +
         ", \"shape\": " + json_dims(t.shape) + ", \"dtype\": \"" +
         std::string(graph::dtype_name(t.dtype)) + "\"}";
  }
  return j + "]";
}

void print_json(const InspectArgs& a, const graph::TileGraph& g, const Summary& s) {
  std::string j =
      "{\"file\": " + json_string(a.model) + ", \"target\": " + json_string(g.options.target) +
      ", \"tiles_option\": " + std::to_string(g.options.tiles) +
      ", \"threads_option\": " + std::to_string(g.options.threads) +
      ", \"inputs\": " + tensor_list_json(g, g.inputs) +
      ", \"outputs\": " + tensor_list_json(g, g.outputs) +
      ", \"nodes\": " + std::to_string(g.nodes.size()) + ", \"edges\": " + std::to_string(s.edges) +
      ", \"max_depth\": " + std::to_string(s.max_depth) +
      ", \"arena_bytes\": " + std::to_string(g.arena_bytes) +
      ", \"weight_bytes\": " + std::to_string(s.weight_bytes) + ", \"ops\": [";
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const auto& op = g.ops[i];
    j += std::string(i ? ", " : "") + "{\"name\": " + json_string(op.name) + ", \"type\": \"" +
         std::string(graph::op_type_name(op.type)) + "\", \"kernel\": " + json_string(op.kernel) +
         ", \"tiles\": " + std::to_string(s.tiles_per_op[i]) +
         ", \"output_shape\": " + json_dims(g.tensors[op.outputs[0]].shape) +
         ", \"output_layout\": \"" +
         std::string(graph::layout_name(g.tensors[op.outputs[0]].layout)) + "\"}";
  }
  std::printf("%s]}\n", j.c_str());
}

void print_text(const InspectArgs& a, const graph::TileGraph& g, const Summary& s) {
  std::printf("%s: compiled for %s (tiles option %d, threads %d)\n", a.model.c_str(),
              g.options.target.c_str(), g.options.tiles, g.options.threads);
  for (int32_t t : g.inputs)
    std::printf("  input  %-24s %s\n", g.tensors[t].name.c_str(),
                json_dims(g.tensors[t].shape).c_str());
  for (int32_t t : g.outputs)
    std::printf("  output %-24s %s\n", g.tensors[t].name.c_str(),
                json_dims(g.tensors[t].shape).c_str());
  std::printf("  %zu ops, %zu tile nodes, %lld edges, depth %d, arena %s, weights %s\n",
              g.ops.size(), g.nodes.size(), static_cast<long long>(s.edges), s.max_depth,
              format_bytes(g.arena_bytes).c_str(), format_bytes(s.weight_bytes).c_str());
  int nhwc = 0;
  for (const auto& t : g.tensors) nhwc += t.layout == graph::Layout::NHWC ? 1 : 0;
  std::printf("  %d tensors stored NHWC\n", nhwc);
  std::printf("  %-32s %-20s %-12s %-6s %s\n", "op", "type", "kernel", "tiles", "output");
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const auto& op = g.ops[i];
    const auto& out = g.tensors[op.outputs[0]];
    std::printf("  %-32s %-20s %-12s %-6d %s %s\n", op.name.c_str(),
                std::string(graph::op_type_name(op.type)).c_str(), op.kernel.c_str(),
                s.tiles_per_op[i], json_dims(out.shape).c_str(),
                std::string(graph::layout_name(out.layout)).c_str());
  }
  if (!a.nodes) return;
  std::printf("  %-6s %-24s %-28s %-7s %-5s %s\n", "node", "op", "region", "parents", "depth",
              "children");
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    std::string children;
    for (int32_t c : n.children) children += (children.empty() ? "" : ",") + std::to_string(c);
    std::printf("  %-6zu %-24s %-28s %-7d %-5d %s\n", i, g.ops[n.op].name.c_str(),
                graph::region_to_string(n.region).c_str(), n.parent_count, n.depth,
                children.c_str());
  }
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* sub = app.add_subcommand("inspect", "Describe a .tess file");
  sub->add_option("model", args->model, ".tess model file")->required();
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_flag("--nodes", args->nodes, "Also list every tile node with its region and edges");
  return [args] {
    const graph::TileGraph g = serialization::read_tess_file(args->model);
    const Summary s = summarise(g);
    if (args->json)
      print_json(*args, g, s);
    else
      print_text(*args, g, s);
    return 0;
  };
}

}  // namespace tessera::apps
