#pragma once
// Internal: one run of a model — its activation arena, the scheduler's
// per-request counters, and the promise its caller waits on.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/model_state.hpp"

namespace tessera::detail {

struct RunState {
  std::mutex mutex;
  std::condition_variable done;
  std::optional<Result<Outputs>> result;
  std::function<void(const Result<Outputs>&)> on_done;

  void finish(Result<Outputs> r);
  // Waits for the result and moves it out, for Session::run: its state has
  // no callback and no handle, so nobody else reads the result, and a copy
  // of large outputs (GPT-2's logits: 206 MB) would cost a fresh allocation,
  // its page faults and a memcpy.
  Result<Outputs> wait_and_take();
};

// Checks `inputs` against the model and starts a run on the engine. Never
// throws; a bad input finishes the returned state with an error at once.
std::shared_ptr<RunState> start_run(const std::shared_ptr<ModelState>& model, const Inputs& inputs,
                                    const RunOptions& options,
                                    std::function<void(const Result<Outputs>&)> on_done);

}  // namespace tessera::detail
