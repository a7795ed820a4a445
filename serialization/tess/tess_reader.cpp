#include "serialization/tess/tess_reader.hpp"

#include <cctype>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "graph/dependency.hpp"
#include "graph/error.hpp"
#include "graph/op_shape.hpp"
#include "serialization/tess/tess_format.hpp"
#include "serialization/tess/tess_generated.h"

namespace tessera::serialization {
namespace {

namespace fb = tessera::tess;
using graph::Region;
using graph::Shape;

static_assert(std::endian::native == std::endian::little,
              "weight buffers are stored little-endian and used in place");

// Verifier limits. Real models nest four levels deep (model, vector, table,
// vector); the table budget bounds the work a file whose offsets all point at
// the same tables could cause: a table takes at least 4 bytes, so an honest
// file never has more than size / 4 of them.
constexpr flatbuffers::uoffset_t kVerifierMaxDepth = 16;
constexpr size_t kVerifierTableSlack = 1024;
// Tiles of one op are checked pairwise for overlap up to this many; beyond it
// only the element count is compared (quadratic work on a hostile file).
constexpr size_t kMaxTilesForOverlapCheck = 1024;
// Generous for any real network; bounds the work per tensor shape.
constexpr size_t kMaxTensorRank = 32;

// Names come from the file: keep error messages on one line and short.
std::string printable(std::string_view s) {
  constexpr size_t kMaxLength = 64;
  std::string out;
  for (char c : s.substr(0, kMaxLength)) {
    auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (s.size() > kMaxLength) out += "...";
  return out;
}

// Owns what the weight spans point into: the file image, plus copies of any
// weight that was not aligned for in-place use.
struct TessStorage {
  std::shared_ptr<const void> image;
  std::vector<std::vector<float>> weight_copies;
};

// Input-count bounds per op type; graph::infer_output_shape checks the same,
// but the reader states them so that it never hands a kernel an op whose
// operand list it would index past.
struct InputBounds {
  size_t min;
  size_t max;
};

InputBounds input_bounds(graph::OpType type) {
  using graph::OpType;
  switch (type) {
    case OpType::Conv:
      return {2, 6};  // X, W, B; a fused residual is input 3, then an input scale or an expansion
    case OpType::Gemm:
      return {2, 4};  // A, B, C; a fused residual is input 3
    case OpType::MatMul:
      return {2, 4};  // A, B; a fused bias is input 2, a fused residual input 3
    case OpType::Add:
    case OpType::Mul:
    case OpType::Sub:
    case OpType::Div:
    case OpType::Pow:
      return {2, 2};
    case OpType::Transpose:
    case OpType::Sqrt:
    case OpType::Erf:
    case OpType::Tanh:
    case OpType::Gelu:
    case OpType::Expand:
    case OpType::ReduceMean:
    case OpType::ReduceSum:
    case OpType::ReduceMax:
    case OpType::ReduceMin:
    case OpType::ReduceProd:
    case OpType::ReduceSumSquare:
    case OpType::ReduceL1:
    case OpType::ReduceL2:
    case OpType::ReduceLogSum:
    case OpType::ReduceLogSumExp:
    case OpType::Slice:
    case OpType::LeakyRelu:
    case OpType::HardSigmoid:
    case OpType::HardSwish:
    case OpType::Neg:
    case OpType::Exp:
    case OpType::Log:
    case OpType::Reciprocal:
    case OpType::Abs:
    case OpType::Softplus:
    case OpType::Sin:
    case OpType::Cos:
    case OpType::Floor:
    case OpType::Ceil:
    case OpType::Round:
    case OpType::Sign:
    case OpType::IsNaN:
    case OpType::Cast:
    case OpType::ToIndex:
    case OpType::CumSum:
    case OpType::Pad:
    case OpType::Resize:
      return {1, 1};
    case OpType::Equal:
    case OpType::Less:
    case OpType::LessOrEqual:
    case OpType::Greater:
    case OpType::GreaterOrEqual:
    case OpType::Max:
    case OpType::Min:
      return {2, 2};
    case OpType::Gather:
      return {1, 2};
    case OpType::Where:
      return {3, 3};
    case OpType::FusedAttention:
      return {3, 4};  // Q, KT, V and an optional mask
    case OpType::LayerNormalization:
      return {2, 3};
    case OpType::RMSNormalization:
      return {2, 2};
    case OpType::ConvTranspose:
      return {2, 3};
    case OpType::Relu:
    case OpType::Clip:
    case OpType::Sigmoid:
    case OpType::MaxPool:
    case OpType::AveragePool:
    case OpType::GlobalAveragePool:
    case OpType::Flatten:
    case OpType::Reshape:
      return {1, 1};
    case OpType::Softmax:  // X and a fused mask (graph/fuse_softmax_input.hpp)
      return {1, 2};
    case OpType::LogSoftmax:
      return {1, 1};
    case OpType::Concat:
      return {1, std::numeric_limits<size_t>::max()};
    case OpType::BatchNormalization:
      return {5, 5};
  }
  return {0, 0};
}

class TessLoader {
 public:
  TessLoader(const fb::Model& model, size_t file_size, const std::string& origin)
      : model_(model), origin_(origin), copy_budget_(file_size) {}

  graph::TileGraph load(std::shared_ptr<const void> image) {
    check_version();
    auto storage = std::make_shared<TessStorage>();
    storage->image = std::move(image);
    read_tensors(*storage);
    read_model_io();
    read_operators();
    read_nodes();
    check_tiles_cover_outputs();
    check_edges_cover_dependencies();
    graph_.options.tiles = model_.options() ? model_.options()->tiles() : 0;
    graph_.options.threads = model_.options() ? model_.options()->threads() : 0;
    graph_.options.target = model_.options() ? string_of(model_.options()->target()) : "";
    if (storage->weight_copies.empty())
      graph_.storage = storage->image;
    else
      graph_.storage = std::move(storage);
    return std::move(graph_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(origin_ + ": " + what); }

  // FlatBuffers lets many tables point at one vector or string; a hostile file
  // could so make the loader copy far more than the file holds (quadratic time
  // and memory). Tessera's writer never shares, and every element it writes
  // takes at least one byte of the file, so copies are capped at the file size.
  void charge_copy(size_t elements) {
    if (elements > copy_budget_)
      fail("file is corrupt (its tables share more data than a Tessera writer produces)");
    copy_budget_ -= elements;
  }
  std::string string_of(const flatbuffers::String* s) {
    if (!s) return {};
    charge_copy(s->size());
    return s->str();
  }
  // Copies bytewise: the verifier of FlatBuffers 2.0 only checks a vector's
  // length prefix for 4-byte alignment, so the int64 elements of a corrupt
  // file's [long] vector may be misaligned and must not be loaded in place.
  template <typename T>
  std::vector<T> vector_of(const flatbuffers::Vector<T>* v) {
    static_assert(std::is_arithmetic_v<T>);
    if (!v || v->size() == 0) return {};
    charge_copy(v->size());
    std::vector<T> out(v->size());
    std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
    return out;
  }

  std::string tensor_label(size_t t) const {
    return "tensor " + std::to_string(t) + " ('" + printable(graph_.tensors[t].name) + "')";
  }
  std::string op_label(size_t o) const {
    const graph::Operator& op = graph_.ops[o];
    return "op " + std::to_string(o) + " ('" + printable(op.name) + "', " +
           std::string(graph::op_type_name(op.type)) + ")";
  }
  // A tensor index from the file, checked against the tensor count.
  int32_t tensor_index(int32_t index, const std::string& where) const {
    if (index < 0 || static_cast<size_t>(index) >= graph_.tensors.size())
      fail(where + " is tensor " + std::to_string(index) + " but the graph has " +
           std::to_string(graph_.tensors.size()) + " tensors");
    return index;
  }

  void check_version() const {
    const fb::SchemaVersion* v = model_.version();
    if (!v) fail("file has no schema version (not written by Tessera, or corrupt)");
    std::string version =
        std::to_string(v->major_version()) + "." + std::to_string(v->minor_version());
    std::string ours = std::to_string(kTessSchemaMajor) + ".x";
    // Within one major version, newer minor versions only add fields this
    // reader may ignore (tess.fbs's rules).
    if (v->major_version() > kTessSchemaMajor)
      fail("schema version " + version + " is newer than this Tessera (" + ours +
           "); update Tessera or recompile the model");
    if (v->major_version() < kTessSchemaMajor)
      fail("schema version " + version + " is older than this Tessera reads (" + ours +
           "); recompile the model");
  }

  void read_tensors(TessStorage& storage) {
    const auto* tensors = model_.tensors();
    const auto* buffers = model_.buffers();
    size_t buffer_count = buffers ? buffers->size() : 0;
    graph_.arena_bytes = model_.arena_bytes();
    size_t count = tensors ? tensors->size() : 0;
    graph_.tensors.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const fb::Tensor* ft = tensors->Get(static_cast<flatbuffers::uoffset_t>(i));
      graph::CompiledTensor& t = graph_.tensors[i];
      t.name = string_of(ft->name());
      t.shape = vector_of(ft->shape());
      if (t.shape.size() > kMaxTensorRank)
        fail(tensor_label(i) + " has rank " + std::to_string(t.shape.size()) +
             "; Tessera supports up to " + std::to_string(kMaxTensorRank));
      // The product of the non-zero dimensions is capped, not just the
      // numel: then no prefix product that graph::shape_numel or a kernel
      // forms (e.g. [2^40, 2^40, 0]) can overflow either.
      int64_t nonzero_product = 1;
      for (int64_t d : t.shape) {
        if (d < 0)
          fail(tensor_label(i) + " has negative dimension " + std::to_string(d) + " in shape " +
               graph::shape_to_string(t.shape));
        if (d != 0 && nonzero_product > kTessMaxTensorElements / d)
          fail(tensor_label(i) + " has shape " + graph::shape_to_string(t.shape) +
               ", more than 2^40 elements");
        if (d != 0) nonzero_product *= d;
      }
      int64_t numel = graph::shape_numel(t.shape);
      auto dtype = static_cast<uint8_t>(ft->dtype());
      if (dtype > static_cast<uint8_t>(graph::DType::Bool))
        fail(tensor_label(i) + " has unknown dtype " + std::to_string(dtype));
      t.dtype = static_cast<graph::DType>(dtype);
      const auto layout = static_cast<uint8_t>(ft->layout());
      if (layout > static_cast<uint8_t>(graph::kLastLayout))
        fail(tensor_label(i) + " has unknown layout " + std::to_string(layout));
      t.layout = static_cast<graph::Layout>(layout);
      // Kernels index NHWC through rank-4 strides and never see weights in it.
      if (t.layout == graph::Layout::NHWC &&
          (t.shape.size() != 4 || ft->storage() != fb::TensorStorage::Arena))
        fail(tensor_label(i) + " is NHWC but only rank-4 arena tensors may be (shape " +
             graph::shape_to_string(t.shape) + ")");
      auto byte_size = static_cast<uint64_t>(t.byte_size());
      switch (ft->storage()) {
        case fb::TensorStorage::Arena: {
          t.storage = graph::TensorStorage::Arena;
          t.arena_offset = ft->arena_offset();
          if (ft->buffer() != 0)
            fail(tensor_label(i) + " lives in the arena but refers to weight buffer " +
                 std::to_string(ft->buffer()));
          if (t.arena_offset % kTessArenaAlignment != 0)
            fail(tensor_label(i) + " has arena offset " + std::to_string(t.arena_offset) +
                 ", which is not aligned to " + std::to_string(kTessArenaAlignment) + " bytes");
          if (t.arena_offset > graph_.arena_bytes ||
              byte_size > graph_.arena_bytes - t.arena_offset)
            fail(tensor_label(i) + " at arena offset " + std::to_string(t.arena_offset) + " with " +
                 std::to_string(byte_size) + " bytes overflows the arena of " +
                 std::to_string(graph_.arena_bytes) + " bytes");
          break;
        }
        case fb::TensorStorage::Weight: {
          t.storage = graph::TensorStorage::Weight;
          uint32_t b = ft->buffer();
          if (b == 0 || b >= buffer_count)
            fail(tensor_label(i) + " is a weight but refers to buffer " + std::to_string(b) +
                 " and the file has buffers 1 to " + std::to_string(buffer_count) + " (exclusive)");
          // Weight spans are float; other dtypes need encodings this version lacks.
          if (t.dtype != graph::DType::Float32)
            fail(tensor_label(i) + " is a weight of dtype " +
                 std::string(graph::dtype_name(t.dtype)) + "; only float32 weights are supported");
          const auto* data = buffers->Get(b)->data();
          size_t data_bytes = data ? data->size() : 0;
          if (data_bytes != byte_size)
            fail(tensor_label(i) + " has " + std::to_string(data_bytes) +
                 " bytes of weight data but its shape " + graph::shape_to_string(t.shape) +
                 " needs " + std::to_string(byte_size));
          t.weight =
              weight_span(data ? data->data() : nullptr, static_cast<size_t>(numel), storage);
          break;
        }
        default:
          fail(tensor_label(i) + " has unknown storage kind " +
               std::to_string(static_cast<int>(ft->storage())));
      }
    }
    // The arena is allocated per request: a size beyond what its tensors
    // occupy would let a corrupt file ask for any amount of memory.
    uint64_t arena_end = 0;
    for (const auto& t : graph_.tensors)
      if (t.storage == graph::TensorStorage::Arena) {
        const auto bytes = static_cast<uint64_t>(t.byte_size());
        const uint64_t aligned =
            (bytes + kTessArenaAlignment - 1) / kTessArenaAlignment * kTessArenaAlignment;
        arena_end = std::max(arena_end, t.arena_offset + aligned);
      }
    if (graph_.arena_bytes > arena_end)
      fail("arena size " + std::to_string(graph_.arena_bytes) + " bytes exceeds the " +
           std::to_string(arena_end) + " bytes its tensors occupy");
  }

  // In place when aligned for float (always for files from serialize_tess:
  // force_align puts weight data on 64-byte boundaries), else a copy.
  static std::span<const float> weight_span(const uint8_t* bytes, size_t count,
                                            TessStorage& storage) {
    if (count == 0) return {};
    if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0)
      return {reinterpret_cast<const float*>(bytes), count};
    std::vector<float>& copy = storage.weight_copies.emplace_back(count);
    std::memcpy(copy.data(), bytes, count * sizeof(float));
    return copy;
  }

  void read_operators() {
    const auto* ops = model_.operators();
    size_t count = ops ? ops->size() : 0;
    graph_.ops.resize(count);
    // Which op writes each tensor (-1: none), to check the op order and that
    // no tensor has two writers.
    std::vector<int64_t> writer(graph_.tensors.size(), -1);
    std::vector<char> is_model_input(graph_.tensors.size(), 0);
    for (int32_t t : graph_.inputs) is_model_input[t] = 1;  // indices checked already

    for (size_t o = 0; o < count; ++o) {
      const fb::Operator* fo = ops->Get(static_cast<flatbuffers::uoffset_t>(o));
      graph::Operator& op = graph_.ops[o];
      op.name = string_of(fo->name());
      if (fo->type() > static_cast<uint16_t>(graph::kLastOpType))
        fail("op " + std::to_string(o) + " ('" + printable(op.name) + "') has unknown op type " +
             std::to_string(fo->type()) + "; this Tessera knows types 0 to " +
             std::to_string(static_cast<int>(graph::kLastOpType)));
      op.type = static_cast<graph::OpType>(fo->type());
      if (fo->version() < 1 || fo->version() > kTessMaxOpVersion)
        fail(op_label(o) + " has op version " + std::to_string(fo->version()) +
             "; this Tessera handles versions 1 to " + std::to_string(kTessMaxOpVersion));
      op.kernel = string_of(fo->kernel());
      if (op.kernel.empty()) fail(op_label(o) + " has no kernel name");
      // Kernel names are identifiers; anything else is corruption (and would
      // otherwise end up raw in error messages).
      for (char c : op.kernel)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
          fail(op_label(o) + " has a malformed kernel name '" + printable(op.kernel) + "'");
      read_attributes(fo->attributes(), op.attrs);
      if (fo->version() != tess_op_version(op))
        fail(op_label(o) + " has op version " + std::to_string(fo->version()) +
             " but its attributes are those of version " + std::to_string(tess_op_version(op)));
      op.inputs = vector_of(fo->inputs());
      op.outputs = vector_of(fo->outputs());

      InputBounds bounds = input_bounds(op.type);
      if (op.inputs.size() < bounds.min || op.inputs.size() > bounds.max)
        fail(op_label(o) + " has " + std::to_string(op.inputs.size()) + " inputs; a " +
             std::string(graph::op_type_name(op.type)) + " takes " + std::to_string(bounds.min) +
             (bounds.max == bounds.min ? std::string()
              : bounds.max == SIZE_MAX ? " or more"
                                       : " to " + std::to_string(bounds.max)));
      if (op.outputs.size() != 1)
        fail(op_label(o) + " has " + std::to_string(op.outputs.size()) +
             " outputs; every op has exactly 1");

      std::vector<Shape> input_shapes;
      std::vector<graph::DType> input_dtypes;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        int32_t t = tensor_index(op.inputs[k], op_label(o) + " input " + std::to_string(k));
        if (graph_.tensors[t].storage == graph::TensorStorage::Arena && writer[t] < 0 &&
            !is_model_input[t])
          fail(op_label(o) + " reads " + tensor_label(t) +
               ", which no earlier op writes and which is not a model input "
               "(ops out of topological order, or a dangling tensor)");
        input_shapes.push_back(graph_.tensors[t].shape);
        input_dtypes.push_back(graph_.tensors[t].dtype);
      }
      int32_t out = tensor_index(op.outputs[0], op_label(o) + " output 0");
      if (graph_.tensors[out].storage != graph::TensorStorage::Arena)
        fail(op_label(o) + " writes weight " + tensor_label(out) +
             "; weights may only be op inputs");
      if (writer[out] >= 0)
        fail(op_label(o) + " writes " + tensor_label(out) + ", which op " +
             std::to_string(writer[out]) + " already writes");
      if (is_model_input[out])
        fail(op_label(o) + " writes " + tensor_label(out) + ", which is a model input");
      writer[out] = static_cast<int64_t>(o);

      Shape expected;
      try {
        // Element types first: a kernel reading an operand of the wrong
        // element size would read past it.
        graph::check_operand_dtypes(op, input_dtypes, graph_.tensors[out].dtype);
        expected = graph::infer_output_shape(op, input_shapes);
      } catch (const Error& e) {
        fail("op " + std::to_string(o) + ": " + printable_line(e.what()));
      }
      if (expected != graph_.tensors[out].shape)
        fail(op_label(o) + " computes shape " + graph::shape_to_string(expected) +
             " from its inputs but its output " + tensor_label(out) + " has shape " +
             graph::shape_to_string(graph_.tensors[out].shape));
    }
    for (size_t k = 0; k < graph_.outputs.size(); ++k) {
      int32_t t = graph_.outputs[k];
      if (writer[t] < 0 && !is_model_input[t])
        fail("model output " + std::to_string(k) + " is " + tensor_label(t) +
             ", which no op writes");
    }
  }

  // Messages of graph::infer_output_shape quote op names from the file.
  static std::string printable_line(std::string_view s) {
    std::string out(s);
    for (char& c : out)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return out;
  }

  void read_attributes(const fb::OpAttributes* fa, graph::OpAttributes& a) {
    if (!fa) return;  // all defaults
    a.kernel_shape = vector_of(fa->kernel_shape());
    a.strides = vector_of(fa->strides());
    a.pads = vector_of(fa->pads());
    a.dilations = vector_of(fa->dilations());
    a.group = fa->group();
    a.axis = fa->axis();
    a.alpha = fa->alpha();
    a.beta = fa->beta();
    a.trans_a = fa->trans_a();
    a.trans_b = fa->trans_b();
    a.clip_min = fa->clip_min();
    a.clip_max = fa->clip_max();
    a.count_include_pad = fa->count_include_pad();
    a.ceil_mode = fa->ceil_mode();
    a.softmax_coerce_2d = fa->softmax_coerce_2d();
    a.epsilon = fa->epsilon();
    a.new_shape = vector_of(fa->new_shape());
    if (fa->activation() > static_cast<uint8_t>(graph::kLastActivation))
      fail("unknown fused activation " + std::to_string(fa->activation()));
    a.activation = static_cast<graph::Activation>(fa->activation());
    a.perm = vector_of(fa->perm());
    a.indices = vector_of(fa->indices());
    a.indices_shape = vector_of(fa->indices_shape());
    a.starts = vector_of(fa->starts());
    a.steps = vector_of(fa->steps());
    a.axes = vector_of(fa->axes());
    a.keepdims = fa->keepdims();
    a.gelu_tanh = fa->gelu_tanh();
    a.fused_residual = fa->fused_residual();
    a.fused_input_scale = fa->fused_input_scale();
    a.fused_expand = fa->fused_expand();
    if (fa->expand_activation() > static_cast<uint8_t>(graph::kLastActivation))
      fail("unknown fused expansion activation " + std::to_string(fa->expand_activation()));
    a.expand_activation = static_cast<graph::Activation>(fa->expand_activation());
    a.expand_clip_min = fa->expand_clip_min();
    a.expand_clip_max = fa->expand_clip_max();
    a.leaky_relu_alpha = fa->leaky_relu_alpha();
    a.cast_to_bool = fa->cast_to_bool();
    a.nan_probabilities_to_zero = fa->nan_probabilities_to_zero();
    // Enum values past the last known one are caught by graph::infer_output_shape.
    a.pad_mode = static_cast<graph::PadMode>(fa->pad_mode());
    a.pad_value = fa->pad_value();
    a.resize_mode = static_cast<graph::ResizeMode>(fa->resize_mode());
    a.coordinate_mode = static_cast<graph::CoordinateMode>(fa->coordinate_mode());
    a.nearest_mode = static_cast<graph::NearestMode>(fa->nearest_mode());
    if (fa->scales()) a.scales.assign(fa->scales()->begin(), fa->scales()->end());
    a.weight_bits = fa->weight_bits();
    if (a.weight_bits < 1 || a.weight_bits > 32)
      fail("weight_bits " + std::to_string(a.weight_bits) + " is not in [1, 32]");
  }

  void read_model_io() {
    auto read = [&](const flatbuffers::Vector<int32_t>* list, const char* what) {
      std::vector<int32_t> out = vector_of(list);
      for (size_t k = 0; k < out.size(); ++k) {
        int32_t t = tensor_index(out[k], std::string("model ") + what + " " + std::to_string(k));
        if (graph_.tensors[t].storage != graph::TensorStorage::Arena)
          fail(std::string("model ") + what + " " + std::to_string(k) + " is weight " +
               tensor_label(t) + "; model inputs and outputs live in the arena");
        // The runtime copies inputs and outputs by these element types.
        const graph::DType dtype = graph_.tensors[t].dtype;
        const bool input = std::string_view(what) == "input";
        if (dtype != graph::DType::Float32 && !(input && dtype == graph::DType::Int64))
          fail(std::string("model ") + what + " " + std::to_string(k) + " " + tensor_label(t) +
               " is " + std::string(graph::dtype_name(dtype)) + "; model " + what +
               "s must be float32" + (input ? " or int64" : ""));
        // Callers hand in and take out ONNX-ordered data.
        if (graph_.tensors[t].layout != graph::Layout::NCHW)
          fail(std::string("model ") + what + " " + std::to_string(k) + " is " + tensor_label(t) +
               ", which is stored NHWC; model inputs and outputs must be NCHW");
      }
      return out;
    };
    graph_.inputs = read(model_.inputs(), "input");
    graph_.outputs = read(model_.outputs(), "output");
  }

  std::string node_label(size_t n) const { return "node " + std::to_string(n); }

  void read_nodes() {
    const auto* nodes = model_.nodes();
    size_t count = nodes ? nodes->size() : 0;
    graph_.nodes.resize(count);
    std::vector<int32_t> incoming(count, 0);
    std::vector<int32_t> expected_depth(count, 0);
    std::vector<size_t> seen_from(count, SIZE_MAX);  // duplicate-child detection
    for (size_t n = 0; n < count; ++n) {
      const fb::TileNode* fn = nodes->Get(static_cast<flatbuffers::uoffset_t>(n));
      graph::TileNode& node = graph_.nodes[n];
      node.op = fn->op();
      if (node.op < 0 || static_cast<size_t>(node.op) >= graph_.ops.size())
        fail(node_label(n) + " refers to op " + std::to_string(node.op) + " but the graph has " +
             std::to_string(graph_.ops.size()) + " ops");
      if (fn->device() != 0)
        fail(node_label(n) + " is placed on device " + std::to_string(fn->device()) +
             "; this Tessera knows only device 0 (CPU)");
      node.region.begin = vector_of(fn->region_begin());
      node.region.end = vector_of(fn->region_end());
      const graph::CompiledTensor& out = graph_.tensors[graph_.ops[node.op].outputs[0]];
      if (node.region.begin.size() != out.shape.size() ||
          node.region.end.size() != out.shape.size())
        fail(node_label(n) + " of " + op_label(node.op) + " has a region of rank " +
             std::to_string(node.region.begin.size()) + "/" +
             std::to_string(node.region.end.size()) + " but its output tensor has rank " +
             std::to_string(out.shape.size()));
      if (!graph::region_inside(node.region, out.shape))
        fail(node_label(n) + " of " + op_label(node.op) + " has region " +
             graph::region_to_string(node.region) + " outside its output tensor '" +
             printable(out.name) + "' of shape " + graph::shape_to_string(out.shape));

      node.children = vector_of(fn->children());
      for (int32_t c : node.children) {
        if (c < 0 || static_cast<size_t>(c) >= count)
          fail(node_label(n) + " lists child " + std::to_string(c) + " but the graph has " +
               std::to_string(count) + " nodes");
        // Children after parents is the file's topological order; it also
        // proves the graph acyclic (every edge points forward).
        if (static_cast<size_t>(c) <= n)
          fail(node_label(n) + " lists child " + std::to_string(c) +
               ", which is not after it (a cycle, or nodes out of topological order)");
        if (seen_from[c] == n) fail(node_label(n) + " lists child " + std::to_string(c) + " twice");
        seen_from[c] = n;
        ++incoming[c];
        // Parents come first, so each node's depth is final when it is reached.
        expected_depth[c] = std::max(expected_depth[c], expected_depth[n] + 1);
      }
      node.parent_count = fn->parent_count();
      node.depth = fn->depth();
    }
    for (size_t n = 0; n < count; ++n) {
      const graph::TileNode& node = graph_.nodes[n];
      if (node.parent_count != incoming[n])
        fail(node_label(n) + " has parent_count " + std::to_string(node.parent_count) + " but " +
             std::to_string(incoming[n]) +
             " nodes list it as a child (a request would hang or start it early)");
      if (node.depth != expected_depth[n])
        fail(node_label(n) + " has depth " + std::to_string(node.depth) +
             " but its longest path from a source has length " + std::to_string(expected_depth[n]));
    }
  }

  // Each op's tiles must compute every element of its output exactly once.
  void check_tiles_cover_outputs() const {
    std::vector<std::vector<size_t>> tiles_of(graph_.ops.size());
    for (size_t n = 0; n < graph_.nodes.size(); ++n) tiles_of[graph_.nodes[n].op].push_back(n);
    for (size_t o = 0; o < graph_.ops.size(); ++o) {
      const graph::CompiledTensor& out = graph_.tensors[graph_.ops[o].outputs[0]];
      auto want = static_cast<uint64_t>(graph::shape_numel(out.shape));
      uint64_t covered = 0;
      // Regions lie inside the output (checked), so each term is <= want and
      // the early exit keeps the sum from overflowing.
      for (size_t n : tiles_of[o]) {
        covered += static_cast<uint64_t>(graph_.nodes[n].region.numel());
        if (covered > want) break;
      }
      if (covered != want)
        fail(op_label(o) + " has tiles covering " + (covered > want ? "more than " : "") +
             std::to_string(covered) + " elements of its " + std::to_string(want) +
             "-element output");
      const std::vector<size_t>& tiles = tiles_of[o];
      if (tiles.size() > kMaxTilesForOverlapCheck) continue;
      for (size_t i = 0; i < tiles.size(); ++i)
        for (size_t j = i + 1; j < tiles.size(); ++j)
          if (graph::regions_overlap(graph_.nodes[tiles[i]].region, graph_.nodes[tiles[j]].region))
            fail(op_label(o) + " has overlapping tiles: " + node_label(tiles[i]) + " " +
                 graph::region_to_string(graph_.nodes[tiles[i]].region) + " and " +
                 node_label(tiles[j]) + " " +
                 graph::region_to_string(graph_.nodes[tiles[j]].region));
    }
  }

  // Every edge the ops' dependency functions require must be in the file
  // (extra edges are allowed: the memory plan may add ordering). A missing
  // one would let a node read its input while a parent still writes it.
  void check_edges_cover_dependencies() const {
    const size_t count = graph_.nodes.size();
    std::vector<std::vector<int32_t>> parents(count);
    for (size_t n = 0; n < count; ++n)
      for (int32_t c : graph_.nodes[n].children) parents[c].push_back(static_cast<int32_t>(n));
    for (auto& p : parents) std::sort(p.begin(), p.end());
    std::vector<int64_t> writer(graph_.tensors.size(), -1);
    for (size_t o = 0; o < graph_.ops.size(); ++o)
      writer[graph_.ops[o].outputs[0]] = static_cast<int64_t>(o);
    std::vector<std::vector<int32_t>> tiles_of(graph_.ops.size());
    for (size_t n = 0; n < count; ++n)
      tiles_of[graph_.nodes[n].op].push_back(static_cast<int32_t>(n));
    for (size_t n = 0; n < count; ++n) {
      const graph::TileNode& node = graph_.nodes[n];
      const graph::Operator& op = graph_.ops[node.op];
      std::vector<graph::Shape> in;
      for (int32_t t : op.inputs) in.push_back(graph_.tensors[t].shape);
      std::vector<graph::InputDependency> deps;
      try {
        deps = graph::tile_dependencies(op, in, graph_.tensors[op.outputs[0]].shape, node.region);
      } catch (const Error& e) {
        fail(node_label(n) + ": " + e.what());
      }
      for (const auto& dep : deps) {
        const int64_t producer = writer[op.inputs[dep.operand]];
        if (producer < 0) continue;  // a model input or a weight
        for (int32_t m : tiles_of[producer])
          if (graph::regions_overlap(graph_.nodes[m].region, dep.region) &&
              !std::binary_search(parents[n].begin(), parents[n].end(), m))
            fail(node_label(n) + " of " + op_label(node.op) + " reads what " + node_label(m) +
                 " writes but has no edge from it");
      }
    }
  }

  const fb::Model& model_;
  const std::string& origin_;
  size_t copy_budget_;  // elements and characters the loader may still copy
  graph::TileGraph graph_;
};

[[noreturn]] void fail_at(const std::string& origin, const std::string& what) {
  throw Error(origin + ": " + what);
}

// 64-byte aligned heap copy of a file image, for callers whose bytes are not
// aligned enough for FlatBuffers' scalar reads.
std::shared_ptr<const void> aligned_copy(const uint8_t* data, size_t size) {
  constexpr std::align_val_t kAlign{kTessWeightAlignment};
  auto* copy = static_cast<uint8_t*>(::operator new(size, kAlign));
  std::memcpy(copy, data, size);
  return std::shared_ptr<const void>(
      copy, [kAlign](const void* p) { ::operator delete(const_cast<void*>(p), kAlign); });
}

}  // namespace

graph::TileGraph read_tess_bytes(std::shared_ptr<const void> owner, const uint8_t* data,
                                 size_t size, const std::string& origin) {
  auto fail = [&](const std::string& what) { fail_at(origin, what); };
  if (size == 0 || data == nullptr) fail("file is empty");
  if (size < flatbuffers::kFileIdentifierLength + sizeof(flatbuffers::uoffset_t))
    fail("not a Tessera graph file (only " + std::to_string(size) + " bytes)");
  if (!flatbuffers::BufferHasIdentifier(data, kTessFileIdentifier))
    fail("not a Tessera graph file (bad identifier)");
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    fail("file is larger than the 2 GiB a FlatBuffers file may hold");
  // FlatBuffers reads scalars in place; int64 fields need 8-byte alignment.
  if (reinterpret_cast<uintptr_t>(data) % alignof(int64_t) != 0) {
    owner = aligned_copy(data, size);
    data = static_cast<const uint8_t*>(owner.get());
  }

  // Stage 1: structure. Every offset, vector and string lies inside the bytes.
  flatbuffers::Verifier::Options options;
  options.max_depth = kVerifierMaxDepth;
  options.max_tables = static_cast<flatbuffers::uoffset_t>(size / 4 + kVerifierTableSlack);
  flatbuffers::Verifier verifier(data, size, options);
  if (!fb::VerifyModelBuffer(verifier))
    fail("file is truncated or corrupt (FlatBuffers verification failed)");

  // Stage 2: meaning, checked while the TileGraph is built and before it is returned.
  return TessLoader(*fb::GetModel(data), size, origin).load(std::move(owner));
}

graph::TileGraph read_tess_file(const std::string& path) {
  auto fail = [&](const std::string& what) { fail_at(path, what); };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot open the file (") + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(std::string("cannot stat the file (") + std::strerror(err) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail("file is empty");
  }
  // MAP_PRIVATE read-only: weights are used in place and nothing writes back.
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping keeps the file open
  if (mapped == MAP_FAILED)
    fail(std::string("cannot map the file (") + std::strerror(map_errno) + ")");
  std::shared_ptr<const void> owner(
      mapped, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  return read_tess_bytes(std::move(owner), static_cast<const uint8_t*>(mapped), size, path);
}

}  // namespace tessera::serialization
