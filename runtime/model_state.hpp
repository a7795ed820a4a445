#pragma once
// Internal: a loaded model ready to run — the verified tile graph, its nodes in
// CSR form for the scheduler, and each op's kernel and operand placement.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/tile_graph.hpp"
#include "kernels/tile_kernel.hpp"
#include "scheduler/barrier_executor.hpp"
#include "scheduler/executor.hpp"
#include "scheduler/request.hpp"
#include "tessera/tessera.hpp"

namespace tessera::detail {

struct ModelState;

struct EngineState {
  // Starts the executor the options ask for. A failure (a core the process
  // may not use, threads that cannot start) is kept in start_error, not thrown.
  explicit EngineState(const EngineOptions& options);

  // Hands a request to the executor; throws only std::bad_alloc.
  void submit(scheduler::Request& request, const ModelState& model);
  int32_t thread_count() const;

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
  ExecutorKind kind;
  std::optional<std::string> start_error;
  // Declared last so they are destroyed first: their workers drain while the
  // members above are still alive. Exactly one is set unless start_error is.
  std::unique_ptr<scheduler::BarrierExecutor> barrier;
  std::unique_ptr<scheduler::Executor> dataflow;
};

// Where one operand of an op lives: in the request's arena or in the weights.
struct OperandPlacement {
  const float* weight = nullptr;  // non-null for weights
  uint64_t arena_offset = 0;      // otherwise
  int32_t tensor = -1;            // the graph tensor
  const graph::Shape* shape = nullptr;
  graph::Layout layout = graph::Layout::NCHW;
};

struct OpBinding {
  kernels::TileKernel kernel = nullptr;
  kernels::PreparedOp prepared;  // the variant's per-op state (packed weights), if any
  uint32_t first_operand = 0;    // into ModelState::operands
  uint32_t operand_count = 0;
  uint64_t output_offset = 0;  // arena offset of the op's output
  const graph::Shape* output_shape = nullptr;
  graph::Layout output_layout = graph::Layout::NCHW;
};

// Activation arenas reused across the runs of one model. A fresh allocation
// of megabytes is fresh pages from the OS: every run would pay a page fault
// and a page clear on first touch of each (7% of MobileNetV2's run time in
// perf). A run takes an arena and gives it back when it completes; up to
// kKeepIdle idle arenas stay allocated (the peak number of concurrent runs
// beyond that allocates and frees).
class ArenaPool {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kKeepIdle = 8;
  struct Deleter {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(kAlignment)); }
  };
  using Arena = std::unique_ptr<std::byte[], Deleter>;

  // An arena of at least `bytes` (its contents are whatever a previous run
  // left: the memory plan never reads before it writes). Throws std::bad_alloc.
  Arena take(uint64_t bytes) {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        Arena arena = std::move(idle_.back());
        idle_.pop_back();
        return arena;
      }
    }
    return Arena(static_cast<std::byte*>(
        ::operator new[](std::max<uint64_t>(bytes, kAlignment), std::align_val_t(kAlignment))));
  }
  void give_back(Arena arena) noexcept {
    if (!arena) return;
    std::lock_guard lock(mutex_);
    if (idle_.size() < kKeepIdle) {
      try {
        idle_.push_back(std::move(arena));
      } catch (...) {  // no room to keep it: it is freed
      }
    }
  }

 private:
  std::mutex mutex_;
  std::vector<Arena> idle_;
};

struct ModelState {
  std::string path;
  graph::TileGraph graph;
  std::weak_ptr<EngineState> engine;

  // Scheduler view (CSR) of graph.nodes.
  std::vector<int32_t> parent_counts, child_offsets, children, depths, sources, main_parents;
  std::vector<uint8_t> walk_into;
  std::vector<uint8_t> shared_when_ready;
  scheduler::GraphView view;

  std::vector<OperandPlacement> operands;
  // Per model input: whether its operands may read the caller's data in
  // place (Inputs are borrowed until the run finishes, tensor.hpp) instead
  // of a copy in the arena: not where the input is also a model output,
  // which on_complete() copies out of the arena.
  std::vector<bool> input_read_in_place;
  std::vector<OpBinding> ops;
  std::vector<TensorSpec> input_specs, output_specs;

  // For the barrier executor: op o's nodes are [op_first_node[o],
  // op_first_node[o + 1]), one stage each. Our tiler numbers nodes op by op;
  // a file that does not is refused by a barrier engine with this error.
  std::vector<int32_t> op_first_node;
  std::optional<std::string> op_stage_error;

  // Every run's arena is graph.arena_bytes.
  ArenaPool arenas;
};

// Builds the runnable state from a verified tile graph; throws tessera::Error
// when an op asks for a kernel this build lacks.
std::shared_ptr<ModelState> make_model_state(std::string path, graph::TileGraph graph,
                                             std::weak_ptr<EngineState> engine);

}  // namespace tessera::detail
