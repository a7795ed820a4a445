#pragma once
// Writes a compiled model (graph::TileGraph) as a `.tess` FlatBuffers file.
//
//   graph::TileGraph tg = graph::compile_graph(g, options, &report);
//   serialization::write_tess_file(tg, "model.tess");
//
// The writer stores the graph as it is and checks nothing: the reader's
// semantic checks decide what is loadable (so tests can write broken graphs).
#include <cstdint>
#include <string>
#include <vector>

#include "graph/tile_graph.hpp"

namespace tessera::serialization {

// The whole file's bytes. Weight buffers lie at offsets that are multiples of
// kTessWeightAlignment from the start of the returned bytes.
std::vector<uint8_t> serialize_tess(const graph::TileGraph& graph);

// Writes serialize_tess(graph) to `path` through a temporary file in the same
// directory and a rename, so a reader never sees a half-written file. Throws
// tessera::Error ("<path>: ...") when the file cannot be written.
void write_tess_file(const graph::TileGraph& graph, const std::string& path);

}  // namespace tessera::serialization
