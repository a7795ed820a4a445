// A minimal embedding of Tessera: load a compiled model, run it on one input
// synchronously and on a few more concurrently, and print the top class.
//
//   classify_image MODEL.tess [THREADS]
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.tess [THREADS]\n", argv[0]);
    return 2;
  }
  tessera::Engine engine({.threads = argc > 2 ? std::atoi(argv[2]) : 0});
  auto model = engine.load(argv[1]);
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return 1;
  }
  const tessera::TensorSpec& in = model->inputs().at(0);
  size_t n = 1;
  for (int64_t d : in.shape) n *= static_cast<size_t>(d);
  std::vector<float> image(n);
  for (size_t i = 0; i < n; ++i) image[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;

  tessera::Session session = model->session();
  auto out = session.run({{in.name, {image.data(), in.shape}}});
  if (!out) {
    std::fprintf(stderr, "error: %s\n", out.error().c_str());
    return 1;
  }
  const tessera::Tensor& scores = out->tensors.at(0);
  const auto best = std::max_element(scores.data.begin(), scores.data.end());
  std::printf("%s: top class %td (score %.4f) of %zu\n", scores.name.c_str(),
              best - scores.data.begin(), *best, scores.data.size());

  // Several requests of the same model in flight at once share the workers.
  std::vector<tessera::RunHandle> pending;
  for (int i = 0; i < 4; ++i)
    pending.push_back(session.run_async({{in.name, {image.data(), in.shape}}}));
  for (auto& p : pending) {
    auto r = p.wait();
    if (!r || r->tensors.at(0).data != scores.data) {
      std::fprintf(stderr, "error: concurrent run differs or failed\n");
      return 1;
    }
  }
  std::printf("4 concurrent runs agree\n");
  return 0;
}
