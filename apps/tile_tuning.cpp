#include "apps/tile_tuning.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "apps/random_inputs.hpp"
#include "graph/error.hpp"
#include "serialization/tess/tess_writer.hpp"
#include "tessera/tessera.hpp"

namespace tessera::apps {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Median wall time of `iterations` runs of the model at `path`.
double time_model(Engine& engine, const std::string& path, int32_t iterations) {
  Result<Model> model = engine.load(path);
  if (!model) throw Error("tuning: " + model.error());
  Inputs inputs;
  const std::vector<NpyArray> data = random_inputs(*model, 0, inputs);
  Session session = model->session();
  std::vector<double> ms;
  for (int32_t i = -2; i < iterations; ++i) {  // two warm-up runs first
    const auto start = std::chrono::steady_clock::now();
    Result<Outputs> out = session.run(inputs);
    const auto stop = std::chrono::steady_clock::now();
    if (!out) throw Error("tuning: " + out.error());
    if (i >= 0) ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return median(std::move(ms));
}

}  // namespace

std::vector<int32_t> tile_candidates(int32_t threads) {
  std::vector<int32_t> candidates = {0};
  std::set<int32_t> seen;
  for (int32_t factor : {1, 2, 3, 4, 6, 8}) {
    const int32_t tiles = std::min(256, std::max(1, threads) * factor);
    if (seen.insert(tiles).second) candidates.push_back(tiles);
  }
  return candidates;
}

TileTuning tune_tiles(const std::function<graph::TileGraph(int32_t tiles)>& build, int32_t threads,
                      int32_t iterations, const std::string& scratch_path) {
  Engine engine(EngineOptions{.threads = threads});
  if (Status s = engine.status(); !s) throw Error("tuning: " + s.error());
  TileTuning tuning;
  double best = 0;
  try {
    for (int32_t tiles : tile_candidates(threads)) {
      serialization::write_tess_file(build(tiles), scratch_path);
      const double ms = time_model(engine, scratch_path, std::max(1, iterations));
      tuning.candidates.push_back({tiles, ms});
      if (tuning.candidates.size() == 1 || ms < best) {
        best = ms;
        tuning.best_tiles = tiles;
      }
    }
  } catch (...) {
    std::remove(scratch_path.c_str());
    throw;
  }
  std::remove(scratch_path.c_str());
  return tuning;
}

}  // namespace tessera::apps
