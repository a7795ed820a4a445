// Co-execution of two different models in one engine (ASPEN §5: DSEs do not
// know which model a node belongs to, so two models share one ready pool).
// For each executor it measures, in the same run and alternating rounds:
//   sequential: run A, then run B, `iterations` times;
//   concurrent: start A and B together (run_async) and wait for both, `iterations` times;
// and prints the throughput of each (model runs per second) and their ratio
// (concurrent / sequential: above 1 means co-execution pays).
//
//   bench_coexec A.tess B.tess [--threads N] [--iterations N] [--warmup N]
//                [--rounds N] [--executor dataflow|barrier|both]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

namespace {

struct Args {
  std::string model_a, model_b;
  int32_t threads = 0;
  int32_t iterations = 20;
  int32_t warmup = 3;
  int32_t rounds = 3;
  std::vector<std::string> executors{"dataflow", "barrier"};
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "error: %s\nusage: bench_coexec A.tess B.tess [--threads N] [--iterations N] "
               "[--warmup N] [--rounds N] [--executor dataflow|barrier|both]\n",
               why.c_str());
  std::exit(2);
}

int32_t positive(const char* text, const char* what, int32_t min) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > 1000000)
    usage(std::string(what) + " must be an integer >= " + std::to_string(min));
  return static_cast<int32_t>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--threads")
      a.threads = positive(value(), "--threads", 0);
    else if (arg == "--iterations")
      a.iterations = positive(value(), "--iterations", 1);
    else if (arg == "--warmup")
      a.warmup = positive(value(), "--warmup", 0);
    else if (arg == "--rounds")
      a.rounds = positive(value(), "--rounds", 1);
    else if (arg == "--executor") {
      const std::string e = value();
      if (e == "both")
        a.executors = {"dataflow", "barrier"};
      else if (e == "dataflow" || e == "barrier")
        a.executors = {e};
      else
        usage("--executor must be dataflow, barrier or both");
    } else if (!arg.empty() && arg[0] == '-')
      usage("unknown option " + arg);
    else
      positional.push_back(arg);
  }
  if (positional.size() != 2) usage("expected two .tess files");
  a.model_a = positional[0];
  a.model_b = positional[1];
  return a;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Seeded random data for every input of a model, and the views onto it.
struct ModelInputs {
  std::vector<std::vector<float>> data;
  tessera::Inputs views;
  explicit ModelInputs(const tessera::Model& model, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    data.reserve(model.inputs().size());
    for (const auto& spec : model.inputs()) {
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      data.emplace_back(static_cast<size_t>(n));
      for (float& v : data.back()) v = u(rng);
      views.emplace_back(spec.name, tessera::TensorView{data.back().data(), spec.shape});
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void require(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "error: %s\n", what.c_str());
    std::exit(1);
  }
}

struct Throughput {
  double sequential = 0, concurrent = 0;  // model runs per second (A and B each count once)
  double solo_a_ms = 0, solo_b_ms = 0;
};

Throughput measure(const Args& a, tessera::ExecutorKind kind) {
  tessera::Engine engine({.threads = a.threads, .executor = kind});
  require(engine.status().ok(), engine.status().ok() ? "" : engine.status().error());
  auto ma = engine.load(a.model_a);
  require(ma.ok(), ma.ok() ? "" : ma.error());
  auto mb = engine.load(a.model_b);
  require(mb.ok(), mb.ok() ? "" : mb.error());
  ModelInputs in_a(*ma, 1), in_b(*mb, 2);
  auto sa = ma->session(), sb = mb->session();
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  for (int32_t i = 0; i < a.warmup; ++i) {
    require(sa.run(in_a.views).ok(), "warm-up run of A failed");
    require(sb.run(in_b.views).ok(), "warm-up run of B failed");
  }
  std::vector<double> seq, conc, solo_a, solo_b;
  for (int32_t r = 0; r < a.rounds; ++r) {
    auto t0 = clock::now();
    for (int32_t i = 0; i < a.iterations; ++i) {
      auto t1 = clock::now();
      auto ra = sa.run(in_a.views);
      solo_a.push_back(seconds(t1) * 1e3);
      auto t2 = clock::now();
      auto rb = sb.run(in_b.views);
      solo_b.push_back(seconds(t2) * 1e3);
      require(ra.ok() && rb.ok(), "a sequential run failed");
    }
    seq.push_back(2.0 * a.iterations / seconds(t0));
    t0 = clock::now();
    for (int32_t i = 0; i < a.iterations; ++i) {
      auto ha = sa.run_async(in_a.views);
      auto hb = sb.run_async(in_b.views);
      require(ha.wait().ok() && hb.wait().ok(), "a concurrent run failed");
    }
    conc.push_back(2.0 * a.iterations / seconds(t0));
  }
  return Throughput{median(seq), median(conc), median(solo_a), median(solo_b)};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::printf("co-execution: A = %s, B = %s\n", a.model_a.c_str(), a.model_b.c_str());
  std::printf(
      "machine: %s, %u hardware threads; engine threads: %s; %d iterations x %d rounds "
      "(median), %d warm-up\n",
      cpu_name().c_str(), std::thread::hardware_concurrency(),
      a.threads ? std::to_string(a.threads).c_str() : "all cores", a.iterations, a.rounds,
      a.warmup);
  std::printf("%9s %9s %9s %14s %14s %17s\n", "executor", "A ms", "B ms", "sequential/s",
              "concurrent/s", "concurrent/seq");
  for (const auto& e : a.executors) {
    const auto kind =
        e == "barrier" ? tessera::ExecutorKind::Barrier : tessera::ExecutorKind::Dataflow;
    const Throughput t = measure(a, kind);
    std::printf("%9s %9.3f %9.3f %14.2f %14.2f %17.3f\n", e.c_str(), t.solo_a_ms, t.solo_b_ms,
                t.sequential, t.concurrent, t.concurrent / t.sequential);
  }
  return 0;
}
