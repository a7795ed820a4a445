#pragma once
// The compiler's kernel choice: for every op, the most preferred registered
// variant that applies to it. Every op whose faster variant does not apply
// says why, so the report never hides a slow path (no silent fallbacks).
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/tile_graph.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {

struct KernelChoice {
  std::string kernel;                // the chosen variant, stored in Operator::kernel
  std::vector<std::string> skipped;  // "variant: reason" for each preferred one not taken
};

enum class KernelPolicy {
  Fastest,        // the most preferred variant that applies
  ReferenceOnly,  // always the scalar reference (for checking and A/B runs)
};

// Sets Operator::kernel of every op in `graph`; returns one entry per op.
// Variants named in `disabled` are never chosen (A/B runs, e.g. tessera
// compile --no-winograd); the report says they were disabled. A variant's
// applies() sees the tensors' current layouts (CompiledTensor::layout): run
// it again after assign_layouts() so that choices whose speed depends on
// the layout (cpu.conv_sparse's density crossovers) see the one the
// tensors will have.
std::vector<KernelChoice> choose_kernels(graph::TileGraph& graph, KernelPolicy policy,
                                         std::span<const std::string_view> disabled = {});

// The choice for one op whose inputs are `inputs` (constants with their
// data, activations with the layout they will have): what choose_kernels()
// stores for it. KernelChoice::kernel is empty when no variant applies.
KernelChoice choose_kernel(const graph::Operator& op, std::span<const ConstTensorView> inputs,
                           KernelPolicy policy, std::span<const std::string_view> disabled = {});

}  // namespace tessera::kernels
