#pragma once
// The 1x1 expansion of an inverted residual block (MobileNetV2, EfficientNet)
// folded into the depthwise conv that reads it: Conv1x1(X) → activation →
// depthwise Conv becomes one depthwise Conv with attrs.fused_expand
// (graph/operator.hpp). Its kernel computes the expanded rows a tile needs
// into a per-thread band in L2 and runs the depthwise taps over it, so the
// expanded tensor, the largest in these networks (MobileNetV2's first block:
// 112×112×96, 4.8 MB), is never written to memory and read back. Depth-first
// tiles do not get this by themselves: each tile of the unfused pair still
// writes its rows to fresh arena lines (fetched for ownership, written back
// later) before the depthwise tile reads them.
#include <vector>

#include "graph/graph.hpp"
#include "graph/graph_uses.hpp"

namespace tessera::graph {

// Fuses where a Conv E with constant [C, Cin, 1, 1] weights, stride 1, no
// padding, dilation 1, group 1, no fused residual, input scale or expansion,
// an activation the conv epilogues run (none, ReLU, Clip, Sigmoid, SiLU) and
// weights at least half nonzero (sparser ones keep their sparse kernel), is
// read only by input 0 of a depthwise Conv D (group == C == OC, constant
// weights, no input scale or expansion yet), and E's output is not a graph
// output. D then reads E's input, gets E's weight and bias (a zero bias
// where E had none) as its last two inputs and E's activation as
// expand_activation; E is removed. Float32 rank-4 tensors only, and only
// where E's output is at least 1 MiB per image (smaller ones stay in L2
// between the two convs unfused) and neither E's input, D's output nor D's
// fused residual is a model input or output (those stay NCHW; the fused
// kernel is NHWC only).
std::vector<RewrittenPattern> fuse_expand_depthwise(Graph& graph);

}  // namespace tessera::graph
