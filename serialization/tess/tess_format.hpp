#pragma once
// Constants of the `.tess` file format shared by its writer, reader and tests.
// The schema itself (and the rules for changing it) is serialization/tess/tess.fbs.
#include <cstdint>

#include "graph/operator.hpp"

namespace tessera::serialization {

inline constexpr char kTessFileIdentifier[] = "TESS";
// Bump the minor version for additions old readers may ignore, the major one
// for changes they must not ignore; keep tess.fbs's revision history in step.
inline constexpr uint32_t kTessSchemaMajor = 1;
inline constexpr uint32_t kTessSchemaMinor = 8;
// Readers refuse op versions past the last they know. Version 2 marks an op
// whose new attribute changes what it computes, so that older readers
// refuse it rather than ignore the attribute: a FusedAttention with
// nan_probabilities_to_zero. Every other op is at version 1.
inline constexpr uint32_t kTessMaxOpVersion = 2;
inline uint32_t tess_op_version(const graph::Operator& op) {
  return op.type == graph::OpType::FusedAttention && op.attrs.nan_probabilities_to_zero ? 2 : 1;
}
// Weight buffers start on this boundary inside the file (force_align in the
// schema) so they can be used in place from an mmapped file.
inline constexpr uint64_t kTessWeightAlignment = 64;
// Arena tensors start on this boundary inside the arena (one cache line, and
// enough for any SIMD load the kernels use).
inline constexpr uint64_t kTessArenaAlignment = 64;
// The largest tensor the reader accepts, in elements (keeps every size
// computation far from int64 overflow).
inline constexpr int64_t kTessMaxTensorElements = int64_t{1} << 40;

}  // namespace tessera::serialization
