#pragma once
// Shared by the kernel variant tests: the seed of a test binary's random
// cases (TESSERA_TEST_SEED replays a failure; otherwise a fresh one, printed
// so that a failure can be replayed) and random picks from a list.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>

namespace tessera::test {

// `binary` names the test in the printed line; the seed is chosen once per process.
inline uint64_t base_seed(const char* binary) {
  static const uint64_t seed = [binary] {
    const char* env = std::getenv("TESSERA_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("%s: TESSERA_TEST_SEED=%llu\n", binary, static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return values.begin()[rng() % values.size()];
}

}  // namespace tessera::test
