// Reference Pad and Resize: every output element reads the product of its
// per-dim sources (graph/source_index.hpp), computed once per tile and dim.
// Linear Resize sums its corners in a fixed order, so any tiling gives
// bitwise identical results.
#include <vector>

#include "graph/source_index.hpp"
#include "kernels/reference/reference_kernels.hpp"
#include "kernels/reference/tile_loops.hpp"

namespace tessera::kernels::reference {
namespace {

void check_same_rank(const TileArgs& args) {
  if (args.inputs[0].shape->size() != args.output.shape->size())
    fail(args, "input " + graph::shape_to_string(*args.inputs[0].shape) + " and output " +
                   graph::shape_to_string(*args.output.shape) + " differ in rank");
}

}  // namespace

void pad(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  check_same_rank(args);
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Region& r = *args.region;
  const size_t rank = out_shape.size();
  if (a.pads.size() != 2 * rank) fail(args, "pads must have 2 entries per dim");
  for (size_t d = 0; d < rank; ++d)
    if (in_shape[d] + a.pads[d] + a.pads[d + rank] != out_shape[d])
      fail(args, "pads do not map the input onto the output");
  if (rank == 0) {
    args.output.data[0] = args.inputs[0].data[0];
    return;
  }
  // Per dim, the input offset (index x stride) each output index of the
  // region reads, or -1 for constant padding.
  const std::vector<int64_t> in_strides = graph::shape_strides(in_shape);
  std::vector<std::vector<int64_t>> sources(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t o = r.begin[d]; o < r.end[d]; ++o) {
      const int64_t i = graph::pad_source_index(o, a.pads[d], in_shape[d], a.pad_mode);
      sources[d].push_back(i < 0 ? -1 : i * in_strides[d]);
    }
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  const float value = a.pad_value;
  for_each_row<1>(r, {out_strides.data()},
                  [&](const int64_t* index, const std::array<int64_t, 1>& offsets, int64_t length) {
                    int64_t base = 0;
                    bool padding = false;
                    for (size_t d = 0; d + 1 < rank; ++d) {
                      const int64_t s = sources[d][static_cast<size_t>(index[d] - r.begin[d])];
                      padding = padding || s < 0;
                      base += s;
                    }
                    float* dst = out + offsets[0];
                    const std::vector<int64_t>& last = sources[rank - 1];
                    for (int64_t i = 0; i < length; ++i) {
                      const int64_t s = last[static_cast<size_t>(i)];
                      dst[i] = padding || s < 0 ? value : in[base + s];
                    }
                  });
}

void resize(const TileArgs& args) {
  check_tile_args(args, 1, 1);
  check_same_rank(args);
  const graph::OpAttributes& a = args.op->attrs;
  const graph::Shape& in_shape = *args.inputs[0].shape;
  const graph::Shape& out_shape = *args.output.shape;
  const graph::Region& r = *args.region;
  const size_t rank = out_shape.size();
  if (a.scales.size() != rank) fail(args, "scales must have one entry per dim");
  if (rank == 0 || r.empty()) return;
  const std::vector<int64_t> in_strides = graph::shape_strides(in_shape);
  std::vector<std::vector<graph::ResizeTaps>> taps(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t o = r.begin[d]; o < r.end[d]; ++o)
      taps[d].push_back(graph::resize_taps(a, d, o, in_shape[d], out_shape[d]));
  const std::vector<int64_t> out_strides = graph::shape_strides(out_shape);
  const float* in = args.inputs[0].data;
  float* out = args.output.data;
  // Only dims whose two taps differ interpolate: nearest reads one element,
  // linear 2^k corners for its k interpolating dims (2 or 4 for images).
  struct Blend {
    int64_t step;  // (hi - lo) x stride
    float hi_weight;
  };
  std::vector<Blend> blends;
  blends.reserve(rank);
  // The last dim's offsets, and whether any of its outputs interpolates.
  std::vector<int64_t> last_offsets;
  bool last_blends = false;
  for (const graph::ResizeTaps& t : taps[rank - 1]) {
    last_offsets.push_back(t.lo * in_strides[rank - 1]);
    last_blends = last_blends || t.hi != t.lo;
  }
  for_each_row<1>(r, {out_strides.data()},
                  [&](const int64_t* index, const std::array<int64_t, 1>& offsets, int64_t length) {
                    int64_t base = 0;
                    blends.clear();
                    for (size_t d = 0; d + 1 < rank; ++d) {
                      const graph::ResizeTaps& t =
                          taps[d][static_cast<size_t>(index[d] - r.begin[d])];
                      base += t.lo * in_strides[d];
                      if (t.hi != t.lo)
                        blends.push_back({(t.hi - t.lo) * in_strides[d], t.hi_weight});
                    }
                    const size_t leading = blends.size();
                    if (leading == 0 && !last_blends) {  // a gather: nearest, or a copy
                      const float* src = in + base;
                      float* dst = out + offsets[0];
                      for (int64_t i = 0; i < length; ++i)
                        dst[i] = src[last_offsets[static_cast<size_t>(i)]];
                      return;
                    }
                    const int64_t last_stride = in_strides[rank - 1];
                    for (int64_t i = 0; i < length; ++i) {
                      const graph::ResizeTaps& t = taps[rank - 1][static_cast<size_t>(i)];
                      const int64_t first = base + t.lo * last_stride;
                      blends.resize(leading);
                      if (t.hi != t.lo)
                        blends.push_back({(t.hi - t.lo) * last_stride, t.hi_weight});
                      if (blends.empty()) {
                        out[offsets[0] + i] = in[first];
                        continue;
                      }
                      // Corner bit k set: blend k's hi tap. A fixed order per element,
                      // so every tiling sums identically.
                      float sum = 0.0f;
                      const size_t corners = size_t{1} << blends.size();
                      for (size_t corner = 0; corner < corners; ++corner) {
                        float weight = 1.0f;
                        int64_t offset = first;
                        for (size_t k = 0; k < blends.size(); ++k) {
                          const bool hi = (corner >> k) & 1;
                          weight *= hi ? blends[k].hi_weight : 1.0f - blends[k].hi_weight;
                          offset += hi ? blends[k].step : 0;
                        }
                        sum += weight * in[offset];
                      }
                      out[offsets[0] + i] = sum;
                    }
                  });
}

}  // namespace tessera::kernels::reference
