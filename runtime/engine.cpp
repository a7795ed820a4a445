// The public API (tessera/tessera.hpp) over the internal model and run state.
#include <exception>

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
  return run_async(inputs).wait();
}

RunHandle Session::run_async(const Inputs& inputs,
                             std::function<void(const Result<Outputs>&)> on_done) {
  RunHandle handle;
  handle.state_ = detail::start_run(model_, inputs, std::move(on_done));
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

Engine::Engine(const EngineOptions& options)
    : state_(std::make_shared<detail::EngineState>(scheduler::ExecutorOptions{options.threads})) {}

Engine::~Engine() {
  // Models may outlive the engine; their runs must not outlive its workers.
  state_->wait_idle();
}

int32_t Engine::threads() const {
  return state_->executor.thread_count();
}

Result<Model> Engine::load(const std::string& path) {
  try {
    Model model;
    model.state_ = detail::make_model_state(path, serialization::read_tess_file(path), state_);
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
