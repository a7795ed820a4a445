// The public API (tessera/tessera.hpp) over the internal model and run state.
#include <exception>
#include <string>

#include "graph/error.hpp"
#include "runtime/model_state.hpp"
#include "runtime/run_request.hpp"
#include "serialization/tess/tess_reader.hpp"

namespace tessera {

bool RunHandle::ready() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->result.has_value();
}

Result<Outputs> RunHandle::wait() const {
  if (!state_) return ErrorInfo{"RunHandle does not refer to a run"};
  std::unique_lock lock(state_->mutex);
  state_->done.wait(lock, [&] { return state_->result.has_value(); });
  return *state_->result;
}

Result<Outputs> Session::run(const Inputs& inputs) {
  return run(inputs, RunOptions{});
}

Result<Outputs> Session::run(const Inputs& inputs, const RunOptions& options) {
  return detail::start_run(model_, inputs, options, {})->wait_and_take();
}

RunHandle Session::run_async(const Inputs& inputs,
                             std::function<void(const Result<Outputs>&)> on_done) {
  return run_async(inputs, RunOptions{}, std::move(on_done));
}

RunHandle Session::run_async(const Inputs& inputs, const RunOptions& options,
                             std::function<void(const Result<Outputs>&)> on_done) {
  RunHandle handle;
  handle.state_ = detail::start_run(model_, inputs, options, std::move(on_done));
  return handle;
}

Session Model::session() const {
  Session s;
  s.model_ = state_;
  return s;
}

const std::vector<TensorSpec>& Model::inputs() const {
  return state_->input_specs;
}
const std::vector<TensorSpec>& Model::outputs() const {
  return state_->output_specs;
}
const std::string& Model::path() const {
  return state_->path;
}

namespace {

constexpr const char* kNoEngineState = "the engine could not start: out of memory";

// Adding and removing workers at run time is the dataflow executor's
// (scheduler/executor.hpp, ASPEN §5); the barrier baseline's oneTBB arena has
// a fixed size.
Status resize_workers(scheduler::Executor* executor, int32_t count, bool add) {
  if (executor == nullptr)
    return ErrorInfo{"adding or removing threads is not supported by the barrier executor"};
  if (count < 0) return ErrorInfo{"thread count to add or remove must not be negative"};
  try {
    const int32_t before = executor->thread_count();
    if (add) {
      const int32_t after = executor->add_workers(count);
      if (after < before + count)
        return ErrorInfo{"only " + std::to_string(after - before) + " of " + std::to_string(count) +
                         " threads could be added; the engine's limit is " +
                         std::to_string(executor->max_thread_count())};
    } else {
      const int32_t after = executor->remove_workers(count);
      if (after > before - count)
        return ErrorInfo{"only " + std::to_string(before - after) + " of " + std::to_string(count) +
                         " threads could be removed; one always stays"};
    }
  } catch (const std::exception& e) {
    // remove_workers refuses to run on one of the engine's own threads.
    return ErrorInfo{std::string(add ? "adding" : "removing") + " threads failed: " + e.what()};
  }
  return {};
}

}  // namespace

Engine::Engine(const EngineOptions& options) {
  try {
    state_ = std::make_shared<detail::EngineState>(options);
  } catch (const std::bad_alloc&) {
    state_.reset();  // status() and load() report it
  }
}

Engine::~Engine() {
  // Models may outlive the engine; their runs must not outlive its workers.
  if (state_) state_->wait_idle();
}

Status Engine::status() const {
  if (!state_) return ErrorInfo{kNoEngineState};
  if (state_->start_error) return ErrorInfo{*state_->start_error};
  return {};
}

int32_t Engine::threads() const {
  return state_ ? state_->thread_count() : 0;
}

ExecutorKind Engine::executor() const {
  return state_ ? state_->kind : ExecutorKind::Dataflow;
}

Status Engine::add_threads(int32_t count) {
  if (Status s = status(); !s) return s;
  return resize_workers(state_->dataflow.get(), count, true);
}

Status Engine::remove_threads(int32_t count) {
  if (Status s = status(); !s) return s;
  return resize_workers(state_->dataflow.get(), count, false);
}

Result<Model> Engine::load(const std::string& path) {
  if (Status s = status(); !s) return ErrorInfo{path + ": " + s.error()};
  try {
    Model model;
    model.state_ = detail::make_model_state(path, serialization::read_tess_file(path), state_);
    if (state_->kind == ExecutorKind::Barrier && model.state_->op_stage_error)
      return ErrorInfo{path + ": " + *model.state_->op_stage_error};
    return model;
  } catch (const Error& e) {
    return ErrorInfo{e.what()};
  } catch (const std::bad_alloc&) {
    return ErrorInfo{path + ": out of memory while loading"};
  } catch (const std::exception& e) {
    return ErrorInfo{path + ": " + e.what()};
  }
}

}  // namespace tessera
