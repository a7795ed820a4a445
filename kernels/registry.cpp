// The tile kernel registry: an explicit table of (op type, variant, kernel).
// Deliberately no self-registering static initialisers: tessera_kernels is a
// static archive, and the linker drops objects nothing references. A new
// variant (SIMD, sparse, device) is one more line here.
#include <string>
#include <string_view>
#include <vector>

#include "kernels/reference/reference_kernels.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {
namespace {

using graph::OpType;

struct KernelEntry {
  OpType type;
  std::string_view variant;
  TileKernel kernel;
};

constexpr std::string_view kReference = "reference";

constexpr KernelEntry kKernelTable[] = {
    {OpType::Conv, kReference, reference::conv},
    {OpType::Gemm, kReference, reference::gemm},
    {OpType::MatMul, kReference, reference::matmul},
    {OpType::Relu, kReference, reference::relu},
    {OpType::Clip, kReference, reference::clip},
    {OpType::Sigmoid, kReference, reference::sigmoid},
    {OpType::Add, kReference, reference::add},
    {OpType::Mul, kReference, reference::mul},
    {OpType::MaxPool, kReference, reference::max_pool},
    {OpType::AveragePool, kReference, reference::average_pool},
    {OpType::GlobalAveragePool, kReference, reference::global_average_pool},
    {OpType::Flatten, kReference, reference::flatten},
    {OpType::Reshape, kReference, reference::reshape},
    {OpType::Concat, kReference, reference::concat},
    {OpType::Softmax, kReference, reference::softmax},
    {OpType::BatchNormalization, kReference, reference::batch_normalization},
};

}  // namespace

TileKernel find_tile_kernel(graph::OpType type, std::string_view variant) {
  for (const KernelEntry& entry : kKernelTable)
    if (entry.type == type && entry.variant == variant) return entry.kernel;
  return nullptr;
}

std::vector<std::string> tile_kernel_variants(graph::OpType type) {
  std::vector<std::string> variants;
  // The reference first, then the others in table order.
  for (const KernelEntry& entry : kKernelTable)
    if (entry.type == type && entry.variant == kReference) variants.emplace_back(entry.variant);
  for (const KernelEntry& entry : kKernelTable)
    if (entry.type == type && entry.variant != kReference) variants.emplace_back(entry.variant);
  return variants;
}

}  // namespace tessera::kernels
