#pragma once
// Internal: a loaded model ready to run — the verified tile graph, its nodes in
// CSR form for the scheduler, and each op's kernel and operand placement.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/tile_graph.hpp"
#include "kernels/tile_kernel.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/request.hpp"
#include "tessera/tessera.hpp"

namespace tessera::detail {

struct EngineState {
  explicit EngineState(const scheduler::ExecutorOptions& options) : executor(options) {}

  // Runs in flight; the engine waits for zero before stopping its workers.
  void begin_run() {
    std::lock_guard lock(mutex);
    ++in_flight;
  }
  void end_run() {
    std::lock_guard lock(mutex);
    if (--in_flight == 0) idle.notify_all();
  }
  void wait_idle() {
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return in_flight == 0; });
  }

  std::mutex mutex;
  std::condition_variable idle;
  int64_t in_flight = 0;
  // Declared last so it is destroyed first: its workers drain while the
  // members above are still alive.
  scheduler::Executor executor;
};

// Where one operand of an op lives: in the request's arena or in the weights.
struct OperandPlacement {
  const float* weight = nullptr;  // non-null for weights
  uint64_t arena_offset = 0;      // otherwise
  const graph::Shape* shape = nullptr;
};

struct OpBinding {
  kernels::TileKernel kernel = nullptr;
  uint32_t first_operand = 0;  // into ModelState::operands
  uint32_t operand_count = 0;
  uint64_t output_offset = 0;  // arena offset of the op's output
  const graph::Shape* output_shape = nullptr;
};

struct ModelState {
  std::string path;
  graph::TileGraph graph;
  std::weak_ptr<EngineState> engine;

  // Scheduler view (CSR) of graph.nodes.
  std::vector<int32_t> parent_counts, child_offsets, children, depths, sources;
  scheduler::GraphView view;

  std::vector<OperandPlacement> operands;
  std::vector<OpBinding> ops;
  std::vector<TensorSpec> input_specs, output_specs;
};

// Builds the runnable state from a verified tile graph; throws tessera::Error
// when an op asks for a kernel this build lacks.
std::shared_ptr<ModelState> make_model_state(std::string path, graph::TileGraph graph,
                                             std::weak_ptr<EngineState> engine);

}  // namespace tessera::detail
