#pragma once
// The sparse-weight tile-kernel variants of MatMul and Gemm, built on
// kernels/sparse/sparse_gemm.hpp. Each applies only when its constant weight
// is sparse enough that the chosen layout (BSR of one block shape, CSR, or
// both summed) is estimated faster than the dense SGEMM; otherwise applies()
// names the density and the crossovers (no silent fallbacks).
//
// Usage (what the runtime does for one op):
//   if (!sparse::matmul_sparse_applies(op, inputs)) {
//     PreparedOp state = sparse::prepare_matmul_sparse(op, inputs);  // at model load
//     args.prepared = state.get();                                     // per tile
//     sparse::matmul_sparse(args);
//   }
#include <optional>
#include <span>
#include <string>

#include "graph/operator.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::sparse {

// "cpu.matmul_sparse": MatMul with A of rank >= 2 and a constant sparse B [K, N].
void matmul_sparse(const TileArgs& args);
PreparedOp prepare_matmul_sparse(const graph::Operator& op,
                                 std::span<const ConstTensorView> inputs);
std::optional<std::string> matmul_sparse_applies(const graph::Operator& op,
                                                 std::span<const ConstTensorView> inputs);

// "cpu.gemm_sparse": Gemm Y = alpha·A·op(B) + beta·C with a constant sparse B
// (any trans_b, alpha folded in), trans_a = 0, C absent or constant (scalar,
// [N], [1,N], [M,1] or [M,N]).
void gemm_sparse(const TileArgs& args);
PreparedOp prepare_gemm_sparse(const graph::Operator& op, std::span<const ConstTensorView> inputs);
std::optional<std::string> gemm_sparse_applies(const graph::Operator& op,
                                               std::span<const ConstTensorView> inputs);

}  // namespace tessera::kernels::sparse
