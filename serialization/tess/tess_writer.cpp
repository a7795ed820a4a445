#include "serialization/tess/tess_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "graph/error.hpp"
#include "serialization/tess/tess_format.hpp"
#include "serialization/tess/tess_generated.h"

namespace tessera::serialization {
namespace {

namespace fb = tessera::tess;

static_assert(std::endian::native == std::endian::little,
              "weight buffers are stored little-endian and used in place");
// The schema's enums mirror the graph's; values are stored, so they must agree.
static_assert(static_cast<uint8_t>(fb::DType::Bool) == static_cast<uint8_t>(graph::DType::Bool));
static_assert(static_cast<uint8_t>(fb::DType::UInt8) == static_cast<uint8_t>(graph::DType::UInt8));
static_assert(static_cast<uint8_t>(fb::TensorStorage::Weight) ==
              static_cast<uint8_t>(graph::TensorStorage::Weight));
static_assert(static_cast<uint8_t>(fb::TensorLayout::NHWC) ==
              static_cast<uint8_t>(graph::Layout::NHWC));

constexpr char kProducer[] = "Tessera 0.1";

flatbuffers::Offset<fb::OpAttributes> write_attributes(flatbuffers::FlatBufferBuilder& fbb,
                                                       const graph::OpAttributes& a) {
  auto kernel_shape = fbb.CreateVector(a.kernel_shape);
  auto strides = fbb.CreateVector(a.strides);
  auto pads = fbb.CreateVector(a.pads);
  auto dilations = fbb.CreateVector(a.dilations);
  auto new_shape = fbb.CreateVector(a.new_shape);
  auto perm = fbb.CreateVector(a.perm);
  auto indices = fbb.CreateVector(a.indices);
  auto indices_shape = fbb.CreateVector(a.indices_shape);
  auto starts = fbb.CreateVector(a.starts);
  auto steps = fbb.CreateVector(a.steps);
  auto axes = fbb.CreateVector(a.axes);
  auto scales = fbb.CreateVector(a.scales);
  return fb::CreateOpAttributes(
      fbb, kernel_shape, strides, pads, dilations, a.group, a.axis, a.alpha, a.beta, a.trans_a,
      a.trans_b, a.clip_min, a.clip_max, a.count_include_pad, a.ceil_mode, a.softmax_coerce_2d,
      a.epsilon, new_shape, static_cast<uint8_t>(a.activation), perm, indices, indices_shape,
      starts, steps, axes, a.keepdims, a.gelu_tanh, a.fused_residual,
      static_cast<uint8_t>(a.pad_mode), a.pad_value, static_cast<uint8_t>(a.resize_mode),
      static_cast<uint8_t>(a.coordinate_mode), static_cast<uint8_t>(a.nearest_mode), scales,
      static_cast<uint8_t>(a.weight_bits), a.fused_input_scale, a.fused_expand,
      static_cast<uint8_t>(a.expand_activation), a.expand_clip_min, a.expand_clip_max,
      a.leaky_relu_alpha, a.cast_to_bool, a.nan_probabilities_to_zero);
}

}  // namespace

std::vector<uint8_t> serialize_tess(const graph::TileGraph& graph) {
  // FlatBuffers offsets are 32-bit: one file holds less than 2 GiB.
  uint64_t weight_bytes = 0;
  for (const graph::CompiledTensor& t : graph.tensors)
    weight_bytes += t.weight.size_bytes() + kTessWeightAlignment;
  // 64 MiB of headroom for the tables.
  if (weight_bytes > FLATBUFFERS_MAX_BUFFER_SIZE - (uint64_t{64} << 20))
    throw Error("the model's " + std::to_string(weight_bytes >> 20) +
                " MiB of weights do not fit a .tess file (FlatBuffers' 2 GiB limit)");
  flatbuffers::FlatBufferBuilder fbb(1 << 16);

  // buffers[0] stays empty so that Tensor.buffer == 0 means "no data" (tess.fbs).
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers{fb::CreateBuffer(fbb)};
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  tensors.reserve(graph.tensors.size());
  for (const graph::CompiledTensor& t : graph.tensors) {
    uint32_t buffer_index = 0;
    if (t.storage == graph::TensorStorage::Weight) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(t.weight.data());
      size_t byte_count = t.weight.size_bytes();
      // What force_align: 64 does in flatc's generated *Direct helpers; called
      // as PreAlign because ForceVectorAlignment asserts alignment <= 32.
      fbb.PreAlign(byte_count, kTessWeightAlignment);
      auto data = fbb.CreateVector(bytes, byte_count);
      buffer_index = static_cast<uint32_t>(buffers.size());
      buffers.push_back(fb::CreateBuffer(fbb, data));
    }
    auto name = fbb.CreateString(t.name);
    auto shape = fbb.CreateVector(t.shape);
    tensors.push_back(fb::CreateTensor(fbb, name, shape, static_cast<fb::DType>(t.dtype),
                                       static_cast<fb::TensorStorage>(t.storage), t.arena_offset,
                                       buffer_index, static_cast<fb::TensorLayout>(t.layout)));
  }

  std::vector<flatbuffers::Offset<fb::Operator>> operators;
  operators.reserve(graph.ops.size());
  for (const graph::Operator& op : graph.ops) {
    auto name = fbb.CreateString(op.name);
    auto kernel = fbb.CreateString(op.kernel);
    auto inputs = fbb.CreateVector(op.inputs);
    auto outputs = fbb.CreateVector(op.outputs);
    auto attributes = write_attributes(fbb, op.attrs);
    operators.push_back(fb::CreateOperator(fbb, static_cast<uint16_t>(op.type), name, kernel,
                                           inputs, outputs, tess_op_version(op), attributes));
  }

  std::vector<flatbuffers::Offset<fb::TileNode>> nodes;
  nodes.reserve(graph.nodes.size());
  for (const graph::TileNode& n : graph.nodes) {
    auto begin = fbb.CreateVector(n.region.begin);
    auto end = fbb.CreateVector(n.region.end);
    auto children = fbb.CreateVector(n.children);
    nodes.push_back(
        fb::CreateTileNode(fbb, n.op, begin, end, children, n.parent_count, n.depth, /*device=*/0));
  }

  auto options = fb::CreateCompileOptions(fbb, graph.options.tiles, graph.options.threads,
                                          fbb.CreateString(graph.options.target));
  fb::SchemaVersion version(kTessSchemaMajor, kTessSchemaMinor);
  auto model = fb::CreateModel(
      fbb, &version, fbb.CreateString(kProducer), fbb.CreateVector(tensors),
      fbb.CreateVector(buffers), fbb.CreateVector(operators), fbb.CreateVector(nodes),
      fbb.CreateVector(graph.inputs), fbb.CreateVector(graph.outputs), graph.arena_bytes, options);
  fb::FinishModelBuffer(fbb, model);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

void write_tess_file(const graph::TileGraph& graph, const std::string& path) {
  std::vector<uint8_t> bytes = serialize_tess(graph);
  auto fail = [&](const std::string& what) {
    throw Error(path + ": cannot write the file (" + what + ")");
  };
  // A unique temporary name beside the target, so the rename stays within one
  // file system and is atomic.
  static std::atomic<uint64_t> counter{0};
  std::string temp = path + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "no progress";
      ::close(fd);
      ::unlink(temp.c_str());
      fail(why);
    }
    written += static_cast<size_t>(n);
  }
  // fsync before the rename: otherwise a crash could leave the new name
  // pointing at a file whose data never reached the disk.
  bool synced = ::fsync(fd) == 0;
  int sync_errno = errno;
  bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    std::string why = std::strerror(synced ? errno : sync_errno);
    ::unlink(temp.c_str());
    fail(why);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    ::unlink(temp.c_str());
    fail(why);
  }
}

}  // namespace tessera::serialization
