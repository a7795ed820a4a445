#pragma once
// A per-thread scratch array of floats, 64-byte aligned like the arena's
// tensors and the packed weights (a std::vector's 16-byte alignment splits
// every 64-byte vector load and store across two cache lines), grown on
// first use and when a larger one is asked for, never per call.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace tessera::kernels::cpu {

// 64-byte aligned storage for `floats` floats (at least one), rounded up to
// whole cache lines; free with std::free. Throws std::bad_alloc.
inline float* allocate_aligned_floats(size_t floats) {
  const size_t bytes = ((floats > 0 ? floats : 1) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  return p;
}

// Owns storage from allocate_aligned_floats().
struct FreeAlignedFloats {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], FreeAlignedFloats>;

class AlignedScratch {
 public:
  // At least `floats` floats; earlier contents are lost when it grows.
  float* at_least(int64_t floats) {
    if (floats > floats_) {
      data_.reset(allocate_aligned_floats(static_cast<size_t>(floats)));
      floats_ = floats;
    }
    return data_.get();
  }

 private:
  AlignedFloats data_;
  int64_t floats_ = 0;
};

}  // namespace tessera::kernels::cpu
