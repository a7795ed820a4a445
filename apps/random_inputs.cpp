#include "apps/random_inputs.hpp"

#include <random>

namespace tessera::apps {

std::vector<NpyArray> random_inputs(const Model& model, uint64_t seed, Inputs& inputs) {
  std::vector<NpyArray> arrays;
  arrays.reserve(model.inputs().size());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const TensorSpec& spec : model.inputs()) {
    NpyArray r;
    r.shape = spec.shape;
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    if (spec.dtype == "int64") {
      r.dtype = "int64";
      r.int64_data.assign(static_cast<size_t>(n), 0);
    } else {
      r.data.resize(static_cast<size_t>(n));
      for (float& v : r.data) v = uniform(rng);
    }
    arrays.push_back(std::move(r));
  }
  // Views after all arrays exist: a view points into an array's own vector.
  for (size_t i = 0; i < arrays.size(); ++i)
    inputs.emplace_back(model.inputs()[i].name,
                        TensorView{arrays[i].bytes(), arrays[i].shape, arrays[i].dtype});
  return arrays;
}

}  // namespace tessera::apps
