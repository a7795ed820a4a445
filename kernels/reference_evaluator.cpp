#include "kernels/reference_evaluator.hpp"

#include <string>

#include "graph/error.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels {

graph::OpEvaluator reference_evaluator() {
  return [](const graph::Operator& op, const std::vector<const std::vector<float>*>& inputs,
            const std::vector<graph::Shape>& input_shapes, const graph::Shape& output_shape) {
    const TileKernel kernel = find_tile_kernel(op.type, "reference");
    if (!kernel)
      throw Error("no reference kernel for " + std::string(graph::op_type_name(op.type)));
    std::vector<ConstTensorView> views;
    for (size_t i = 0; i < inputs.size(); ++i)
      views.push_back({inputs[i]->data(), &input_shapes[i], graph::Layout::NCHW});
    std::vector<float> out(static_cast<size_t>(graph::shape_numel(output_shape)), 0.0f);
    const graph::Region region = graph::Region::whole(output_shape);
    TileArgs args;
    args.op = &op;
    args.inputs = views.data();
    args.input_count = views.size();
    args.output = {out.data(), &output_shape, graph::Layout::NCHW};
    args.region = &region;
    if (!region.empty()) kernel(args);
    return out;
  };
}

}  // namespace tessera::kernels
