#pragma once
// The ONNX importer: reads an ONNX model (default domain, opsets 11 to 28)
// into Tessera's operator graph with every attribute normalised as
// graph/operator.hpp documents, every tensor shape static and known, and
// operators whose inputs are all constants folded into weights.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::serialization {

// Values for the model inputs' symbolic or unknown dims (dim_param, or
// dim_value 0 / -1), applied before import (`tessera compile --batch N
// --shape NAME=DIMS`). Tessera's tile graph has static shapes: an input dim
// left symbolic is refused, naming the input and the dim.
struct InputShapeOverrides {
  // Each key is a model input's name (the value is its whole shape: its
  // static dims must agree) or a dim_param symbol (the value is one number).
  std::map<std::string, std::vector<int64_t>> shapes;
  // When > 0: dim 0 of every input whose dim 0 is symbolic or unknown.
  int64_t batch = 0;
};

// Throws tessera::Error with one line naming the file (and the node, op and
// opset where there is one) when the model cannot be imported.
graph::Graph import_onnx_file(const std::string& path, const InputShapeOverrides& overrides = {});

// `origin_for_errors` stands in for the file name in error messages.
graph::Graph import_onnx_bytes(const void* data, size_t size, const std::string& origin_for_errors,
                               const InputShapeOverrides& overrides = {});

}  // namespace tessera::serialization
