#pragma once
// "cpu.conv_sparse": convolution with a constant unstructured-sparse weight,
// after SparDR (papers/spardr.md): feature-dataflow reconstruction of the
// input into a matrix L per tile (§III-B: data aggregation with vertical
// data reuse), weights in CSR whose indices are offsets into L (§III-C index
// mapping), output channels bucket-sorted by nonzero count (§III-C). With
// X, Y and the residual NHWC (X's layout at prepare decides what is packed)
// it runs as an implicit GEMM on the sparse GEMM's kernels instead
// (sparse_gemm.hpp; see conv_spardr.cpp), which measured faster there.
//
// Applies to 1-D/2-D Conv, group == 1, any kernel size, stride, padding and
// dilation, with the dense convs' fused epilogue (bias, activation,
// residual), when the weight's density is below conv_sparse_max_density();
// otherwise applies() says why not (no silent fallbacks).
//
// Usage (what the runtime does for one op):
//   if (!sparse::conv_sparse_applies(op, inputs)) {
//     PreparedOp state = sparse::prepare_conv_sparse(op, inputs);  // at model load
//     args.prepared = state.get();                                   // per tile
//     sparse::conv_sparse(args);
//   }
// A PreparedOp runs the kernel of the SGEMM ISA in use when it was made
// (cpu::set_gemm_isa() first to force another one).
#include <optional>
#include <span>
#include <string>

#include "graph/operator.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::sparse {

void conv_sparse(const TileArgs& args);
// Packs any density (benchmarks and tests run it above the crossover too);
// throws tessera::Error for an op the kernel cannot run.
PreparedOp prepare_conv_sparse(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> conv_sparse_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs);

// The weight density below which cpu.conv_sparse beats the dense conv
// variant that would run this conv (measured per conv form with
// bench/kernels/bench_spardr.cpp --sweep; see conv_spardr.cpp).
double conv_sparse_max_density(const graph::Operator& op, std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::sparse
