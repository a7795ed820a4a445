#pragma once
// Seeded inputs for every input of a model, for `tessera run` without
// --input and for `tessera compile --tune`'s timing runs: float32 inputs
// uniform in [-1, 1], index (int64) inputs zeros, the one index valid for
// every axis size (token ids of BERT and GPT-2 among them).
#include <cstdint>
#include <vector>

#include "apps/npy.hpp"
#include "tessera/tessera.hpp"

namespace tessera::apps {

// Appends one view per model input to `inputs`; the returned arrays own the
// data the views point at and must outlive them.
std::vector<NpyArray> random_inputs(const Model& model, uint64_t seed, Inputs& inputs);

}  // namespace tessera::apps
