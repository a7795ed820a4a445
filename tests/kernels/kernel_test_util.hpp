#pragma once
// Shared helpers for the reference kernel tests: random tensors, running a
// kernel on a region, comparing against a naive implementation, and the
// tiling check (bitwise equality with the one-tile result, no writes outside
// the region).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/error.hpp"
#include "graph/operator.hpp"
#include "graph/region.hpp"
#include "graph/shape.hpp"
#include "kernels/tile_kernel.hpp"

namespace tessera::kernels::test {

using graph::OpType;
using graph::Region;
using graph::Shape;

struct Tensor {
  Shape shape;
  std::vector<float> data;
};

// Base seed: TESSERA_TEST_SEED overrides it so a failure can be replayed.
inline uint64_t base_seed() {
  if (const char* s = std::getenv("TESSERA_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20240611;
}

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(engine() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(engine) < p; }
  float value() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(engine); }
  // Sizes favouring the edge cases: 1, small primes, and a few larger ones.
  int64_t size(int64_t max = 13) {
    static const int64_t kSizes[] = {1, 2, 3, 5, 7, 11, 13, 4, 6, 8, 1, 3};
    for (;;) {
      int64_t s = kSizes[engine() % std::size(kSizes)];
      if (s <= max) return s;
    }
  }
};

inline Tensor random_tensor(const Shape& shape, Rng& rng) {
  Tensor t{shape, std::vector<float>(static_cast<size_t>(graph::shape_numel(shape)))};
  for (float& v : t.data) v = rng.value();
  return t;
}

inline graph::Operator make_op(OpType type) {
  graph::Operator op;
  op.name = std::string(graph::op_type_name(type)) + "_under_test";
  op.type = type;
  return op;
}

// A NaN with a payload no kernel produces: marks "never written".
inline float sentinel() {
  return std::bit_cast<float>(uint32_t{0x7fa5a5a5});
}
inline bool is_sentinel(float v) {
  return std::bit_cast<uint32_t>(v) == 0x7fa5a5a5u;
}

inline std::vector<ConstTensorView> views(const std::vector<Tensor>& inputs) {
  std::vector<ConstTensorView> v;
  for (const Tensor& t : inputs) v.push_back({t.data.data(), &t.shape});
  return v;
}

// Runs the kernel on `region` of an output prefilled with the sentinel.
inline std::vector<float> run_region(TileKernel kernel, const graph::Operator& op,
                                     const std::vector<Tensor>& inputs, const Shape& out_shape,
                                     const Region& region) {
  std::vector<float> out(static_cast<size_t>(graph::shape_numel(out_shape)), sentinel());
  const std::vector<ConstTensorView> in = views(inputs);
  TileArgs args;
  args.op = &op;
  args.inputs = in.data();
  args.input_count = in.size();
  args.output = {out.data(), &out_shape};
  args.region = &region;
  kernel(args);
  return out;
}

inline std::vector<float> run_whole(TileKernel kernel, const graph::Operator& op,
                                    const std::vector<Tensor>& inputs, const Shape& out_shape) {
  return run_region(kernel, op, inputs, out_shape, Region::whole(out_shape));
}

inline std::string describe(const graph::Operator& op, const std::vector<Tensor>& inputs,
                            const Shape& out_shape) {
  // A stream, not string operator+: GCC 12 -O3 gives a false -Wrestrict there.
  std::ostringstream s;
  const auto list = [](const std::vector<int64_t>& v) { return graph::shape_to_string(v); };
  s << graph::op_type_name(op.type) << " inputs";
  for (const Tensor& t : inputs) s << " " << list(t.shape);
  const graph::OpAttributes& a = op.attrs;
  s << " -> " << list(out_shape) << " kernel" << list(a.kernel_shape) << " strides"
    << list(a.strides) << " pads" << list(a.pads) << " dilations" << list(a.dilations) << " group "
    << a.group << " axis " << a.axis << " trans " << a.trans_a << a.trans_b << " count_include_pad "
    << a.count_include_pad << " ceil " << a.ceil_mode << " coerce " << a.softmax_coerce_2d;
  return s.str();
}

// Kernel result vs. the naive expectation: within 1e-5 relative (absolute
// near zero, where a relative bound means nothing).
inline void check_close(const std::vector<float>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = 1e-5 * std::max(1.0, std::abs(expected[i]));
    if (actual[i] != expected[i] && !(std::abs(actual[i] - expected[i]) <= tol)) {
      if (++bad <= 5)
        FAIL_CHECK("element " << i << ": kernel " << actual[i] << ", naive " << expected[i]);
    }
  }
  CHECK(bad == 0);
}

// Random cuts in random dims: the cartesian product of per-dim intervals.
inline std::vector<Region> random_tiling(const Shape& shape, Rng& rng) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> per_dim;
  for (int64_t size : shape) {
    std::vector<int64_t> cuts{0, size};
    if (size > 1 && rng.coin(0.7)) {
      const int64_t count = rng.uniform(1, std::min<int64_t>(3, size - 1));
      for (int64_t i = 0; i < count; ++i) cuts.push_back(rng.uniform(1, size - 1));
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<std::pair<int64_t, int64_t>> intervals;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) intervals.push_back({cuts[i], cuts[i + 1]});
    if (intervals.empty()) intervals.push_back({0, size});  // size 0 dims
    per_dim.push_back(intervals);
  }
  std::vector<Region> regions{Region{}};
  for (const auto& intervals : per_dim) {
    std::vector<Region> next;
    for (const Region& r : regions)
      for (auto [b, e] : intervals) {
        Region n = r;
        n.begin.push_back(b);
        n.end.push_back(e);
        next.push_back(n);
      }
    regions = std::move(next);
  }
  return regions;
}

// Every tile of a random tiling must reproduce the one-tile result bitwise
// inside its region and leave every element outside it untouched.
inline void check_tiling(TileKernel kernel, const graph::Operator& op,
                         const std::vector<Tensor>& inputs, const Shape& out_shape,
                         const std::vector<float>& whole, Rng& rng, int tilings = 2) {
  const std::vector<int64_t> strides = graph::shape_strides(out_shape);
  std::vector<float> assembled(whole.size(), sentinel());
  for (int t = 0; t < tilings; ++t) {
    std::fill(assembled.begin(), assembled.end(), sentinel());
    for (const Region& region : random_tiling(out_shape, rng)) {
      INFO("region " << graph::region_to_string(region));
      const std::vector<float> out = run_region(kernel, op, inputs, out_shape, region);
      size_t wrong_inside = 0, written_outside = 0;
      for (size_t flat = 0; flat < out.size(); ++flat) {
        bool inside = true;
        for (size_t d = 0; d < out_shape.size(); ++d) {
          const int64_t i = static_cast<int64_t>(flat) / strides[d] % out_shape[d];
          inside = inside && i >= region.begin[d] && i < region.end[d];
        }
        if (inside) {
          if (std::bit_cast<uint32_t>(out[flat]) != std::bit_cast<uint32_t>(whole[flat]))
            ++wrong_inside;
          if (!is_sentinel(assembled[flat]))
            FAIL_CHECK("tiling covers element " << flat << " twice");
          assembled[flat] = out[flat];
        } else if (!is_sentinel(out[flat])) {
          ++written_outside;
        }
      }
      CHECK(wrong_inside == 0);
      CHECK(written_outside == 0);
    }
    for (size_t flat = 0; flat < whole.size(); ++flat)
      if (std::bit_cast<uint32_t>(assembled[flat]) != std::bit_cast<uint32_t>(whole[flat])) {
        FAIL_CHECK("assembled result differs at element " << flat);
        break;
      }
  }
}

// The whole test of one random case: (a) one tile vs. naive, (b) tilings.
inline void check_kernel(const graph::Operator& op, const std::vector<Tensor>& inputs,
                         const Shape& out_shape, const std::vector<double>& expected, Rng& rng) {
  INFO(describe(op, inputs, out_shape));
  const TileKernel kernel = find_tile_kernel(op.type, "reference");
  REQUIRE(static_cast<bool>(kernel));
  const std::vector<float> whole = run_whole(kernel, op, inputs, out_shape);
  check_close(whole, expected);
  check_tiling(kernel, op, inputs, out_shape, whole, rng);
}

// Multi-index helpers for the naive implementations.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

inline int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// A random shape of rank in [rank_lo, rank_hi] with dims from rng.size(max).
inline Shape random_shape(Rng& rng, int64_t rank_lo, int64_t rank_hi, int64_t max = 7) {
  Shape s(static_cast<size_t>(rng.uniform(rank_lo, rank_hi)));
  for (int64_t& d : s) d = rng.size(max);
  return s;
}

// `base` with some leading dims dropped and some dims set to 1: broadcasts to base.
inline Shape broadcastable(const Shape& base, Rng& rng) {
  Shape s;
  const auto drop = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(base.size())));
  for (size_t d = drop; d < base.size(); ++d) s.push_back(rng.coin(0.3) ? 1 : base[d]);
  return s;
}

// The element of `in` that output index `out` reads under numpy broadcasting.
inline int64_t broadcast_flat(const std::vector<int64_t>& out, const Shape& in) {
  std::vector<int64_t> index(in.size());
  const size_t shift = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) index[d] = in[d] == 1 ? 0 : out[d + shift];
  return ravel(index, in);
}

}  // namespace tessera::kernels::test
