#pragma once
// Loads a `.tess` file into a graph::TileGraph, in two stages (as TFLite's
// verifier does): the FlatBuffers verifier first, then Tessera's semantic
// checks (indices in range, acyclic tile graph, consistent edge counts and
// depths, regions inside tensors covering each output, arena and weight sizes,
// shapes agreeing with graph::infer_output_shape). Nothing is used before both
// pass; a truncated, corrupt or hostile file gives a tessera::Error with one
// line "<origin>: <what is wrong>", never a crash.
//
//   graph::TileGraph tg = serialization::read_tess_file("model.tess");
//   // tg.tensors[i].weight points into the mapped file; tg.storage keeps it mapped.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "graph/tile_graph.hpp"

namespace tessera::serialization {

// Maps the file read-only (MAP_PRIVATE) and reads it with read_tess_bytes.
graph::TileGraph read_tess_file(const std::string& path);

// Reads a `.tess` image held in memory that `owner` keeps alive. Weight spans
// point into `data` where it is suitably aligned (always for a mapped file or
// serialize_tess's bytes), else into copies; the result's `storage` holds
// `owner` and any copies. `origin` (a path) starts every error message.
graph::TileGraph read_tess_bytes(std::shared_ptr<const void> owner, const uint8_t* data,
                                 size_t size, const std::string& origin);

}  // namespace tessera::serialization
