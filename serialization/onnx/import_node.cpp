// The per-node dispatch (import_node) and the ops imported as one operator whose
// attributes come from the node (Reshape, Slice, Pad, Resize...); Identity and Dropout alias.
#include "serialization/onnx/importer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/operator.hpp"
#include "graph/shape.hpp"

namespace tessera::serialization::onnx_import {

void Importer::import_node(const onnx::NodeProto& node, const std::string& name) {
  const std::string& op = node.op_type();
  if (import_1d_as_2d(node, name)) return;
  if (op == "Identity") return alias(node, name);
  if (op == "Dropout") return import_dropout(node, name);
  if (op == "Constant") return import_constant(node, name);
  if (op == "Shape") return import_shape(node, name);
  if (op == "ConstantOfShape") return import_constant_of_shape(node, name);
  if (op == "Range") return import_range(node, name);
  if (op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" ||
      op == "GreaterOrEqual")
    return import_comparison(node, name);
  if (op == "And" || op == "Or" || op == "Xor" || op == "Not") return import_logic(node, name);
  if (op == "Size") return import_size(node, name);
  if (op == "Mod") return import_mod(node, name);
  if (op == "GatherElements") return import_gather_elements(node, name);
  if (op == "GatherND") return import_gather_nd(node, name);
  if (op == "Trilu") return import_trilu(node, name);
  if (op == "Attention") return import_attention(node, name);
  if (op == "Cast" || op == "CastLike") return import_cast(node, name);
  if (op == "Unsqueeze" || op == "Squeeze") return import_squeeze(node, name);
  if (op == "Split") return import_split(node, name);
  if (op == "Max" || op == "Min") return import_max_min(node, name);

  graph::Operator o;
  // Where reads its condition through a float 0/1 copy (emit_node).
  onnx::NodeProto where_node;
  const onnx::NodeProto* emit_node = &node;
  o.name = name;
  o.type = *graph::op_type_from_name(op);
  std::vector<int> data_inputs;  // ONNX input positions that become operator inputs
  switch (o.type) {
    case OpType::Conv:
    case OpType::ConvTranspose: {
      const bool transposed = o.type == OpType::ConvTranspose;
      const Shape x = shape_of(input(node, name, 0));
      const Shape w = shape_of(input(node, name, 1));
      if (x.size() != 4 || w.size() != 4)
        fail_node(node, name,
                  transposed ? "only 1-D and 2-D transposed convolution (3-D or 4-D X and W) "
                               "is supported"
                             : "only 1-D and 2-D convolution (3-D or 4-D X and W) is supported");
      o.attrs.kernel_shape = spatial_attr(node, name, "kernel_shape", {w[2], w[3]});
      if (o.attrs.kernel_shape[0] != w[2] || o.attrs.kernel_shape[1] != w[3])
        fail_node(node, name, "attribute 'kernel_shape' does not match the shape of W");
      o.attrs.strides = spatial_attr(node, name, "strides", {1, 1});
      o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
      o.attrs.group = attr_int(node, name, "group", 1);
      if (transposed) {
        const std::vector<int64_t> output_padding = attr_ints(node, name, "output_padding", {0, 0});
        if (output_padding.size() != 2)
          fail_node(node, name, "attribute 'output_padding' must have 2 values (2-D)");
        o.attrs.pads = resolve_transpose_pads(node, name, x, o.attrs, output_padding);
      } else {
        o.attrs.pads =
            resolve_pads(node, name, x, o.attrs.kernel_shape, o.attrs.strides, o.attrs.dilations);
      }
      data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      break;
    }
    case OpType::Gemm:
      o.attrs.alpha = attr_float(node, name, "alpha", 1.0f);
      o.attrs.beta = attr_float(node, name, "beta", 1.0f);
      o.attrs.trans_a = attr_int(node, name, "transA", 0) != 0;
      o.attrs.trans_b = attr_int(node, name, "transB", 0) != 0;
      data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      break;
    // Ops with no attributes to read: their data operands only.
    case OpType::MatMul:
    case OpType::Add:
    case OpType::Mul:
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
    case OpType::Max:  // import_max_min: two operands
    case OpType::Min:
      data_inputs = {0, 1};
      break;
    case OpType::Relu:
    case OpType::Sigmoid:
    case OpType::GlobalAveragePool:
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::HardSwish:
    case OpType::Neg:
    case OpType::Exp:
    case OpType::Log:
    case OpType::Reciprocal:
    case OpType::Abs:
    case OpType::Softplus:
    case OpType::IsNaN:
    case OpType::Sin:
    case OpType::Cos:
    case OpType::Floor:
    case OpType::Ceil:
    case OpType::Round:
    case OpType::Sign:
      data_inputs = {0};
      break;
    case OpType::Clip:
      if (has_input(node, 1)) o.attrs.clip_min = scalar_constant(node, name, 1, "min");
      if (has_input(node, 2)) o.attrs.clip_max = scalar_constant(node, name, 2, "max");
      data_inputs = {0};
      break;
    case OpType::MaxPool:
    case OpType::AveragePool: {
      const Shape x = shape_of(input(node, name, 0));
      if (x.size() != 4)
        fail_node(node, name, "only 1-D and 2-D pooling (3-D or 4-D input) is supported");
      if (o.type == OpType::MaxPool) {
        if (node.output_size() > 1 && !node.output(1).empty())
          fail_node(node, name, "the Indices output is not supported");
        const int64_t storage_order = attr_int(node, name, "storage_order", 0);
        if (storage_order != 0)
          fail_node(node, name,
                    "attribute storage_order = " + std::to_string(storage_order) +
                        " is not supported (only 0)");
        o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
      } else {
        o.attrs.count_include_pad = attr_int(node, name, "count_include_pad", 0) != 0;
        // AveragePool-19 added dilations; the reference kernel follows ONNX
        // Runtime's window clipping, which it implements without them.
        o.attrs.dilations = spatial_attr(node, name, "dilations", {1, 1});
        if (o.attrs.dilations != std::vector<int64_t>{1, 1})
          fail_node(node, name, "attribute 'dilations' other than 1 is not supported");
      }
      if (!find_attr(node, "kernel_shape"))
        fail_node(node, name, "attribute 'kernel_shape' is missing");
      o.attrs.kernel_shape = spatial_attr(node, name, "kernel_shape", {});
      o.attrs.strides = spatial_attr(node, name, "strides", {1, 1});
      o.attrs.ceil_mode = attr_int(node, name, "ceil_mode", 0) != 0;
      o.attrs.pads =
          resolve_pads(node, name, x, o.attrs.kernel_shape, o.attrs.strides, o.attrs.dilations);
      data_inputs = {0};
      break;
    }
    case OpType::Flatten: {
      const Shape x = shape_of(input(node, name, 0));
      const auto rank = static_cast<int64_t>(x.size());
      int64_t axis = attr_int(node, name, "axis", 1);
      // Flatten's axis may equal the rank (everything in the first dim).
      if (axis < -rank || axis > rank)
        fail_node(
            node, name,
            "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
      if (axis < 0) axis += rank;
      o.attrs.axis = axis;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= x[d];
      o.attrs.new_shape = {outer, inner};
      data_inputs = {0};
      break;
    }
    case OpType::Reshape:
      o.attrs.new_shape = resolve_reshape(node, name);
      data_inputs = {0};
      break;
    case OpType::Concat: {
      if (!find_attr(node, "axis")) fail_node(node, name, "attribute 'axis' is missing");
      const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
      o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", 0), rank);
      for (int i = 0; i < node.input_size(); ++i)
        if (has_input(node, i)) data_inputs.push_back(i);
      break;
    }
    case OpType::Softmax:
    case OpType::LogSoftmax: {
      const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
      // (Log)Softmax-1/11 flatten to 2-D at axis (default 1); -13 is per-axis (default -1).
      o.attrs.softmax_coerce_2d = opset_ < 13;
      const int64_t axis = attr_int(node, name, "axis", opset_ < 13 ? 1 : -1);
      o.attrs.axis = normalise_axis(node, name, axis, rank);
      data_inputs = {0};
      break;
    }
    case OpType::BatchNormalization: {
      const int64_t training_mode = attr_int(node, name, "training_mode", 0);
      if (training_mode != 0)
        fail_node(node, name, "attribute training_mode = 1 is not supported (inference only)");
      require_only_first_output(node, name,
                                "only the first output (Y) is supported: training-mode "
                                "statistics outputs are used");
      o.attrs.epsilon = attr_float(node, name, "epsilon", 1e-5f);
      data_inputs = {0, 1, 2, 3, 4};
      break;
    }
    case OpType::Transpose: {
      const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
      std::vector<int64_t> reversed;
      for (int64_t d = rank; d-- > 0;) reversed.push_back(d);
      o.attrs.perm = attr_ints(node, name, "perm", reversed);
      data_inputs = {0};
      break;
    }
    case OpType::Gather: {
      const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
      o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", 0), rank);
      const Value& indices = input(node, name, 1);
      if (indices.constant) {
        if (indices.constant->dtype != DType::Int64)
          fail_node(node, name, "the indices " + in_quotes(node.input(1)) + " must be integers");
        o.attrs.indices = indices.constant->ints;
        o.attrs.indices_shape = indices.constant->shape;
        data_inputs = {0};
      } else {
        data_inputs = {0, 1};  // an int64 model input (token ids)
      }
      break;
    }
    case OpType::Gelu: {
      const std::string approximate = attr_string(node, name, "approximate", "none");
      if (approximate != "none" && approximate != "tanh")
        fail_node(node, name,
                  "attribute approximate = " + in_quotes(approximate) +
                      " is not supported ('none' or 'tanh')");
      o.attrs.gelu_tanh = approximate == "tanh";
      data_inputs = {0};
      break;
    }
    case OpType::Where: {
      // The condition is read as float 0/1 (graph/operator.hpp).
      where_node = node;
      where_node.set_input(0, bool_operand(node, name, 0));
      emit_node = &where_node;
      data_inputs = {0, 1, 2};
      break;
    }
    case OpType::Expand: {
      const Shape x = shape_of(input(node, name, 0));
      const std::vector<int64_t> target = int_values(node, name, 1, "the shape");
      o.attrs.new_shape = broadcast_or_fail(node, name, x, target);
      data_inputs = {0};
      break;
    }
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSum:
    case OpType::ReduceLogSumExp: {
      const Shape x = shape_of(input(node, name, 0));
      const auto rank = static_cast<int64_t>(x.size());
      std::vector<int64_t> axes;
      // The axes became an optional input at ReduceSum-13 and the others' -18.
      const bool axes_input = opset_ >= (o.type == OpType::ReduceSum ? 13 : 18);
      if (axes_input) {
        if (has_input(node, 1)) axes = int_values(node, name, 1, "the axes");
      } else {
        axes = attr_ints(node, name, "axes", {});
      }
      o.attrs.keepdims = attr_int(node, name, "keepdims", 1) != 0;
      // noop_with_empty_axes: no axis is reduced, and the op still applies
      // to each element (ReduceSumSquare squares it, ReduceL1 takes |x|).
      const bool noop = axes_input && attr_int(node, name, "noop_with_empty_axes", 0) != 0;
      if (axes.empty() && !noop)
        for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
      for (int64_t& a : axes) a = normalise_axis(node, name, a, rank);
      std::sort(axes.begin(), axes.end());
      if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
        fail_node(node, name, "the axes list an axis twice");
      o.attrs.axes = axes;
      data_inputs = {0};
      // The spatial mean of an NCHW tensor (squeeze-and-excitation blocks,
      // as PyTorch exports x.mean((2, 3), keepdim=True)) is GlobalAveragePool,
      // which has a SIMD kernel and works on NHWC activations.
      if (o.type == OpType::ReduceMean && rank == 4 && axes == std::vector<int64_t>{2, 3} &&
          o.attrs.keepdims) {
        o.type = OpType::GlobalAveragePool;
        o.attrs = {};
      }
      break;
    }
    case OpType::LayerNormalization:
    case OpType::RMSNormalization: {
      const auto rank = static_cast<int64_t>(shape_of(input(node, name, 0)).size());
      o.attrs.axis = normalise_axis(node, name, attr_int(node, name, "axis", -1), rank);
      o.attrs.epsilon = attr_float(node, name, "epsilon", 1e-5f);
      require_only_first_output(node, name,
                                "only the first output (Y) is supported: the Mean or "
                                "InvStdDev output is used");
      data_inputs = has_input(node, 2) ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
      break;
    }
    case OpType::Slice:
      resolve_slice(node, name, o.attrs);
      data_inputs = {0};
      break;
    case OpType::LeakyRelu:
      o.attrs.alpha = attr_float(node, name, "alpha", 0.01f);
      data_inputs = {0};
      break;
    case OpType::HardSigmoid:
      o.attrs.alpha = attr_float(node, name, "alpha", 0.2f);
      o.attrs.beta = attr_float(node, name, "beta", 0.5f);
      data_inputs = {0};
      break;
    case OpType::Pad:
      resolve_pad(node, name, o.attrs);
      data_inputs = {0};
      break;
    case OpType::Resize:
      resolve_resize(node, name, o.attrs);
      data_inputs = {0};
      break;
    case OpType::FusedAttention:  // the compiler's, never a model's (no reviewed version)
      fail_node(node, name, "FusedAttention is made by the compiler, not imported");
    case OpType::CumSum: {
      if (attr_int(node, name, "exclusive", 0) != 0 || attr_int(node, name, "reverse", 0) != 0)
        fail_node(node, name, "exclusive and reverse sums are not supported");
      const std::vector<int64_t> axis = int_values(node, name, 1, "the axis");
      if (axis.size() != 1) fail_node(node, name, "the axis must be one value");
      o.attrs.axis = normalise_axis(node, name, axis[0],
                                    static_cast<int64_t>(shape_of(input(node, name, 0)).size()));
      data_inputs = {0};
      break;
    }
    case OpType::ToIndex:  // made by integers_as_float, never a model's
    case OpType::Cast:     // import_cast and import_comparison, before this switch
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
      fail_node(node, name, "has an import path of its own");
  }
  emit(*emit_node, name, std::move(o), data_inputs);
}

std::vector<int64_t> Importer::resolve_reshape(const onnx::NodeProto& node,
                                               const std::string& name) const {
  const Shape x = shape_of(input(node, name, 0));
  const Value& sv = input(node, name, 1);
  if (!sv.constant || sv.constant->dtype != DType::Int64)
    fail_node(node, name,
              "the shape input " + in_quotes(node.input(1)) +
                  " must be an int64 constant (an initializer or Constant node)");
  if (sv.constant->shape.size() != 1) fail_node(node, name, "the shape input must be 1-D");
  const bool allow_zero = attr_int(node, name, "allowzero", 0) != 0;
  std::vector<int64_t> shape = sv.constant->ints;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= x.size())
        fail_node(node, name,
                  "shape entry " + std::to_string(i) + " is 0 (copy) but the input has rank " +
                      std::to_string(x.size()));
      shape[i] = x[i];
    }
    if (shape[i] == -1) {
      if (infer_at >= 0) fail_node(node, name, "the shape has more than one -1");
      infer_at = static_cast<int>(i);
    } else if (shape[i] < 0) {
      fail_node(node, name, "the shape has the invalid entry " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  const int64_t total = graph::shape_numel(x);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      fail_node(node, name,
                "cannot reshape " + graph::shape_to_string(x) + " to " +
                    graph::shape_to_string(sv.constant->ints));
    shape[infer_at] = total / known;
  }
  if (graph::shape_numel(shape) != total)
    fail_node(node, name,
              "cannot reshape " + graph::shape_to_string(x) + " (" + std::to_string(total) +
                  " elements) to " + graph::shape_to_string(shape));
  return shape;
}

// Slice's constant starts/ends/axes/steps resolved with ONNX's clamping
// into one start, step and element count per input dim.
void Importer::resolve_slice(const onnx::NodeProto& node, const std::string& name,
                             graph::OpAttributes& a) const {
  const Shape x = shape_of(input(node, name, 0));
  const auto rank = static_cast<int64_t>(x.size());
  const std::vector<int64_t> starts = int_values(node, name, 1, "starts");
  const std::vector<int64_t> ends = int_values(node, name, 2, "ends");
  std::vector<int64_t> axes;
  if (has_input(node, 3)) {
    axes = int_values(node, name, 3, "axes");
  } else {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  const std::vector<int64_t> steps = has_input(node, 4) ? int_values(node, name, 4, "steps")
                                                        : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail_node(node, name, "starts, ends, axes and steps must have the same length");
  a.starts.assign(x.size(), 0);
  a.steps.assign(x.size(), 1);
  a.new_shape = x;
  std::vector<bool> seen(x.size(), false);
  for (size_t k = 0; k < starts.size(); ++k) {
    const auto d = static_cast<size_t>(normalise_axis(node, name, axes[k], rank));
    if (seen[d]) fail_node(node, name, "the axes list axis " + std::to_string(d) + " twice");
    seen[d] = true;
    const int64_t dim = x[d], step = steps[k];
    if (step == 0) fail_node(node, name, "a step is 0");
    int64_t start = starts[k] < 0 ? starts[k] + dim : starts[k];
    int64_t end = ends[k] < 0 ? ends[k] + dim : ends[k];
    int64_t count = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      if (end > start) count = (end - start - 1) / step + 1;
    } else {
      start = std::clamp<int64_t>(start, -1, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      const int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
      if (start > end) count = (start - end - 1) / magnitude + 1;
    }
    if (count == 0)
      fail_node(node, name,
                "selects no elements along axis " + std::to_string(d) +
                    "; Tessera does not support empty tensors");
    a.starts[d] = start;
    a.steps[d] = count == 1 ? 1 : step;  // one element: any step reads the same
    a.new_shape[d] = count;
  }
}

// Pad-11+: pads (and Pad-18 axes) as constant inputs, constant_value an
// optional scalar input; mode constant, reflect or edge.
void Importer::resolve_pad(const onnx::NodeProto& node, const std::string& name,
                           graph::OpAttributes& a) const {
  const Shape x = shape_of(input(node, name, 0));
  const auto rank = static_cast<int64_t>(x.size());
  const std::string mode = attr_string(node, name, "mode", "constant");
  if (mode == "constant")
    a.pad_mode = graph::PadMode::Constant;
  else if (mode == "reflect")
    a.pad_mode = graph::PadMode::Reflect;
  else if (mode == "edge")
    a.pad_mode = graph::PadMode::Edge;
  else
    fail_node(node, name,
              "mode " + in_quotes(mode) + " is not supported ('constant', 'reflect' or 'edge')");
  const std::vector<int64_t> pads = int_values(node, name, 1, "pads");
  std::vector<int64_t> axes;
  if (has_input(node, 3)) {
    axes = int_values(node, name, 3, "axes");
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size())
    fail_node(node, name,
              "pads has " + std::to_string(pads.size()) + " entries for " +
                  std::to_string(axes.size()) + " axes (needs 2 per axis)");
  a.pads.assign(2 * x.size(), 0);
  std::vector<bool> seen(x.size(), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto d = static_cast<size_t>(normalise_axis(node, name, axes[k], rank));
    if (seen[d]) fail_node(node, name, "the axes list axis " + std::to_string(d) + " twice");
    seen[d] = true;
    a.pads[d] = pads[k];
    a.pads[d + x.size()] = pads[k + axes.size()];
  }
  if (has_input(node, 2)) a.pad_value = scalar_constant(node, name, 2, "constant_value");
  for (size_t d = 0; d < x.size(); ++d)
    if (x[d] + a.pads[d] + a.pads[d + x.size()] < 1)
      fail_node(
          node, name,
          "pads leave dim " + std::to_string(d) + " empty; Tessera does not support empty tensors");
}

// Resize with constant scales or sizes: nearest (every nearest_mode) or
// linear, every coordinate_transformation_mode but tf_crop_and_resize.
void Importer::resolve_resize(const onnx::NodeProto& node, const std::string& name,
                              graph::OpAttributes& a) const {
  const Shape x = shape_of(input(node, name, 0));
  const auto rank = static_cast<int64_t>(x.size());
  const std::string mode = attr_string(node, name, "mode", "nearest");
  if (mode == "nearest")
    a.resize_mode = graph::ResizeMode::Nearest;
  else if (mode == "linear")
    a.resize_mode = graph::ResizeMode::Linear;
  else
    fail_node(node, name, "mode " + in_quotes(mode) + " is not supported ('nearest' or 'linear')");
  const std::string coordinates =
      attr_string(node, name, "coordinate_transformation_mode", "half_pixel");
  static const std::unordered_map<std::string, graph::CoordinateMode> kCoordinateModes = {
      {"half_pixel", graph::CoordinateMode::HalfPixel},
      {"half_pixel_symmetric", graph::CoordinateMode::HalfPixelSymmetric},
      {"pytorch_half_pixel", graph::CoordinateMode::PytorchHalfPixel},
      {"align_corners", graph::CoordinateMode::AlignCorners},
      {"asymmetric", graph::CoordinateMode::Asymmetric}};
  const auto cm = kCoordinateModes.find(coordinates);
  if (cm == kCoordinateModes.end())
    fail_node(node, name,
              "coordinate_transformation_mode " + in_quotes(coordinates) + " is not supported");
  a.coordinate_mode = cm->second;
  const std::string nearest = attr_string(node, name, "nearest_mode", "round_prefer_floor");
  static const std::unordered_map<std::string, graph::NearestMode> kNearestModes = {
      {"round_prefer_floor", graph::NearestMode::RoundPreferFloor},
      {"round_prefer_ceil", graph::NearestMode::RoundPreferCeil},
      {"floor", graph::NearestMode::Floor},
      {"ceil", graph::NearestMode::Ceil}};
  const auto nm = kNearestModes.find(nearest);
  if (nm == kNearestModes.end())
    fail_node(node, name, "nearest_mode " + in_quotes(nearest) + " is not supported");
  a.nearest_mode = nm->second;
  if (attr_int(node, name, "antialias", 0) != 0 && a.resize_mode != graph::ResizeMode::Nearest)
    fail_node(node, name, "attribute antialias = 1 is not supported");
  const std::string policy = attr_string(node, name, "keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch")
    fail_node(
        node, name,
        "keep_aspect_ratio_policy " + in_quotes(policy) + " is not supported (only 'stretch')");
  std::vector<int64_t> axes = attr_ints(node, name, "axes", {});
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  for (int64_t& d : axes) d = normalise_axis(node, name, d, rank);
  // Scales (input 2) or sizes (input 3), one per axis; an empty tensor
  // stands for an absent input.
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  if (has_input(node, 2)) {
    const Value& v = input(node, name, 2);
    if (!v.constant || v.constant->dtype != DType::Float32)
      fail_node(node, name,
                "the scales (input " + in_quotes(node.input(2)) +
                    ") must be a float32 constant (an initializer or Constant node)");
    scales = v.constant->floats;
  }
  if (has_input(node, 3)) sizes = int_values(node, name, 3, "the sizes");
  if (scales.empty() == sizes.empty())
    fail_node(node, name, "needs exactly one of scales and sizes");
  const size_t given = scales.empty() ? sizes.size() : scales.size();
  if (given != axes.size())
    fail_node(node, name,
              "has " + std::to_string(given) + " scales or sizes for " +
                  std::to_string(axes.size()) + " axes");
  a.new_shape = x;
  a.scales.assign(x.size(), 1.0f);
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto d = static_cast<size_t>(axes[k]);
    if (!scales.empty()) {
      if (!(scales[k] > 0.0f) || !std::isfinite(scales[k]))
        fail_node(node, name, "scales must be positive");
      a.scales[d] = scales[k];
      // ONNX Runtime's rule, in float: floor(scale * input).
      a.new_shape[d] = static_cast<int64_t>(scales[k] * static_cast<float>(x[d]));
    } else {
      a.new_shape[d] = sizes[k];
      if (sizes[k] > 0) a.scales[d] = static_cast<float>(sizes[k]) / static_cast<float>(x[d]);
    }
    if (a.new_shape[d] < 1)
      fail_node(node, name,
                "resizes dim " + std::to_string(d) +
                    " to nothing; Tessera does not support empty tensors");
  }
}

void Importer::alias(const onnx::NodeProto& node, const std::string& name) {
  values_[node.output(0)] = input(node, name, 0);
}

void Importer::import_dropout(const onnx::NodeProto& node, const std::string& name) {
  // Dropout-12+ takes training_mode as an optional input; inference needs it false.
  if (has_input(node, 2)) {
    const Value& mode = input(node, name, 2);
    const bool is_false = mode.constant && graph::shape_numel(mode.constant->shape) == 1 &&
                          (mode.constant->dtype == DType::Float32 ? mode.constant->floats[0] == 0
                                                                  : mode.constant->ints[0] == 0);
    if (!is_false) fail_node(node, name, "training_mode must be a constant false (inference only)");
  }
  require_only_first_output(node, name, "the mask output is not supported");
  alias(node, name);
}

}  // namespace tessera::serialization::onnx_import
