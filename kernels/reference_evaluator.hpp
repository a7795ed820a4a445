#pragma once
// The reference kernels as a whole-op evaluator for the compiler's tensor
// scrambling (graph/sparsity.hpp, SparTA §3.2): graph/ cannot call kernels,
// so the command line hands it this.
#include "graph/sparsity.hpp"

namespace tessera::kernels {

// Runs the op's reference tile kernel over its whole output (NCHW, dense).
// Throws tessera::Error for an op type without a reference kernel.
graph::OpEvaluator reference_evaluator();

}  // namespace tessera::kernels
