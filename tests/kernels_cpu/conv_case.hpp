#pragma once
// A convolution for the conv kernels' tests (the dense CPU convs,
// cpu.conv_sparse, cpu.conv_int8):
// its shape, kernel, strides, dilations, pads, fused bias / residual /
// activation and each operand's layout, made into an operator with its
// input shapes.
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "graph/layout.hpp"
#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::test {

struct ConvSpec {
  int64_t batch = 1, channels = 1, out_channels = 1, in_h = 1, in_w = 1;
  int64_t k_h = 1, k_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t group = 1;
  bool one_d = false, bias = true;
  graph::Activation activation = graph::Activation::None;
  bool residual = false;      // fused residual (forces a bias: inputs X, W, B, R)
  double density = 0.1;       // of the weight's nonzeros (the sparse kernels' tests)
  double empty_channels = 0;  // fraction of output channels with no nonzero
  graph::Layout x_layout = graph::Layout::NCHW, y_layout = graph::Layout::NCHW,
                r_layout = graph::Layout::NCHW;
};

inline std::string describe(const ConvSpec& s) {
  std::ostringstream o;
  o << "N" << s.batch << " C" << s.channels << " OC" << s.out_channels << " in " << s.in_h << "x"
    << s.in_w << " k " << s.k_h << "x" << s.k_w << " s " << s.stride_h << "," << s.stride_w << " d "
    << s.dilation_h << "," << s.dilation_w << " pads " << s.pad_top << "," << s.pad_left << ","
    << s.pad_bottom << "," << s.pad_right << (s.one_d ? " 1-D" : "") << " bias " << s.bias
    << " residual " << s.residual << " act " << static_cast<int>(s.activation) << " density "
    << s.density << " empty " << s.empty_channels << " layouts X " << graph::layout_name(s.x_layout)
    << " Y " << graph::layout_name(s.y_layout) << " R " << graph::layout_name(s.r_layout);
  return o.str();
}

// A 3x3 conv with pad 1 (Table II's commonest form), stride `stride`.
inline ConvSpec padded_3x3(int64_t channels, int64_t out_channels, int64_t in_h, int64_t in_w,
                           int64_t stride = 1) {
  return {.channels = channels,
          .out_channels = out_channels,
          .in_h = in_h,
          .in_w = in_w,
          .k_h = 3,
          .k_w = 3,
          .stride_h = stride,
          .stride_w = stride,
          .pad_top = 1,
          .pad_left = 1,
          .pad_bottom = 1,
          .pad_right = 1};
}

struct ConvCase {
  graph::Operator op;
  std::vector<graph::Shape> shapes;  // X, W, [B], [R]
  graph::Shape output;
  std::vector<graph::Layout> layouts;
  int64_t depth = 1;
};

inline std::optional<ConvCase> make_case(const ConvSpec& s) {
  const int64_t span_h = s.in_h + s.pad_top + s.pad_bottom - s.dilation_h * (s.k_h - 1) - 1;
  const int64_t span_w = s.in_w + s.pad_left + s.pad_right - s.dilation_w * (s.k_w - 1) - 1;
  if (span_h < 0 || span_w < 0) return std::nullopt;
  ConvCase c;
  c.op.name = "conv";
  c.op.type = graph::OpType::Conv;
  graph::OpAttributes& a = c.op.attrs;
  a.group = s.group;
  a.activation = s.activation;
  a.clip_min = -0.25f;
  a.clip_max = 0.5f;
  a.leaky_relu_alpha = 0.1f;
  const int64_t oh = span_h / s.stride_h + 1, ow = span_w / s.stride_w + 1;
  const int64_t group_channels = s.channels / s.group;
  if (s.one_d) {
    a.kernel_shape = {s.k_w};
    a.strides = {s.stride_w};
    a.dilations = {s.dilation_w};
    a.pads = {s.pad_left, s.pad_right};
    c.shapes = {{s.batch, s.channels, s.in_w}, {s.out_channels, group_channels, s.k_w}};
    c.output = {s.batch, s.out_channels, ow};
  } else {
    a.kernel_shape = {s.k_h, s.k_w};
    a.strides = {s.stride_h, s.stride_w};
    a.dilations = {s.dilation_h, s.dilation_w};
    a.pads = {s.pad_top, s.pad_left, s.pad_bottom, s.pad_right};
    c.shapes = {{s.batch, s.channels, s.in_h, s.in_w},
                {s.out_channels, group_channels, s.k_h, s.k_w}};
    c.output = {s.batch, s.out_channels, oh, ow};
  }
  c.layouts = {s.one_d ? graph::Layout::NCHW : s.x_layout, graph::Layout::NCHW};
  if (s.bias || s.residual) {
    c.shapes.push_back({s.out_channels});
    c.layouts.push_back(graph::Layout::NCHW);
  }
  if (s.residual) {
    a.fused_residual = true;
    c.shapes.push_back(c.output);
    c.layouts.push_back(s.one_d ? graph::Layout::NCHW : s.r_layout);
  }
  c.depth = group_channels * s.k_h * s.k_w;
  return c;
}

}  // namespace tessera::test
