#pragma once
// The ONNX importer: reads an ONNX model (default domain, opsets 11 to 17)
// into Tessera's operator graph with every attribute normalised as
// graph/operator.hpp documents, every tensor shape static and known, and
// operators whose inputs are all constants folded into weights.
#include <cstddef>
#include <string>

#include "graph/graph.hpp"

namespace tessera::serialization {

// Throws tessera::Error with one line naming the file (and the node, op and
// opset where there is one) when the model cannot be imported.
graph::Graph import_onnx_file(const std::string& path);

// `origin_for_errors` stands in for the file name in error messages.
graph::Graph import_onnx_bytes(const void* data, size_t size, const std::string& origin_for_errors);

}  // namespace tessera::serialization
