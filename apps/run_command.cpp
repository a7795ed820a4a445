// `tessera run MODEL.tess`: run a compiled model through the public API and
// report latency statistics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/format.hpp"
#include "apps/npy.hpp"
#include "apps/random_inputs.hpp"
#include "graph/error.hpp"
#include "tessera/tessera.hpp"

namespace tessera::apps {

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string output_dir;
  int32_t threads = 0;
  int32_t iterations = 10;
  int32_t warmup = 2;
  uint64_t seed = 0;
  bool json = false;
  bool profile = false;
  std::string trace;  // Chrome trace file of the last timed run
  std::string executor = "dataflow";
};

// The last timed run's tile kernels as a Chrome trace (chrome://tracing,
// Perfetto): one row per CPU, one box per tile.
void write_trace(const std::string& path, const std::vector<TileEvent>& events) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw Error("cannot write the trace to '" + path + "'");
  std::fprintf(file, "{\"traceEvents\": [");
  for (size_t i = 0; i < events.size(); ++i) {
    const TileEvent& e = events[i];
    std::fprintf(file,
                 "%s\n{\"name\": %s, \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                 "\"dur\": %.3f, \"args\": {\"node\": %d}}",
                 i ? "," : "", json_string(e.op).c_str(), e.cpu, e.start_us, e.duration_us, e.node);
  }
  std::fprintf(file, "\n]}\n");
  if (std::fclose(file) != 0) throw Error("cannot write the trace to '" + path + "'");
}

// How busy each CPU was between the first tile's start and the last one's end.
void print_trace_summary(const std::vector<TileEvent>& events, const std::string& path) {
  if (events.empty()) return;
  double first = events[0].start_us, last = 0;
  std::vector<std::pair<int32_t, double>> busy;  // (cpu, us)
  for (const TileEvent& e : events) {
    first = std::min(first, e.start_us);
    last = std::max(last, e.start_us + e.duration_us);
    auto it =
        std::find_if(busy.begin(), busy.end(), [&](const auto& b) { return b.first == e.cpu; });
    if (it == busy.end()) it = busy.insert(busy.end(), {e.cpu, 0.0});
    it->second += e.duration_us;
  }
  std::sort(busy.begin(), busy.end());
  std::printf("  trace: %zu tiles over %.3f ms -> %s; busy in tile kernels:", events.size(),
              (last - first) / 1e3, path.c_str());
  for (const auto& [cpu, us] : busy)
    std::printf(" cpu %d %.0f%%", cpu, 100.0 * us / (last - first));
  std::printf("\n");
}

// Adds one run's per-operator kernel times to `totals` (same operators, same order).
void accumulate_profile(const std::vector<OpProfile>& run, std::vector<OpProfile>& totals) {
  if (totals.empty()) {
    totals = run;
    return;
  }
  for (size_t i = 0; i < run.size() && i < totals.size(); ++i)
    totals[i].kernel_ms += run[i].kernel_ms;
}

// The profile table: per (type, kernel) first, then every operator, slowest first.
void print_profile(const std::vector<OpProfile>& ops, double latency_ms, int32_t threads) {
  double total = 0;
  for (const OpProfile& op : ops) total += op.kernel_ms;
  std::printf(
      "  profile: %.3f ms per run in tile kernels, summed over %zu operators and %d threads "
      "(latency x threads = %.3f ms; the rest is scheduling, waiting and profiling)\n",
      total, ops.size(), threads, latency_ms * threads);
  struct Group {
    std::string type, kernel;
    int32_t ops = 0;
    double ms = 0;
  };
  std::vector<Group> groups;
  for (const OpProfile& op : ops) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
      return x.type == op.type && x.kernel == op.kernel;
    });
    if (g == groups.end()) g = groups.insert(groups.end(), Group{op.type, op.kernel});
    ++g->ops;
    g->ms += op.kernel_ms;
  }
  std::sort(groups.begin(), groups.end(),
            [](const Group& a, const Group& b) { return a.ms > b.ms; });
  std::printf("  %-22s %-26s %5s %10s %6s\n", "type", "kernel", "ops", "ms/run", "%");
  for (const Group& g : groups)
    std::printf("  %-22s %-26s %5d %10.3f %6.1f\n", g.type.c_str(), g.kernel.c_str(), g.ops, g.ms,
                total > 0 ? 100 * g.ms / total : 0.0);
  std::vector<const OpProfile*> sorted;
  for (const OpProfile& op : ops) sorted.push_back(&op);
  std::stable_sort(sorted.begin(), sorted.end(), [](const OpProfile* a, const OpProfile* b) {
    return a->kernel_ms > b->kernel_ms;
  });
  std::printf("  %-40s %-20s %-22s %5s %10s %6s\n", "operator", "type", "kernel", "tiles", "ms/run",
              "%");
  for (const OpProfile* op : sorted)
    std::printf("  %-40s %-20s %-22s %5d %10.3f %6.1f\n", op->name.c_str(), op->type.c_str(),
                op->kernel.c_str(), op->tiles, op->kernel_ms,
                total > 0 ? 100 * op->kernel_ms / total : 0.0);
}

std::string profile_json(const std::vector<OpProfile>& ops) {
  std::string j = "[";
  for (size_t i = 0; i < ops.size(); ++i)
    j += std::string(i ? ", " : "") + "{\"name\": " + json_string(ops[i].name) +
         ", \"type\": " + json_string(ops[i].type) + ", \"kernel\": " + json_string(ops[i].kernel) +
         ", \"tiles\": " + std::to_string(ops[i].tiles) +
         ", \"kernel_ms\": " + json_number(ops[i].kernel_ms) + "}";
  return j + "]";
}

struct LatencyStats {
  double min = 0, median = 0, p90 = 0, mean = 0;
};

LatencyStats summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  LatencyStats s;
  if (ms.empty()) return s;
  s.min = ms.front();
  s.median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  s.p90 = ms[std::min(ms.size() - 1, static_cast<size_t>(std::ceil(0.9 * ms.size())) - 1)];
  for (double v : ms) s.mean += v;
  s.mean /= static_cast<double>(ms.size());
  return s;
}

// Output file names: every character outside [A-Za-z0-9_.-] becomes '_'.
std::string file_name_for(const std::string& tensor_name) {
  std::string out = tensor_name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

// Reads --input NAME=FILE pairs; model inputs not named get seeded random data.
std::vector<NpyArray> gather_inputs(const RunArgs& a, const Model& model, Inputs& inputs) {
  std::vector<NpyArray> arrays;
  arrays.reserve(a.inputs.size() + model.inputs().size());
  std::vector<std::string> given;
  for (const auto& spec : a.inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw Error("--input '" + spec + "' should be NAME=FILE.npy");
    const std::string name = spec.substr(0, eq);
    try {
      arrays.push_back(read_npy(spec.substr(eq + 1)));
    } catch (const Error& e) {
      throw Error("input '" + name + "': " + e.what());
    }
    inputs.emplace_back(
        name, TensorView{arrays.back().bytes(), arrays.back().shape, arrays.back().dtype});
    given.push_back(name);
  }
  if (!a.inputs.empty()) return arrays;  // explicit inputs: the session checks them all
  return random_inputs(model, a.seed, inputs);
}

struct OutputSummary {
  std::string file;
  double min = 0, max = 0, mean = 0;
};

OutputSummary summarise_output(const Tensor& t) {
  OutputSummary s;
  if (t.data.empty()) return s;
  s.min = s.max = t.data[0];
  double sum = 0;
  for (float v : t.data) {
    s.min = std::min<double>(s.min, v);
    s.max = std::max<double>(s.max, v);
    sum += v;
  }
  s.mean = sum / static_cast<double>(t.data.size());
  return s;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Run a compiled .tess model and time it");
  sub->add_option("model", args->model, ".tess model file")->required();
  sub->add_option(
      "--input", args->inputs,
      "NAME=FILE.npy (float32, or int64 for index inputs); random data when none given");
  sub->add_option("--output-dir", args->output_dir, "Write each output as DIR/NAME.npy");
  sub->add_option("--threads", args->threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--iterations", args->iterations, "Timed runs")->check(CLI::Range(1, 1000000));
  sub->add_option("--warmup", args->warmup, "Untimed runs first")->check(CLI::Range(0, 1000000));
  sub->add_option("--seed", args->seed, "Seed of the random inputs");
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_flag("--profile", args->profile,
                "Time each operator's tile kernels (mean over the timed runs) and print them, "
                "slowest first; adds two clock reads per tile to the latency");
  sub->add_option("--trace", args->trace,
                  "Write when and on which CPU each tile ran, in the last timed run, as a Chrome "
                  "trace (chrome://tracing, ui.perfetto.dev) to FILE.json");
  sub->add_option("--executor", args->executor,
                  "dataflow: barrier-free tile scheduling (default); barrier: one operator at a "
                  "time with a barrier after each (the operator-based baseline)")
      ->check(CLI::IsMember({"dataflow", "barrier"}));
  return [args] {
    Engine engine(
        {.threads = args->threads,
         .executor = args->executor == "barrier" ? ExecutorKind::Barrier : ExecutorKind::Dataflow});
    if (Status s = engine.status(); !s) throw Error(s.error());
    auto model = engine.load(args->model);
    if (!model) throw Error(model.error());
    Inputs inputs;
    const auto arrays = gather_inputs(*args, *model, inputs);
    Session session = model->session();

    std::vector<double> ms;
    Outputs outputs;                 // the last run's; each run reuses the one before's storage
    std::vector<OpProfile> profile;  // summed over the timed runs
    for (int32_t i = 0; i < args->warmup + args->iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const bool trace = !args->trace.empty() && i + 1 == args->warmup + args->iterations;
      auto result = session.run(
          inputs, RunOptions{.profile = args->profile, .trace = trace, .reuse_outputs = &outputs});
      const auto stop = std::chrono::steady_clock::now();
      if (!result) throw Error(result.error());
      if (i >= args->warmup) {
        ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
        accumulate_profile(result.value().profile, profile);
      }
      outputs = std::move(result).value();
    }
    for (OpProfile& op : profile) op.kernel_ms /= args->iterations;
    std::vector<OutputSummary> summaries;
    if (!args->output_dir.empty()) std::filesystem::create_directories(args->output_dir);
    for (const auto& t : outputs.tensors) {
      OutputSummary s = summarise_output(t);
      if (!args->output_dir.empty()) {
        s.file =
            (std::filesystem::path(args->output_dir) / (file_name_for(t.name) + ".npy")).string();
        write_npy(s.file, t.shape, t.data.data());
      }
      summaries.push_back(s);
    }
    const LatencyStats lat = summarise(ms);
    if (!args->trace.empty()) write_trace(args->trace, outputs.trace);
    if (args->json) {
      std::string j =
          "{\"model\": " + json_string(args->model) +
          ", \"executor\": " + json_string(args->executor) +
          ", \"threads\": " + std::to_string(engine.threads()) +
          ", \"iterations\": " + std::to_string(args->iterations) +
          ", \"warmup\": " + std::to_string(args->warmup) +
          ", \"latency_ms\": {\"min\": " + json_number(lat.min) +
          ", \"median\": " + json_number(lat.median) + ", \"p90\": " + json_number(lat.p90) +
          ", \"mean\": " + json_number(lat.mean) + "}, " +
          (args->profile ? "\"profile\": " + profile_json(profile) + ", " : "") + "\"outputs\": [";
      for (size_t i = 0; i < outputs.tensors.size(); ++i) {
        const auto& t = outputs.tensors[i];
        const auto& s = summaries[i];
        j += std::string(i ? ", " : "") + "{\"name\": " + json_string(t.name) +
             ", \"shape\": " + json_dims(t.shape) + ", \"min\": " + json_number(s.min) +
             ", \"max\": " + json_number(s.max) + ", \"mean\": " + json_number(s.mean) +
             ", \"file\": " + (s.file.empty() ? std::string("null") : json_string(s.file)) + "}";
      }
      std::printf("%s]}\n", j.c_str());
      return 0;
    }
    std::printf("tessera run: %s on %d threads (%s executor), %d iterations (%d warm-up)\n",
                args->model.c_str(), engine.threads(), args->executor.c_str(), args->iterations,
                args->warmup);
    std::printf("  latency ms: min %.3f  median %.3f  p90 %.3f  mean %.3f\n", lat.min, lat.median,
                lat.p90, lat.mean);
    for (size_t i = 0; i < outputs.tensors.size(); ++i) {
      const auto& t = outputs.tensors[i];
      const auto& s = summaries[i];
      std::printf("  output %s %s: min %.6g max %.6g mean %.6g%s%s\n", t.name.c_str(),
                  json_dims(t.shape).c_str(), s.min, s.max, s.mean, s.file.empty() ? "" : " -> ",
                  s.file.c_str());
    }
    if (args->profile) print_profile(profile, lat.median, engine.threads());
    if (!args->trace.empty()) print_trace_summary(outputs.trace, args->trace);
    return 0;
  };
}

}  // namespace tessera::apps
