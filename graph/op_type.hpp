#pragma once
// The operators Tessera's tile graph knows. Values are stored in `.tess`
// files: append new ones at the end, never renumber.
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera::graph {

enum class OpType : uint16_t {
  Conv = 0,
  Gemm = 1,
  MatMul = 2,
  Relu = 3,
  Clip = 4,
  Sigmoid = 5,
  Add = 6,
  Mul = 7,
  MaxPool = 8,
  AveragePool = 9,
  GlobalAveragePool = 10,
  Flatten = 11,
  Reshape = 12,
  Concat = 13,
  Softmax = 14,
  BatchNormalization = 15,  // folded into the preceding Conv when possible
  Transpose = 16,
  Gather = 17,
  Sub = 18,
  Div = 19,
  Pow = 20,
  Sqrt = 21,
  Erf = 22,
  Tanh = 23,
  Where = 24,
  Expand = 25,
  ReduceMean = 26,
  LayerNormalization = 27,
  Slice = 28,
  Gelu = 29,
  LeakyRelu = 30,
  HardSigmoid = 31,
  HardSwish = 32,
  Neg = 33,
  Exp = 34,
  Log = 35,
  Reciprocal = 36,
  Abs = 37,
  Softplus = 38,
  Max = 39,
  Min = 40,
  Pad = 41,
  Resize = 42,
  // No ONNX op: made by graph/fuse_attention.hpp (the importer takes only
  // the ops it has reviewed, so no model can name it).
  FusedAttention = 43,
  // Reductions beside ReduceMean, with its attributes (axes, keepdims).
  ReduceSum = 44,
  ReduceMax = 45,
  ReduceMin = 46,
  ReduceProd = 47,
  ReduceSumSquare = 48,
  ReduceL1 = 49,
  ReduceL2 = 50,
  ReduceLogSum = 51,
  ReduceLogSumExp = 52,
  // Softmax's attributes (axis, coerce_2d); log of the softmax, no mask.
  LogSoftmax = 53,
  // LayerNormalization's attributes and inputs (X, Scale): x / RMS(x) · Scale.
  RMSNormalization = 54,
  // 2-D transposed convolution; Conv's spatial attributes (graph/operator.hpp).
  ConvTranspose = 55,
  // 1 where x is NaN, else 0 (Tessera's bools are float 0/1, as Where reads them).
  IsNaN = 56,
  // An int64 tensor (a model input such as an attention mask) as float32:
  // its value, or with cast_to_bool 1 where it is non-zero, else 0.
  Cast = 57,
  // Comparisons of two broadcasting float32 operands: 1 where the relation
  // holds, else 0 (false where either is NaN).
  Equal = 58,
  Less = 59,
  LessOrEqual = 60,
  Greater = 61,
  GreaterOrEqual = 62,
  // Elementwise math, one float32 input: Round is half to even, Sign -1/0/1
  // (NaN stays NaN).
  Sin = 63,
  Cos = 64,
  Floor = 65,
  Ceil = 66,
  Round = 67,
  Sign = 68,
  // Running sum along attrs.axis (inclusive, forward): RoBERTa's position
  // ids from its token ids.
  CumSum = 69,
  // Float32 holding integers to an int64 tensor (Gather indices computed at
  // run time); a value that is not an integer within ±2^24 fails the run.
  ToIndex = 70,
};

inline constexpr OpType kLastOpType = OpType::ToIndex;

// ReduceMean and the ops above: one input reduced over attrs.axes.
constexpr bool is_reduction(OpType t) {
  return t == OpType::ReduceMean ||
         (static_cast<uint16_t>(t) >= static_cast<uint16_t>(OpType::ReduceSum) &&
          static_cast<uint16_t>(t) <= static_cast<uint16_t>(OpType::ReduceLogSumExp));
}

// Equal .. GreaterOrEqual: two operands compared, a float 0/1 result.
constexpr bool is_comparison(OpType t) {
  return static_cast<uint16_t>(t) >= static_cast<uint16_t>(OpType::Equal) &&
         static_cast<uint16_t>(t) <= static_cast<uint16_t>(OpType::GreaterOrEqual);
}

constexpr std::string_view op_type_name(OpType t) {
  switch (t) {
    case OpType::Conv:
      return "Conv";
    case OpType::Gemm:
      return "Gemm";
    case OpType::MatMul:
      return "MatMul";
    case OpType::Relu:
      return "Relu";
    case OpType::Clip:
      return "Clip";
    case OpType::Sigmoid:
      return "Sigmoid";
    case OpType::Add:
      return "Add";
    case OpType::Mul:
      return "Mul";
    case OpType::MaxPool:
      return "MaxPool";
    case OpType::AveragePool:
      return "AveragePool";
    case OpType::GlobalAveragePool:
      return "GlobalAveragePool";
    case OpType::Flatten:
      return "Flatten";
    case OpType::Reshape:
      return "Reshape";
    case OpType::Concat:
      return "Concat";
    case OpType::Softmax:
      return "Softmax";
    case OpType::BatchNormalization:
      return "BatchNormalization";
    case OpType::Transpose:
      return "Transpose";
    case OpType::Gather:
      return "Gather";
    case OpType::Sub:
      return "Sub";
    case OpType::Div:
      return "Div";
    case OpType::Pow:
      return "Pow";
    case OpType::Sqrt:
      return "Sqrt";
    case OpType::Erf:
      return "Erf";
    case OpType::Tanh:
      return "Tanh";
    case OpType::Where:
      return "Where";
    case OpType::Expand:
      return "Expand";
    case OpType::ReduceMean:
      return "ReduceMean";
    case OpType::LayerNormalization:
      return "LayerNormalization";
    case OpType::Slice:
      return "Slice";
    case OpType::Gelu:
      return "Gelu";
    case OpType::LeakyRelu:
      return "LeakyRelu";
    case OpType::HardSigmoid:
      return "HardSigmoid";
    case OpType::HardSwish:
      return "HardSwish";
    case OpType::Neg:
      return "Neg";
    case OpType::Exp:
      return "Exp";
    case OpType::Log:
      return "Log";
    case OpType::Reciprocal:
      return "Reciprocal";
    case OpType::Abs:
      return "Abs";
    case OpType::Softplus:
      return "Softplus";
    case OpType::Max:
      return "Max";
    case OpType::Min:
      return "Min";
    case OpType::Pad:
      return "Pad";
    case OpType::Resize:
      return "Resize";
    case OpType::FusedAttention:
      return "FusedAttention";
    case OpType::ReduceSum:
      return "ReduceSum";
    case OpType::ReduceMax:
      return "ReduceMax";
    case OpType::ReduceMin:
      return "ReduceMin";
    case OpType::ReduceProd:
      return "ReduceProd";
    case OpType::ReduceSumSquare:
      return "ReduceSumSquare";
    case OpType::ReduceL1:
      return "ReduceL1";
    case OpType::ReduceL2:
      return "ReduceL2";
    case OpType::ReduceLogSum:
      return "ReduceLogSum";
    case OpType::ReduceLogSumExp:
      return "ReduceLogSumExp";
    case OpType::LogSoftmax:
      return "LogSoftmax";
    case OpType::RMSNormalization:
      return "RMSNormalization";
    case OpType::ConvTranspose:
      return "ConvTranspose";
    case OpType::IsNaN:
      return "IsNaN";
    case OpType::Cast:
      return "Cast";
    case OpType::Equal:
      return "Equal";
    case OpType::Less:
      return "Less";
    case OpType::LessOrEqual:
      return "LessOrEqual";
    case OpType::Greater:
      return "Greater";
    case OpType::GreaterOrEqual:
      return "GreaterOrEqual";
    case OpType::Sin:
      return "Sin";
    case OpType::Cos:
      return "Cos";
    case OpType::Floor:
      return "Floor";
    case OpType::Ceil:
      return "Ceil";
    case OpType::Round:
      return "Round";
    case OpType::Sign:
      return "Sign";
    case OpType::CumSum:
      return "CumSum";
    case OpType::ToIndex:
      return "ToIndex";
  }
  return "Unknown";
}

inline std::optional<OpType> op_type_from_name(std::string_view name) {
  for (uint16_t i = 0; i <= static_cast<uint16_t>(kLastOpType); ++i) {
    auto t = static_cast<OpType>(i);
    if (op_type_name(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace tessera::graph
