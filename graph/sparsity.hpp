#pragma once
// TeSA, Tensor-with-Sparsity-Attribute (SparTA §3.1), and its propagation
// through the operator graph (SparTA §3.2, Algorithms 1–2). Compile-time only:
// nothing of it reaches the `.tess` file except the zeros it writes into the
// weights the compiler owns.
//
// A tensor's pruning attribute is kept as two per-element bitmasks:
//  - `zero`: the element is 0 for every model input (weights' zeros, user
//    annotations, and what the TeSA algebra derives forward from them);
//  - `dead`: no model output depends on the element's value (derived
//    backward: output→input and input→input, the paper's AD-based rule).
// An element is pruned when it is zero or dead. Dead weight elements are
// overwritten with 0 (they become zero), which can make more of the graph
// zero, so the forward and backward sweeps repeat until nothing changes.
// Because only dead weights are changed, the model's outputs are unchanged.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace tessera::graph {

// One bit per element of a tensor, row-major.
class ElementMask {
 public:
  ElementMask() = default;
  explicit ElementMask(int64_t numel)
      : numel_(numel), words_(static_cast<size_t>((numel + 63) / 64), 0) {}
  int64_t size() const { return numel_; }
  bool test(int64_t i) const { return (words_[static_cast<size_t>(i >> 6)] >> (i & 63)) & 1u; }
  void set(int64_t i) { words_[static_cast<size_t>(i >> 6)] |= uint64_t{1} << (i & 63); }
  int64_t count() const;
  bool all() const { return count() == numel_; }
  bool none() const;
  // this |= other; true if any bit was added.
  bool merge(const ElementMask& other);
  ElementMask operator|(const ElementMask& other) const;
  ElementMask operator~() const;
  bool operator==(const ElementMask&) const = default;

 private:
  int64_t numel_ = 0;
  std::vector<uint64_t> words_;
};

// The TeSA of one tensor. Bit width is per tensor (32 = float32): SparTA's
// quantization rule needs calibration data and fine-tuning, so the width is
// carried from the annotation file and reported, not propagated.
struct TensorSparsity {
  ElementMask zero;
  ElementMask dead;
  int32_t bit_width = 32;
  ElementMask pruned() const { return zero | dead; }
};

// Runs one operator on whole dense row-major tensors and returns its output.
// graph/ knows nothing of kernels: the caller supplies one (the reference
// kernels: kernels/reference_evaluator.hpp). Tensor scrambling uses it.
using OpEvaluator = std::function<std::vector<float>(
    const Operator& op, const std::vector<const std::vector<float>*>& inputs,
    const std::vector<Shape>& input_shapes, const Shape& output_shape)>;

// A user's initial pruning of one weight (`tessera compile --sparsity FILE.json`).
struct SparsityAnnotation {
  enum class Pattern : uint8_t {
    Zeros,      // the weight's zeros (what --sparsity auto does for every weight)
    Block,      // the `ratio` of block_rows × block_cols blocks with the smallest L1 norm
    Magnitude,  // the `ratio` of elements with the smallest magnitude
    Mask,       // `keep_mask`: 0 = pruned (torch.nn.utils.prune's convention)
  };
  std::string tensor;
  Pattern pattern = Pattern::Zeros;
  int64_t block_rows = 1;
  int64_t block_cols = 1;
  double ratio = 0.0;
  Shape mask_shape;
  std::vector<float> keep_mask;
  int32_t bit_width = 32;
  std::string source;  // "FILE.json entry N", for errors
};

// Reads a .npy mask file: its shape and values as float32. Throws tessera::Error.
using MaskLoader = std::function<std::vector<float>(const std::string& path, Shape* shape)>;

// Parses the annotation file: a JSON array of entries, or an object with a
// "tensors" array. Entry: {"tensor": NAME, "pruned": "zeros" |
// "block:RxC:RATIO" | "magnitude:RATIO" | "mask:FILE.npy", "bits": N}
// ("pruned" and "bits" optional; a mask path is relative to the JSON file).
// Throws tessera::Error with one line naming the file, entry and problem.
std::vector<SparsityAnnotation> parse_sparsity_json(const std::string& json_text,
                                                    const std::string& file_name,
                                                    const MaskLoader& load_mask);
std::vector<SparsityAnnotation> read_sparsity_file(const std::string& path,
                                                   const MaskLoader& load_mask);

struct SparsityConfig {
  bool enabled = false;  // off: no TeSA pass at all
  std::vector<SparsityAnnotation> annotations;
  // Tensor scrambling for ops without an algebra rule; without one those ops
  // propagate no zeros forward (the report says which).
  OpEvaluator evaluate;
  int32_t scramble_trials = 64;  // random draws; SparTA §5.2 uses 256
  uint64_t seed = 0x7e5a;
};

struct TensorSparsityReport {
  std::string tensor;
  bool is_weight = false;
  std::string consumer;  // first op reading it (weights) or producing it (activations)
  int64_t numel = 0;
  int64_t pruned_before = 0;
  int64_t pruned_after = 0;
  int32_t bit_width = 32;
};

struct SparsityReport {
  bool ran = false;
  std::vector<TensorSparsityReport> tensors;  // weights and activations, in graph order
  int32_t sweeps = 0;                         // forward+backward rounds until the fixed point
  int64_t weights_zeroed = 0;                 // weight elements propagation set to 0
  std::vector<std::string> notes;
};

// Writes the annotations' pruning into the named weights (zeros) and checks
// each names a float32 weight of the graph. Call before BN folding so that a
// folded weight keeps its user's zeros.
void apply_sparsity_annotations(Graph& graph, const SparsityConfig& config);

// The TeSA of every tensor at the fixed point; dead weight elements are set
// to 0 in `graph`. `report` (optional) gets the before/after table.
std::vector<TensorSparsity> propagate_sparsity(Graph& graph, const SparsityConfig& config,
                                               SparsityReport* report);

// One op's rules, for tests: the zero mask of the output from the inputs'
// zero masks (algebra rule or, where none applies, scrambling; nullopt-like
// empty mask when neither is available), and each input's live mask (the
// complement of dead) from the output's live mask and the inputs' zeros.
ElementMask forward_zero(const Operator& op, const std::vector<Shape>& input_shapes,
                         const Shape& output_shape, const std::vector<const ElementMask*>& zeros,
                         const SparsityConfig& config, bool* used_scrambling = nullptr);
// Tensor scrambling alone (SparTA §3.2): the output elements that stayed 0 in
// every one of config.scramble_trials runs of config.evaluate with random
// non-zero values on the inputs' non-zero elements. Empty without an evaluator.
ElementMask scramble_zero(const Operator& op, const std::vector<Shape>& input_shapes,
                          const Shape& output_shape, const std::vector<const ElementMask*>& zeros,
                          const SparsityConfig& config);
std::vector<ElementMask> backward_live(const Operator& op, const std::vector<Shape>& input_shapes,
                                       const Shape& output_shape,
                                       const std::vector<const ElementMask*>& zeros,
                                       const ElementMask& output_live);

}  // namespace tessera::graph
