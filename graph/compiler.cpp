// compile_graph: checks → TeSA annotations → BN folding → MatMul-bias fusion,
// GELU and LayerNorm recognition → residual-Add and activation fusion →
// dead-code removal → TeSA propagation → tiler (APU,
// ASPEN §3.1) → memory plan → TileGraph.
#include "graph/compiler.hpp"

#include <algorithm>
#include <memory>

#include "graph/error.hpp"
#include "graph/fold_batch_norm.hpp"
#include "graph/fuse_activations.hpp"
#include "graph/fuse_attention.hpp"
#include "graph/fuse_expand_depthwise.hpp"
#include "graph/fuse_gelu.hpp"
#include "graph/fuse_input_scale.hpp"
#include "graph/fuse_layer_norm.hpp"
#include "graph/fuse_matmul_bias.hpp"
#include "graph/fuse_residual.hpp"
#include "graph/fuse_silu.hpp"
#include "graph/fuse_softmax_input.hpp"
#include "graph/fuse_transposes.hpp"
#include "graph/memory_plan.hpp"
#include "graph/op_shape.hpp"
#include "graph/split_global_pool.hpp"
#include "graph/tiler.hpp"

namespace tessera::graph {
namespace {

std::string tensor_label(const Graph& g, int32_t t) {
  return "tensor " + std::to_string(t) + " '" + g.tensors[static_cast<size_t>(t)].name + "'";
}

// Keeps only the ops whose output reaches a graph output, and the tensors
// they, the graph inputs and the graph outputs use; renumbers tensors.
Graph remove_dead(Graph graph) {
  std::vector<bool> needed(graph.tensors.size(), false);
  for (int32_t t : graph.outputs) needed[static_cast<size_t>(t)] = true;
  std::vector<bool> live_op(graph.ops.size(), false);
  for (size_t i = graph.ops.size(); i-- > 0;) {
    const Operator& op = graph.ops[i];
    if (!needed[static_cast<size_t>(op.outputs[0])]) continue;
    live_op[i] = true;
    for (int32_t t : op.inputs) needed[static_cast<size_t>(t)] = true;
  }
  for (int32_t t : graph.inputs) needed[static_cast<size_t>(t)] = true;

  std::vector<int32_t> remap(graph.tensors.size(), -1);
  Graph out;
  out.opset = graph.opset;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    if (!needed[t]) continue;
    remap[t] = static_cast<int32_t>(out.tensors.size());
    out.tensors.push_back(std::move(graph.tensors[t]));
  }
  auto map_all = [&](std::vector<int32_t>& v) {
    for (int32_t& t : v) t = remap[static_cast<size_t>(t)];
  };
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (!live_op[i]) continue;
    Operator op = std::move(graph.ops[i]);
    map_all(op.inputs);
    map_all(op.outputs);
    out.ops.push_back(std::move(op));
  }
  out.inputs = graph.inputs;
  out.outputs = graph.outputs;
  map_all(out.inputs);
  map_all(out.outputs);
  return out;
}

// Owns the weight data that CompiledTensor::weight spans point into.
struct WeightStore {
  std::vector<std::vector<float>> arrays;
};

}  // namespace

void check_graph(const Graph& graph) {
  const size_t n = graph.tensors.size();
  auto check_index = [&](int32_t t, const std::string& where) {
    if (t < 0 || static_cast<size_t>(t) >= n)
      throw Error(where + ": tensor index " + std::to_string(t) + " out of range (" +
                  std::to_string(n) + " tensors)");
  };
  for (size_t t = 0; t < n; ++t) {
    const TensorInfo& info = graph.tensors[t];
    if (!info.is_weight) continue;
    if (info.dtype != DType::Float32)
      throw Error(tensor_label(graph, static_cast<int32_t>(t)) + ": weights must be float32");
    for (int64_t d : info.shape)
      if (d < 0) throw Error(tensor_label(graph, static_cast<int32_t>(t)) + ": negative dimension");
    if (static_cast<int64_t>(info.weight.size()) != shape_numel(info.shape))
      throw Error(tensor_label(graph, static_cast<int32_t>(t)) + ": has " +
                  std::to_string(info.weight.size()) + " values for shape " +
                  shape_to_string(info.shape));
  }
  std::vector<bool> available(n, false);
  for (int32_t t : graph.inputs) {
    check_index(t, "graph input");
    const TensorInfo& info = graph.tensors[static_cast<size_t>(t)];
    if (info.is_weight || available[static_cast<size_t>(t)])
      throw Error("graph input " + tensor_label(graph, t) + " is a weight or listed twice");
    // int64 inputs carry indices (token ids for an embedding Gather).
    if (info.dtype != DType::Float32 && info.dtype != DType::Int64)
      throw Error("graph input " + tensor_label(graph, t) + " must be float32 or int64");
    for (int64_t d : info.shape)
      if (d < 1) throw Error("graph input " + tensor_label(graph, t) + " has a dimension < 1");
    available[static_cast<size_t>(t)] = true;
  }
  for (size_t t = 0; t < n; ++t)
    if (graph.tensors[t].is_weight) available[t] = true;
  for (const Operator& op : graph.ops) {
    std::string where = std::string(op_type_name(op.type)) + " '" + op.name + "'";
    if (static_cast<uint16_t>(op.type) > static_cast<uint16_t>(kLastOpType))
      throw Error(where + ": unknown operator type");
    if (op.outputs.size() != 1) throw Error(where + ": must have exactly one output");
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (int32_t t : op.inputs) {
      check_index(t, where);
      if (!available[static_cast<size_t>(t)])
        throw Error(where + ": input " + tensor_label(graph, t) +
                    " is not a graph input, a weight or the output of an earlier op");
      shapes.push_back(graph.tensors[static_cast<size_t>(t)].shape);
      dtypes.push_back(graph.tensors[static_cast<size_t>(t)].dtype);
    }
    int32_t o = op.outputs[0];
    check_index(o, where);
    const TensorInfo& out = graph.tensors[static_cast<size_t>(o)];
    if (available[static_cast<size_t>(o)])
      throw Error(where + ": output " + tensor_label(graph, o) +
                  " is already a graph input, a weight or another op's output");
    check_operand_dtypes(op, dtypes, out.dtype);
    Shape inferred = infer_output_shape(op, shapes);
    if (inferred != out.shape)
      throw Error(where + ": output " + tensor_label(graph, o) + " has shape " +
                  shape_to_string(out.shape) + " but the op produces " + shape_to_string(inferred));
    available[static_cast<size_t>(o)] = true;
  }
  if (graph.outputs.empty()) throw Error("the graph has no outputs");
  for (int32_t t : graph.outputs) {
    check_index(t, "graph output");
    if (!available[static_cast<size_t>(t)] || graph.tensors[static_cast<size_t>(t)].is_weight)
      throw Error("graph output " + tensor_label(graph, t) + " is not computed by the graph");
  }
}

namespace {

int32_t longest_path(const std::vector<TileNode>& nodes) {
  int32_t depth = 0;
  for (const TileNode& node : nodes) depth = std::max(depth, node.depth);
  return depth;
}

// The automatic reuse distance is the smallest whose ordering edges leave
// the longest path through the tiles as it is at kMaxAutoReuseDistance:
// the tiles that can run side by side stay as they were, and the arena
// shrinks. A smaller
// arena keeps more of it in cache: ResNet-50 pruned to 90% at 2 threads
// (tessera run, alternating, this 2-core Zen 5) ran 6.73-6.96 ms with
// distance 1 (arena 7.7 MiB) against 7.37-7.66 at 16 (20.5 MiB). Where
// the shorter distances lengthen the path (YOLO: 30 -> 43 tiles at 1) they
// also measured slower (11.43-11.85 ms against 11.25-11.54), so they are
// not taken. Nor are those that add more than kMaxOrderingEdgesPerNode
// edges per tile: each reuse orders every tile touching the old tensor
// before every tile writing the new one, so the edges grow with the square
// of the tile count (the 32-layer synthetic net at --tiles 64: 2.0 million
// edges at distance 1, a .tess 39% larger, for no measured gain).
// ResNet-50 and MobileNetV2 at 2 threads take 10 and 20 per tile.
constexpr int64_t kMaxOrderingEdgesPerNode = 64;

struct ArenaPlan {
  MemoryPlan plan;
  int32_t reuse_distance = 0;
};

// The memory plan at the reuse distance asked for or, for
// kAutoReuseDistance, at the one chosen as above; `nodes` get that plan's
// ordering edges. Each distance is planned once: the chosen trial is kept.
ArenaPlan plan_arena(const Graph& graph, std::vector<TileNode>& nodes, int32_t reuse_distance,
                     const KernelForecast* forecast) {
  auto plan_at = [&](std::vector<TileNode>& trial, int32_t distance) {
    return plan_memory(graph, trial,
                       MemoryPlanOptions{.reuse_distance = distance, .forecast = forecast});
  };
  if (reuse_distance != CompileOptions::kAutoReuseDistance)
    return {plan_at(nodes, reuse_distance), reuse_distance};
  const int32_t widest = CompileOptions::kMaxAutoReuseDistance;
  std::vector<TileNode> widest_nodes = nodes;
  MemoryPlan widest_plan = plan_at(widest_nodes, widest);
  const int32_t depth = longest_path(widest_nodes);
  const int64_t edge_budget = kMaxOrderingEdgesPerNode * static_cast<int64_t>(nodes.size());
  for (int32_t distance = 1; distance < widest; distance *= 2) {
    std::vector<TileNode> trial = nodes;
    MemoryPlan plan = plan_at(trial, distance);
    if (longest_path(trial) == depth && plan.added_edges <= edge_budget) {
      nodes = std::move(trial);
      return {std::move(plan), distance};
    }
  }
  nodes = std::move(widest_nodes);
  return {std::move(widest_plan), widest};
}

}  // namespace

TileGraph compile_graph(Graph graph, const CompileOptions& options, CompileReport* report,
                        const SparsityConfig* sparsity) {
  check_graph(graph);
  const bool tesa = sparsity && sparsity->enabled;
  if (tesa) apply_sparsity_annotations(graph, *sparsity);
  std::vector<FoldedBatchNorm> folds = fold_batch_norms(graph);
  // Bias first (the GELU's input is then the MatMul's output, and the Gelu
  // op it becomes fuses into that MatMul's epilogue in fuse_activations).
  std::vector<RewrittenPattern> biases, gelus, layer_norms, rms_norms, transposes;
  if (options.fuse_patterns) {
    transposes = fuse_transposes(graph);
    biases = fuse_matmul_bias(graph);
    gelus = fuse_gelu(graph);
    layer_norms = fuse_layer_norm(graph);
    rms_norms = fuse_rms_norm(graph);
  }
  // Residual Adds first: a Relu after the Add then fuses into the same Conv.
  std::vector<FusedResidual> residuals;
  if (options.fuse_residual) residuals = fuse_residual_adds(graph);
  // After the residuals: a SiLU after a residual Add then fuses into the same
  // Conv, which adds the residual before its activation.
  std::vector<RewrittenPattern> silus;
  std::vector<UnfusedSilu> unfused_silus;
  if (options.fuse_patterns) silus = fuse_silu(graph, &unfused_silus);
  std::vector<FusedActivation> fusions = fuse_activations(graph);
  // Last: the conv's inputs are then X, W, B, [R]; the scale is appended.
  std::vector<RewrittenPattern> scales, softmax_inputs;
  if (options.fuse_patterns) {
    scales = fuse_input_scales(graph);
    softmax_inputs = fuse_softmax_inputs(graph);
  }
  graph = remove_dead(std::move(graph));
  // After fusion, so the rules see the epilogues the kernels will run.
  SparsityReport sparsity_report;
  if (tesa) {
    const std::vector<TensorSparsity> tesas =
        propagate_sparsity(graph, *sparsity, &sparsity_report);
    // Bit rounding (SparTA §3.3): the weight's annotated width goes to its
    // MatMul/Gemm/Conv so kernel choice can pick an int8 kernel for it.
    for (Operator& op : graph.ops) {
      const bool weighted =
          op.type == OpType::MatMul || op.type == OpType::Gemm || op.type == OpType::Conv;
      if (!weighted || op.inputs.size() < 2) continue;
      const auto w = static_cast<size_t>(op.inputs[1]);
      if (graph.tensors[w].is_weight) op.attrs.weight_bits = tesas[w].bit_width;
    }
  }
  // After the sparsity rules, which see the expansion and the depthwise conv
  // as the two ops they are (a sparse expansion is not fused: it keeps its
  // sparse kernel).
  std::vector<RewrittenPattern> expansions;
  if (options.fuse_expand_depthwise) {
    expansions = fuse_expand_depthwise(graph);
    if (!expansions.empty()) graph = remove_dead(std::move(graph));
  }
  // After the sparsity rules too (they know MatMul and Softmax, and the
  // scores' zeros are data); after the Softmax took its scale and mask.
  std::vector<RewrittenPattern> attentions;
  if (options.fuse_attention) {
    attentions = fuse_attention(graph);
    if (!attentions.empty()) graph = remove_dead(std::move(graph));
  }
  // Last: the passes before see each squeeze pool as the one op it is. Not
  // for one thread, where no core waits for the pool: there the two stages
  // cost 0.20 ms per EfficientNet-B0 run against the single pool's 0.18
  // (tessera run --profile).
  std::vector<RewrittenPattern> pool_splits;
  if (options.split_global_pools && options.threads != 1) pool_splits = split_global_pools(graph);
  std::vector<TileNode> nodes =
      build_tile_nodes(graph, TilerOptions{.tiles = options.tiles,
                                           .threads = options.threads,
                                           .kernel_forecast = options.kernel_forecast.get()});
  auto [plan, reuse_distance] =
      plan_arena(graph, nodes, options.reuse_distance, options.kernel_forecast.get());

  TileGraph tg;
  auto store = std::make_shared<WeightStore>();
  uint64_t weight_bytes = 0;
  for (size_t t = 0; t < graph.tensors.size(); ++t) {
    TensorInfo& info = graph.tensors[t];
    CompiledTensor ct;
    ct.name = info.name;
    ct.shape = info.shape;
    ct.dtype = info.dtype;
    if (info.is_weight) {
      ct.storage = TensorStorage::Weight;
      store->arrays.push_back(std::move(info.weight));
      // The inner vector's buffer does not move when `arrays` grows.
      ct.weight = std::span<const float>(store->arrays.back());
      weight_bytes += store->arrays.back().size() * sizeof(float);
    } else {
      ct.storage = TensorStorage::Arena;
      ct.arena_offset = plan.offsets[t];
    }
    tg.tensors.push_back(std::move(ct));
  }
  tg.storage = store;
  tg.inputs = graph.inputs;
  tg.outputs = graph.outputs;
  tg.arena_bytes = plan.arena_bytes;
  tg.options = options;

  if (report) {
    *report = CompileReport{};
    std::vector<int32_t> tiles(graph.ops.size(), 0);
    for (const TileNode& node : nodes) ++tiles[static_cast<size_t>(node.op)];
    for (size_t i = 0; i < graph.ops.size(); ++i) {
      const Operator& op = graph.ops[i];
      OpReport r{op.name, op.type, op.kernel, tiles[i], ""};
      for (const FoldedBatchNorm& f : folds)
        if (f.conv == op.name) r.note = "BatchNormalization '" + f.batch_norm + "' folded in";
      for (const std::vector<RewrittenPattern>* passes :
           {&transposes, &biases, &gelus, &layer_norms, &rms_norms, &silus, &scales,
            &softmax_inputs, &expansions, &attentions})
        for (const RewrittenPattern& f : *passes)
          if (f.op == op.name) r.note += (r.note.empty() ? "" : "; ") + f.removed + " fused in";
      for (const RewrittenPattern& f : pool_splits)
        if (f.op == op.name) r.note += (r.note.empty() ? "" : "; ") + f.removed;
      for (const FusedResidual& f : residuals)
        if (f.conv == op.name)
          r.note += (r.note.empty() ? "" : "; ") + ("residual '" + f.add + "' fused in");
      for (const FusedActivation& f : fusions)
        if (f.producer == op.name)
          r.note += (r.note.empty() ? "" : "; ") + ("activation '" + f.activation + "' fused in");
      if (plan.alias_of[static_cast<size_t>(op.outputs[0])] >= 0)
        r.note += (r.note.empty() ? "" : "; ") +
                  std::string(is_alias_op(graph, op)    ? "alias (no copy)"
                              : op.attrs.fused_residual ? "written over its residual input"
                                                        : "written over its input");
      report->ops.push_back(std::move(r));
    }
    report->nodes = static_cast<int64_t>(nodes.size());
    for (const TileNode& node : nodes) report->edges += static_cast<int64_t>(node.children.size());
    report->arena_bytes = plan.arena_bytes;
    report->arena_bytes_without_reuse = plan.bytes_without_reuse;
    report->ordering_edges = plan.added_edges;
    report->reuse_distance = reuse_distance;
    report->weight_bytes = weight_bytes;
    report->sparsity = std::move(sparsity_report);
    for (const FoldedBatchNorm& f : folds)
      report->notes.push_back("BatchNormalization '" + f.batch_norm + "' folded into Conv '" +
                              f.conv + "'");
    // One line per pattern pass: how many, and the first few.
    auto summarize = [&](const std::vector<RewrittenPattern>& list, const std::string& what) {
      if (list.empty()) return;
      std::string line = std::to_string(list.size()) + " " + what + ":";
      for (size_t i = 0; i < list.size() && i < 3; ++i)
        line += (i ? ", '" : " '") + list[i].op + "'";
      if (list.size() > 3) line += ", ...";
      report->notes.push_back(line);
    };
    summarize(transposes, "Transpose(s) of a Transpose composed into one");
    summarize(biases, "bias Add(s) fused into MatMul epilogues");
    summarize(gelus, "GELU chain(s) replaced by Gelu");
    summarize(layer_norms, "decomposed LayerNorm(s) replaced by LayerNormalization");
    summarize(rms_norms, "decomposed RMSNorm(s) replaced by RMSNormalization");
    summarize(silus, "SiLU(s) Mul(x, Sigmoid(x)) fused into epilogues");
    summarize(scales, "channel scale Mul(s) (squeeze-and-excitation) fused into 1x1 Convs");
    summarize(softmax_inputs, "attention scale/mask Mul/Add/Where(s) fused into Softmax");
    summarize(expansions, "1x1 expansion conv(s) fused into depthwise convs");
    summarize(attentions, "attention MatMul-Softmax-MatMul chain(s) fused into FusedAttention");
    summarize(pool_splits,
              "GlobalAveragePool(s) split into row means (AveragePool) and their mean");
    for (const UnfusedSilu& u : unfused_silus)
      report->notes.push_back("SiLU '" + u.mul + "' not fused: " + u.reason);
    for (const FusedResidual& f : residuals)
      report->notes.push_back("'" + f.add + "' fused into '" + f.conv + "' as a residual epilogue");
    for (const FusedActivation& f : fusions)
      report->notes.push_back("'" + f.activation + "' fused into '" + f.producer +
                              "' as its epilogue");
  }
  tg.ops = std::move(graph.ops);
  tg.nodes = std::move(nodes);
  return tg;
}

}  // namespace tessera::graph
