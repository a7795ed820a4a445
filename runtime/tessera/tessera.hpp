#pragma once
// Tessera's embedded C++ API.
//
//   #include <tessera/tessera.hpp>
//   tessera::Engine engine({.threads = 0});             // 0: every core
//   auto model = engine.load("model.tess");              // Result<Model>
//   if (!model) { std::cerr << model.error() << "\n"; return 1; }
//   tessera::Session session = model->session();
//   auto out = session.run({{"input", {data, {1, 3, 32, 32}}}});  // Result<Outputs>
//   auto pending = session.run_async({{"input", view}});  // co-executes with others
//   auto later = pending.wait();
//   auto urgent = session.run(inputs, {.priority = 5});   // runs before priority-0 work
//
//   // The operator-with-barriers baseline on the same kernels, for comparison:
//   tessera::Engine baseline({.threads = 4, .executor = tessera::ExecutorKind::Barrier});
//
// Nothing here throws; every failure comes back as an error message.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/result.hpp"
#include "tessera/tensor.hpp"

namespace tessera {

namespace detail {
struct EngineState;
struct ModelState;
struct RunState;
}  // namespace detail

using Inputs = std::vector<std::pair<std::string, TensorView>>;

// One operator's share of a profiled run (RunOptions::profile).
struct OpProfile {
  std::string name;    // the operator's name (the ONNX node's)
  std::string type;    // its operator type, e.g. "Conv"
  std::string kernel;  // the tile kernel it ran, e.g. "cpu.conv_gemm"
  int32_t tiles = 0;
  // Time inside its tile kernels, summed over its tiles and the threads that
  // ran them; the scheduler's own time is not in any operator.
  double kernel_ms = 0;
};

// One tile kernel call of a traced run (RunOptions::trace).
struct TileEvent {
  std::string op;       // the operator's name
  int32_t node = 0;     // the tile node (TileGraph numbering, as `tessera inspect` counts them)
  int32_t cpu = -1;     // the OS CPU it ran on (-1: unknown)
  double start_us = 0;  // from the start of the run
  double duration_us = 0;
};

struct Outputs {
  std::vector<Tensor> tensors;  // in the model's output order
  // One entry per operator, in the model's order, when RunOptions::profile
  // was set; empty otherwise.
  std::vector<OpProfile> profile;
  // One entry per tile node, in node order, when RunOptions::trace was set.
  std::vector<TileEvent> trace;
  const Tensor* find(const std::string& name) const {
    for (const Tensor& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

// Per-run choices.
struct RunOptions {
  // Larger runs first: the dataflow executor prefers its nodes in the ready
  // pool; the barrier executor starts it before queued runs of lower priority.
  int32_t priority = 0;
  // Time every tile kernel call and report it per operator (Outputs::profile).
  // Costs two clock reads per tile.
  bool profile = false;
  // Record when and on which CPU every tile kernel ran (Outputs::trace), to
  // see how the scheduler spread the graph over the cores. Costs two clock
  // reads and a CPU lookup per tile.
  bool trace = false;
  // The Outputs of an earlier run, whose tensors' storage this run takes
  // over (it is left empty when the run starts) and writes its outputs
  // into, where large enough. A caller running a model in a loop then does
  // not allocate and first-touch every output again: GPT-2's 206 MB of
  // logits cost about 120 ms a run that way on a 2-core VM. Null: new storage.
  Outputs* reuse_outputs = nullptr;
};

// A run started with Session::run_async. Copyable; all copies see the same run.
class RunHandle {
 public:
  RunHandle() = default;
  bool valid() const { return state_ != nullptr; }
  bool ready() const;            // true once the run has finished (or failed to start)
  Result<Outputs> wait() const;  // blocks until finished; may be called repeatedly

 private:
  friend class Session;
  std::shared_ptr<detail::RunState> state_;
};

class Session {
 public:
  // Runs the model once on `inputs` (every model input, by name) and waits.
  Result<Outputs> run(const Inputs& inputs);
  Result<Outputs> run(const Inputs& inputs, const RunOptions& options);
  // Starts a run and returns at once. `on_done`, if given, is called with the
  // result on the thread that finished the run (keep it short, and do not wait
  // for another run there); the data of `inputs` must stay valid until then.
  RunHandle run_async(const Inputs& inputs,
                      std::function<void(const Result<Outputs>&)> on_done = {});
  RunHandle run_async(const Inputs& inputs, const RunOptions& options,
                      std::function<void(const Result<Outputs>&)> on_done = {});

 private:
  friend class Model;
  std::shared_ptr<detail::ModelState> model_;
};

class Model {
 public:
  Session session() const;
  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  const std::string& path() const;

 private:
  friend class Engine;
  std::shared_ptr<detail::ModelState> state_;
};

// How an engine runs a tile graph.
enum class ExecutorKind {
  // Barrier-free: one scheduler per thread walks the tile graph (ASPEN
  // Algorithm 1); runs of any models co-execute.
  Dataflow,
  // The operator-based baseline: one operator at a time, its tiles in a oneTBB
  // parallel_for, a barrier after each; runs execute one after the other.
  Barrier,
};

struct EngineOptions {
  int32_t threads = 0;  // worker threads; 0: one per core this process may use
  ExecutorKind executor = ExecutorKind::Dataflow;
  std::vector<int32_t> cores = {};  // when not empty, the threads run only on these CPUs
};

// Owns the worker threads. Models loaded from it run on its threads; the
// engine waits for their in-flight runs when destroyed.
class Engine {
 public:
  // Never throws: when the options cannot be honoured (a core the process may
  // not use, threads that cannot start) status() says why and load() fails.
  explicit Engine(const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Status status() const;
  // Loads and verifies a `.tess` file.
  Result<Model> load(const std::string& path);
  int32_t threads() const;  // 0 when the engine failed to start
  ExecutorKind executor() const;

  // Adds or removes worker threads while runs go on (ASPEN §5); the dataflow
  // executor only.
  Status add_threads(int32_t count);
  Status remove_threads(int32_t count);

 private:
  std::shared_ptr<detail::EngineState> state_;
};

}  // namespace tessera
