#pragma once
// Random small operator graphs (CNN-like and matrix-like) for tiler and
// memory-plan property tests.
#include <random>

#include "graph_builder.hpp"
#include "random_ops.hpp"

namespace tessera::graph::test {

// Built with append: GCC 12 reports a false -Wrestrict on "lit" + std::string.
inline std::string numbered(const char* prefix, int64_t i) {
  std::string s(prefix);
  s.append(std::to_string(i));
  return s;
}

inline Graph random_cnn(std::mt19937& rng) {
  GraphBuilder b;
  b.rng.seed(rng());
  int64_t n = rnd(rng, 1, 2);
  std::vector<int32_t> maps = {b.input("x", {n, rnd(rng, 1, 4), rnd(rng, 3, 12), rnd(rng, 3, 12)})};
  auto pick = [&] {
    return maps[static_cast<size_t>(rnd(rng, 0, static_cast<int64_t>(maps.size()) - 1))];
  };
  int64_t layers = rnd(rng, 2, 7);
  for (int64_t l = 0; l < layers; ++l) {
    int32_t x = rnd(rng, 0, 2) ? maps.back() : pick();
    Shape xs = b.shape(x);
    int64_t kind = rnd(rng, 0, 5);
    try {
      if (kind <= 1) {
        OpAttributes a =
            spatial_attrs({rnd(rng, 1, 3), rnd(rng, 1, 3)}, {rnd(rng, 1, 2), rnd(rng, 1, 2)},
                          {rnd(rng, 0, 1), rnd(rng, 0, 1), rnd(rng, 0, 1), rnd(rng, 0, 1)},
                          {rnd(rng, 1, 2), rnd(rng, 1, 2)});
        a.group = xs[1] % 2 == 0 && rnd(rng, 0, 1) ? 2 : 1;
        int64_t m = a.group * rnd(rng, 1, 3);
        int32_t w =
            b.weight(numbered("w", l), {m, xs[1] / a.group, a.kernel_shape[0], a.kernel_shape[1]});
        int32_t bias = b.weight(numbered("b", l), {m});
        maps.push_back(b.op(OpType::Conv, {x, w, bias}, a));
      } else if (kind == 2) {
        OpAttributes a = spatial_attrs({rnd(rng, 1, 3), rnd(rng, 1, 3)},
                                       {rnd(rng, 1, 2), rnd(rng, 1, 2)}, {0, 0, 0, 0}, {1, 1});
        a.ceil_mode = rnd(rng, 0, 1);
        maps.push_back(b.op(rnd(rng, 0, 1) ? OpType::MaxPool : OpType::AveragePool, {x}, a));
      } else if (kind == 3) {
        maps.push_back(b.op(OpType::Relu, {x}));
      } else if (kind == 4) {
        // Add with an equal-shaped map if one exists, else a per-channel weight.
        int32_t other = -1;
        for (int32_t t : maps)
          if (t != x && b.shape(t) == xs) other = t;
        if (other < 0) other = b.weight(numbered("c", l), {xs[1], 1, 1});
        maps.push_back(b.op(OpType::Add, {x, other}));
      } else {
        std::vector<int32_t> parts = {x};
        for (int32_t t : maps)
          if (t != x && b.shape(t)[0] == xs[0] && b.shape(t)[2] == xs[2] && b.shape(t)[3] == xs[3])
            parts.push_back(t);
        OpAttributes a;
        a.axis = 1;
        maps.push_back(b.op(OpType::Concat, parts, a));
      }
    } catch (const tessera::Error&) {
      // kernel larger than the map etc.: skip the layer
    }
  }
  int32_t last = maps.back();
  b.g.outputs = {last};
  if (rnd(rng, 0, 1)) {
    int32_t gap = b.op(OpType::GlobalAveragePool, {last});
    OpAttributes fa;
    fa.axis = 1;
    fa.new_shape = {b.shape(gap)[0], b.shape(gap)[1]};
    int32_t flat = b.op(OpType::Flatten, {gap}, fa);
    int64_t classes = rnd(rng, 1, 5);
    int32_t w = b.weight("fc.w", {classes, b.shape(flat)[1]});
    int32_t bias = b.weight("fc.b", {classes});
    OpAttributes ga;
    ga.trans_b = true;
    int32_t fc = b.op(OpType::Gemm, {flat, w, bias}, ga);
    OpAttributes sa;
    sa.axis = 1;
    b.g.outputs = {b.op(OpType::Softmax, {fc}, sa)};
    if (rnd(rng, 0, 1)) b.g.outputs.push_back(last);
  }
  return b.g;
}

inline Graph random_matrix_graph(std::mt19937& rng) {
  GraphBuilder b;
  b.rng.seed(rng());
  int64_t m = rnd(rng, 1, 9), k = rnd(rng, 1, 9);
  int32_t x = b.input("x", {m, k});
  int64_t layers = rnd(rng, 1, 5);
  for (int64_t l = 0; l < layers; ++l) {
    int64_t n = rnd(rng, 1, 9);
    int64_t kind = rnd(rng, 0, 3);
    Shape xs = b.shape(x);
    if (kind == 0) {
      int32_t w = b.weight(numbered("w", l), {xs[1], n});
      x = b.op(OpType::Gemm, {x, w, b.weight(numbered("c", l), {n})});
    } else if (kind == 1) {
      x = b.op(OpType::MatMul, {x, b.weight(numbered("w", l), {xs[1], n})});
    } else if (kind == 2) {
      OpAttributes a;
      a.axis = 1;
      x = b.op(OpType::Softmax, {x}, a);
    } else {
      OpAttributes a;
      a.new_shape = {xs[1], xs[0]};  // a "transpose-shaped" reshape mixes rows
      x = b.op(OpType::Reshape, {x}, a);
      x = b.op(OpType::Sigmoid, {x});
    }
  }
  b.g.outputs = {x};
  return b.g;
}

}  // namespace tessera::graph::test
