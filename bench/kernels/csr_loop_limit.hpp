#pragma once
// The ceiling of the CSR kernel's inner loop on this core (bench_spmm
// --loop-limit): kernels/sparse/csr_dot_impl.hpp's step, one nonzero of B
// against a 64-row panel of A^T in L1 (an index load, a broadcast of the
// value, four vector loads and four FMAs into two rotating sets of sums),
// timed with every operand hot and nothing else to do, beside the same
// step without the index load, without the broadcast and with additions
// instead of FMAs, to show which part of it sets the pace.
#include <string>
#include <vector>

namespace tessera::bench {

struct LoopStepTime {
  std::string label;
  double ns_per_step = 0;
};

// Empty where the CPU lacks AVX-512 (the step is the AVX-512 kernel's).
std::vector<LoopStepTime> csr_loop_step_times();

}  // namespace tessera::bench
