// The user's initial TeSA (SparTA §3: "Initial Tensor Sparsity Attribute"):
// the `--sparsity FILE.json` annotation file and its application to weights.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/error.hpp"
#include "graph/sparsity.hpp"

namespace tessera::graph {
namespace {

using Json = nlohmann::json;

// Digits only: "32x32" and ratios must not accept trailing junk.
int64_t parse_dim(const std::string& s, const std::string& where) {
  if (s.empty() || s.size() > 9 ||
      !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; }) ||
      std::stoll(s) < 1)
    throw Error(where + ": block size '" + s + "' is not a positive integer");
  return std::stoll(s);
}

double parse_ratio(const std::string& s, const std::string& where) {
  size_t used = 0;
  double r = -1.0;
  try {
    r = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || !(r >= 0.0 && r <= 1.0))
    throw Error(where + ": ratio '" + s + "' is not a number in [0, 1]");
  return r;
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

SparsityAnnotation parse_entry(const Json& e, const std::string& where, const std::string& base,
                               const MaskLoader& load_mask) {
  if (!e.is_object()) throw Error(where + ": must be an object like {\"tensor\": \"w1\", ...}");
  for (const auto& item : e.items())
    if (item.key() != "tensor" && item.key() != "pruned" && item.key() != "bits")
      throw Error(where + ": unknown key '" + item.key() + "' (expected tensor, pruned, bits)");
  if (!e.contains("tensor") || !e["tensor"].is_string() || e["tensor"].get<std::string>().empty())
    throw Error(where + ": needs \"tensor\": the name of a weight");
  SparsityAnnotation a;
  a.tensor = e["tensor"].get<std::string>();
  a.source = where;
  if (e.contains("bits")) {
    if (!e["bits"].is_number_integer() || e["bits"].get<int64_t>() < 1 ||
        e["bits"].get<int64_t>() > 32)
      throw Error(where + ": \"bits\" must be an integer from 1 to 32");
    a.bit_width = static_cast<int32_t>(e["bits"].get<int64_t>());
  }
  if (!e.contains("pruned")) return a;
  if (!e["pruned"].is_string())
    throw Error(where +
                ": \"pruned\" must be a string: zeros, block:RxC:RATIO, "
                "magnitude:RATIO or mask:FILE.npy");
  const std::string p = e["pruned"].get<std::string>();
  if (p == "zeros") {
    a.pattern = SparsityAnnotation::Pattern::Zeros;
  } else if (p.rfind("block:", 0) == 0) {
    const std::string rest = p.substr(6);
    const size_t x = rest.find('x'), colon = rest.find(':');
    if (x == std::string::npos || colon == std::string::npos || colon < x)
      throw Error(where + ": pruned '" + p + "' is not block:RxC:RATIO (e.g. block:32x32:0.9)");
    a.pattern = SparsityAnnotation::Pattern::Block;
    a.block_rows = parse_dim(rest.substr(0, x), where);
    a.block_cols = parse_dim(rest.substr(x + 1, colon - x - 1), where);
    a.ratio = parse_ratio(rest.substr(colon + 1), where);
  } else if (p.rfind("magnitude:", 0) == 0) {
    a.pattern = SparsityAnnotation::Pattern::Magnitude;
    a.ratio = parse_ratio(p.substr(10), where);
  } else if (p.rfind("mask:", 0) == 0) {
    std::string file = p.substr(5);
    if (file.empty()) throw Error(where + ": pruned 'mask:' needs a .npy file name");
    if (file[0] != '/') file = base + file;
    a.pattern = SparsityAnnotation::Pattern::Mask;
    if (!load_mask) throw Error(where + ": cannot read mask files here");
    a.keep_mask = load_mask(file, &a.mask_shape);
  } else {
    throw Error(where + ": unknown pruned pattern '" + p +
                "' (expected zeros, block:RxC:RATIO, magnitude:RATIO or mask:FILE.npy)");
  }
  return a;
}

// The weight's 2-D view for block patterns: rows = dim 0 (output channels
// of a conv, K of a MatMul's B), columns = the rest.
void prune_blocks(std::vector<float>& w, const Shape& shape, const SparsityAnnotation& a) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t cols = rows == 0 ? 0 : shape_numel(shape) / rows;
  const int64_t br = (rows + a.block_rows - 1) / a.block_rows;
  const int64_t bc = (cols + a.block_cols - 1) / a.block_cols;
  std::vector<std::pair<double, int64_t>> norms;
  for (int64_t bi = 0; bi < br; ++bi)
    for (int64_t bj = 0; bj < bc; ++bj) {
      double l1 = 0.0;
      for (int64_t r = bi * a.block_rows; r < std::min(rows, (bi + 1) * a.block_rows); ++r)
        for (int64_t c = bj * a.block_cols; c < std::min(cols, (bj + 1) * a.block_cols); ++c)
          l1 += std::fabs(w[static_cast<size_t>(r * cols + c)]);
      norms.push_back({l1, bi * bc + bj});
    }
  const size_t pruned =
      static_cast<size_t>(std::llround(a.ratio * static_cast<double>(norms.size())));
  // Stable: ties keep the lower block index first, so the result is reproducible.
  std::stable_sort(norms.begin(), norms.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (size_t i = 0; i < pruned; ++i) {
    const int64_t bi = norms[i].second / bc, bj = norms[i].second % bc;
    for (int64_t r = bi * a.block_rows; r < std::min(rows, (bi + 1) * a.block_rows); ++r)
      for (int64_t c = bj * a.block_cols; c < std::min(cols, (bj + 1) * a.block_cols); ++c)
        w[static_cast<size_t>(r * cols + c)] = 0.0f;
  }
}

void prune_magnitude(std::vector<float>& w, double ratio) {
  std::vector<size_t> order(w.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return std::fabs(w[x]) < std::fabs(w[y]); });
  const size_t pruned = static_cast<size_t>(std::llround(ratio * static_cast<double>(w.size())));
  for (size_t i = 0; i < pruned; ++i) w[order[i]] = 0.0f;
}

}  // namespace

std::vector<SparsityAnnotation> parse_sparsity_json(const std::string& json_text,
                                                    const std::string& file_name,
                                                    const MaskLoader& load_mask) {
  Json doc;
  try {
    doc = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    // nlohmann's message already says where ("at line 3, column 5").
    std::string what = e.what();
    const size_t colon = what.find("] ");
    throw Error(file_name + ": not valid JSON: " +
                (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
  const Json* entries = &doc;
  if (doc.is_object()) {
    if (!doc.contains("tensors") || doc.size() != 1)
      throw Error(file_name + ": expected a list of entries or {\"tensors\": [...]}");
    entries = &doc["tensors"];
  }
  if (!entries->is_array())
    throw Error(file_name + ": expected a list of entries or {\"tensors\": [...]}");
  std::vector<SparsityAnnotation> out;
  for (size_t i = 0; i < entries->size(); ++i)
    out.push_back(parse_entry((*entries)[i], file_name + " entry " + std::to_string(i + 1),
                              directory_of(file_name), load_mask));
  return out;
}

std::vector<SparsityAnnotation> read_sparsity_file(const std::string& path,
                                                   const MaskLoader& load_mask) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the sparsity annotation file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sparsity_json(text.str(), path, load_mask);
}

void apply_sparsity_annotations(Graph& graph, const SparsityConfig& config) {
  for (const SparsityAnnotation& a : config.annotations) {
    const std::optional<int32_t> t = graph.find_tensor(a.tensor);
    if (!t) throw Error(a.source + ": the model has no tensor named '" + a.tensor + "'");
    TensorInfo& info = graph.tensors[static_cast<size_t>(*t)];
    if (!info.is_weight)
      throw Error(a.source + ": '" + a.tensor +
                  "' is an activation; only weights (initializers) can be pruned");
    switch (a.pattern) {
      case SparsityAnnotation::Pattern::Zeros:
        break;  // the weight's zeros are read by propagate_sparsity anyway
      case SparsityAnnotation::Pattern::Block:
        prune_blocks(info.weight, info.shape, a);
        break;
      case SparsityAnnotation::Pattern::Magnitude:
        prune_magnitude(info.weight, a.ratio);
        break;
      case SparsityAnnotation::Pattern::Mask:
        if (a.mask_shape != info.shape || a.keep_mask.size() != info.weight.size())
          throw Error(a.source + ": mask shape " + shape_to_string(a.mask_shape) +
                      " differs from '" + a.tensor + "' " + shape_to_string(info.shape));
        for (size_t e = 0; e < info.weight.size(); ++e)
          if (a.keep_mask[e] == 0.0f) info.weight[e] = 0.0f;
        break;
    }
  }
}

}  // namespace tessera::graph
