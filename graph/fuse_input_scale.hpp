#pragma once
// Squeeze-and-excitation scales folded into the next conv (issue 5:
// EfficientNet, MobileNetV3): Mul(x, s) with s [N, C, 1, 1] computed at run
// time, read only by a 1x1 stride-1 unpadded Conv, becomes that Conv's
// fused input scale (attrs.fused_input_scale, graph/operator.hpp). The conv
// scales each row of its GEMM's A while gathering it into cache, so the
// product x * s is never written to memory and read back: for EfficientNet-
// B0 that pair of passes over the expanded tensors was about 7% of the
// model's time.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Fuses where one Mul operand x is [N, C, H, W] and the other s is [N, C, 1,
// 1] or [1, C, 1, 1] (both computed by ops, not weights), the Mul's output
// is read only by input 0 of a Conv (not a graph output) whose weights are
// constant [OC, C, 1, 1], with stride 1, no padding, dilation 1, group 1 and
// no fused input scale yet. The Conv then reads x and gets s as its last
// input (a zero bias is added where it had none); the Mul is removed.
std::vector<RewrittenPattern> fuse_input_scales(Graph& graph);

}  // namespace tessera::graph
