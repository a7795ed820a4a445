#include "kernels/kernel_choice.hpp"

#include <algorithm>

#include "graph/error.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {

KernelChoice choose_kernel(const graph::Operator& op, std::span<const ConstTensorView> inputs,
                           KernelPolicy policy, std::span<const std::string_view> disabled) {
  std::vector<const TileKernelVariant*> variants;
  for (const std::string& name : tile_kernel_variants(op.type))
    if (const TileKernelVariant* v = find_tile_kernel_variant(op.type, name)) variants.push_back(v);
  std::stable_sort(variants.begin(), variants.end(),
                   [](const auto* a, const auto* b) { return a->preference > b->preference; });
  KernelChoice choice;
  std::vector<std::string> reported;  // skips explained even when a fast variant wins
  for (const TileKernelVariant* v : variants) {
    if (policy == KernelPolicy::ReferenceOnly && v->name != "reference") continue;
    const bool is_disabled = std::find(disabled.begin(), disabled.end(), v->name) != disabled.end();
    std::optional<std::string> why_not =
        is_disabled ? std::optional<std::string>("disabled by a compile option")
                    : (v->applies ? v->applies(op, inputs) : std::nullopt);
    if (why_not) {
      const std::string reason = ": " + *why_not;
      choice.skipped.push_back(std::string(v->name) + reason);
      if (v->report_when_skipped || (v->serves_8bit_weights && op.attrs.weight_bits <= 8)) {
        // Variants skipped for the same reason (the Winograd forms on a
        // 1x1 conv) share one entry: "a, b: reason".
        if (!reported.empty() && reported.back().ends_with(reason))
          reported.back().insert(reported.back().size() - reason.size(),
                                 ", " + std::string(v->name));
        else
          reported.push_back(choice.skipped.back());
      }
      continue;
    }
    choice.kernel = std::string(v->name);
    break;
  }
  // A fall-back to the reference is a slow path worth explaining in full; a
  // specialised variant that does not apply next to another that does only
  // when it asks to be (TileKernelVariant::report_when_skipped).
  if (!choice.kernel.empty() && choice.kernel != "reference") choice.skipped = std::move(reported);
  return choice;
}

std::vector<KernelChoice> choose_kernels(graph::TileGraph& graph, KernelPolicy policy,
                                         std::span<const std::string_view> disabled) {
  std::vector<KernelChoice> choices;
  choices.reserve(graph.ops.size());
  for (graph::Operator& op : graph.ops) {
    std::vector<ConstTensorView> inputs;
    for (int32_t t : op.inputs) {
      const graph::CompiledTensor& tensor = graph.tensors[t];
      const bool constant = tensor.storage == graph::TensorStorage::Weight;
      inputs.push_back({constant ? tensor.weight.data() : nullptr, &tensor.shape, tensor.layout});
    }
    KernelChoice choice = choose_kernel(op, inputs, policy, disabled);
    if (choice.kernel.empty())
      throw Error("op '" + op.name + "' (" + std::string(graph::op_type_name(op.type)) +
                  "): no kernel variant applies");
    op.kernel = choice.kernel;
    choices.push_back(std::move(choice));
  }
  return choices;
}

}  // namespace tessera::kernels
