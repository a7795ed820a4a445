#pragma once
// Shared by the scheduler tests: the load scale (smaller under ThreadSanitizer
// or with TESSERA_TEST_SCALE) and printed random seeds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace tessera::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr double kDefaultScale = 0.3;
#else
inline constexpr double kDefaultScale = 1.0;
#endif

// TESSERA_TEST_SCALE multiplies the amount of work (e.g. 0.1 under slow tools).
inline double test_scale() {
  const char* text = std::getenv("TESSERA_TEST_SCALE");
  return text ? std::max(0.001, std::atof(text)) : kDefaultScale;
}

inline int32_t scaled(int32_t count) {
  return std::max(1, static_cast<int32_t>(std::lround(count * test_scale())));
}

inline uint64_t seed_for(const char* what) {
  const uint64_t seed = std::random_device{}();
  std::printf("%s: seed %llu\n", what, static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace tessera::test
