#pragma once
// The compiled model: what `tessera compile` produces, what a `.tess` file
// stores and what the runtime executes. Tensors are placed either in the
// per-request activation arena or in the (read-only) weights.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/dtype.hpp"
#include "graph/layout.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"

namespace tessera::graph {

class KernelForecast;  // graph/kernel_forecast.hpp

enum class TensorStorage : uint8_t { Arena = 0, Weight = 1 };

struct CompiledTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  TensorStorage storage = TensorStorage::Arena;
  uint64_t arena_offset = 0;      // bytes from the arena start, when storage == Arena
  std::span<const float> weight;  // when storage == Weight; memory kept by TileGraph::storage
  // Physical element order (graph/layout.hpp); NHWC only for rank-4 arena
  // tensors that are neither model inputs nor outputs (kernels::assign_layouts).
  Layout layout = Layout::NCHW;
  int64_t byte_size() const { return shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype)); }
};

// One node of the tile graph = one tile of one operator (ASPEN §3.1).
struct TileNode {
  int32_t op = 0;                 // index into TileGraph::ops
  Region region;                  // the part of the op's output this node computes
  std::vector<int32_t> children;  // nodes that read what this node writes
  int32_t parent_count = 0;       // number of nodes whose output this node reads
  int32_t depth = 0;              // longest path from a source node
};

struct CompileOptions {
  int32_t tiles = 0;          // requested tiles per op (0: the compiler's rule)
  int32_t threads = 0;        // thread count the graph was tuned for (0: unspecified)
  std::string target;         // the machine it was compiled for, e.g. "x86_64 avx512f"
  bool fuse_residual = true;  // residual-Add fusion (graph/fuse_residual.hpp); not stored
  // MatMul-bias fusion and GELU / LayerNorm recognition (graph/fuse_matmul_bias.hpp,
  // fuse_gelu.hpp, fuse_layer_norm.hpp); not stored.
  bool fuse_patterns = true;
  // Inverted-residual expansions folded into their depthwise convs
  // (graph/fuse_expand_depthwise.hpp); not stored. Its kernel needs NHWC
  // activations, so an NCHW compile turns it off.
  bool fuse_expand_depthwise = true;
  // MatMul → Softmax → MatMul as one FusedAttention (graph/fuse_attention.hpp);
  // not stored.
  bool fuse_attention = true;
  // Global average pools in two stages, row means then their mean
  // (graph/split_global_pool.hpp), unless compiled for one thread; not
  // stored.
  bool split_global_pools = true;
  // Bounded run-ahead for reuse between tensors this many ops apart
  // (graph/memory_plan.hpp, MemoryPlanOptions); 0: provable reuse only.
  // Not stored. kAutoReuseDistance: the smallest of 1, 2, 4, ...,
  // kMaxAutoReuseDistance whose ordering edges leave the tile graph's
  // longest path as long as at kMaxAutoReuseDistance and stay within an
  // edge budget (plan_arena() in compiler.cpp).
  static constexpr int32_t kAutoReuseDistance = -1;
  // 16: BERT-base at sequence 384, batch 8 needs 378 MiB of arena instead of
  // 4.4 GiB and ran 2.7 s instead of 3.4 at 2 threads (the same at 1).
  static constexpr int32_t kMaxAutoReuseDistance = 16;
  int32_t reuse_distance = kAutoReuseDistance;
  // The kernels the compiler will choose, as the tiler needs to know them
  // (graph/kernel_forecast.hpp); null: it assumes the shape rules' kernels
  // (every conv Winograd can take runs Winograd). Not stored.
  std::shared_ptr<const KernelForecast> kernel_forecast = nullptr;
};

struct TileGraph {
  std::vector<CompiledTensor> tensors;
  std::vector<Operator> ops;     // in topological order
  std::vector<TileNode> nodes;   // in topological order (parents before children)
  std::vector<int32_t> inputs;   // tensor indices of the model inputs
  std::vector<int32_t> outputs;  // tensor indices of the model outputs
  uint64_t arena_bytes = 0;      // size of one request's activation arena
  CompileOptions options;
  std::shared_ptr<const void> storage;  // owns the memory the weight spans point into
};

}  // namespace tessera::graph
