#include "runtime/run_request.hpp"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "graph/op_type.hpp"
#include "graph/shape.hpp"

namespace tessera::detail {

namespace {

class RunRequest final : public scheduler::Request {
 public:
  // The engine is held by pointer: Engine's destructor waits for every run
  // (EngineState::wait_idle), so it outlives this request.
  RunRequest(std::shared_ptr<ModelState> model, EngineState* engine, std::shared_ptr<RunState> run,
             const RunOptions& options)
      : scheduler::Request(model->view, options.priority),
        model_(std::move(model)),
        engine_(engine),
        run_(std::move(run)),
        arena_(model_->arenas.take(model_->graph.arena_bytes)),
        op_ns_(options.profile ? std::make_unique<std::atomic<int64_t>[]>(model_->graph.ops.size())
                               : nullptr),
        trace_(options.trace ? std::make_unique<RawTileEvent[]>(model_->graph.nodes.size())
                             : nullptr),
        start_(std::chrono::steady_clock::now()) {
    if (options.reuse_outputs) {
      recycled_ = std::move(options.reuse_outputs->tensors);
      options.reuse_outputs->tensors.clear();  // moved-from: make "left empty" certain
      options.reuse_outputs->profile.clear();
      options.reuse_outputs->trace.clear();
    }
    // Operand views are fixed for the whole run: resolve them once, not per node.
    views_.reserve(model_->operands.size());
    for (const auto& p : model_->operands) {
      const float* data =
          p.weight ? p.weight : reinterpret_cast<const float*>(arena_.get() + p.arena_offset);
      views_.push_back(kernels::ConstTensorView{data, p.shape, p.layout});
    }
  }

  // Model input i: read in place where the model allows it and the data is
  // aligned for its element type (kernels read activations with unaligned
  // vector loads but typed scalar ones), else copied into the arena. A
  // 224x224 image is 600 KB: the copy was about 25 us of each run.
  void bind_input(size_t i, const void* data) {
    const int32_t index = model_->graph.inputs[i];
    const graph::CompiledTensor& t = model_->graph.tensors[static_cast<size_t>(index)];
    const auto element = static_cast<uintptr_t>(graph::dtype_size(t.dtype));
    if (model_->input_read_in_place[i] && reinterpret_cast<uintptr_t>(data) % element == 0) {
      for (size_t k = 0; k < views_.size(); ++k)
        if (model_->operands[k].tensor == index) views_[k].data = static_cast<const float*>(data);
      return;
    }
    std::memcpy(arena_.get() + t.arena_offset, data, static_cast<size_t>(t.byte_size()));
  }

  void execute_node(int32_t node) noexcept override {
    const graph::TileNode& n = model_->graph.nodes[node];
    const OpBinding& b = model_->ops[n.op];
    kernels::TileArgs args;
    args.op = &model_->graph.ops[n.op];
    args.inputs = views_.data() + b.first_operand;
    args.input_count = b.operand_count;
    args.output = kernels::TensorView{reinterpret_cast<float*>(arena_.get() + b.output_offset),
                                      b.output_shape, b.output_layout};
    args.region = &n.region;
    args.prepared = b.prepared.get();
    // Kernels check their arguments and throw on a call the verifier should
    // have made impossible; the run then fails with that message instead of
    // taking the process down. Later nodes still run (on stale data) so that
    // the request completes and its memory is released.
    try {
      if (op_ns_ || trace_) [[unlikely]] {
        const auto start = std::chrono::steady_clock::now();
        b.kernel(args);
        const auto stop = std::chrono::steady_clock::now();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count();
        if (op_ns_) op_ns_[static_cast<size_t>(n.op)].fetch_add(ns, std::memory_order_relaxed);
        // Each node runs once: its slot has one writer, read in on_complete().
        if (trace_)
          trace_[static_cast<size_t>(node)] = {start - start_, stop - start, sched_getcpu()};
      } else {
        b.kernel(args);
      }
    } catch (const std::exception& e) {
      record_failure(e.what());
    }
  }

  // Outputs::profile from the per-operator kernel times.
  std::vector<OpProfile> profile() const {
    std::vector<OpProfile> ops;
    const auto& graph = model_->graph;
    ops.resize(graph.ops.size());
    for (size_t i = 0; i < graph.ops.size(); ++i) {
      ops[i].name = graph.ops[i].name;
      ops[i].type = std::string(graph::op_type_name(graph.ops[i].type));
      ops[i].kernel = graph.ops[i].kernel;
      ops[i].kernel_ms = static_cast<double>(op_ns_[i].load(std::memory_order_relaxed)) * 1e-6;
    }
    for (const graph::TileNode& node : graph.nodes) ++ops[static_cast<size_t>(node.op)].tiles;
    return ops;
  }

  std::vector<TileEvent> trace() const {
    std::vector<TileEvent> events(model_->graph.nodes.size());
    for (size_t i = 0; i < events.size(); ++i) {
      const RawTileEvent& raw = trace_[i];
      TileEvent& event = events[i];
      event.op = model_->graph.ops[static_cast<size_t>(model_->graph.nodes[i].op)].name;
      event.node = static_cast<int32_t>(i);
      event.cpu = raw.cpu;
      event.start_us = std::chrono::duration<double, std::micro>(raw.since_run_start).count();
      event.duration_us = std::chrono::duration<double, std::micro>(raw.duration).count();
    }
    return events;
  }

  void record_failure(const char* what) noexcept {
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      try {
        failure_ = what;
      } catch (...) {
      }
    }
  }

  void on_complete() noexcept override {
    // Copy the outputs out before the arena goes away with this request.
    Outputs outputs;
    if (failed_.load(std::memory_order_acquire)) {
      run_->finish(ErrorInfo{model_->path + ": " + failure_});
      finish_request();
      return;
    }
    try {
      for (size_t i = 0; i < model_->graph.outputs.size(); ++i) {
        const auto& tensor = model_->graph.tensors[model_->graph.outputs[i]];
        const auto* src = reinterpret_cast<const float*>(arena_.get() + tensor.arena_offset);
        const int64_t count = graph::shape_numel(tensor.shape);
        // The recycled tensor in the same position (same model: same output),
        // if its storage holds this output without growing.
        if (i < recycled_.size() && recycled_[i].data.capacity() >= static_cast<size_t>(count)) {
          Tensor reused = std::move(recycled_[i]);
          reused.name = tensor.name;
          reused.shape = tensor.shape;
          reused.data.assign(src, src + count);
          outputs.tensors.push_back(std::move(reused));
        } else {
          outputs.tensors.push_back(
              Tensor{tensor.name, tensor.shape, std::vector<float>(src, src + count)});
        }
      }
      recycled_.clear();
      if (op_ns_) outputs.profile = profile();
      if (trace_) outputs.trace = trace();
      run_->finish(std::move(outputs));
    } catch (const std::bad_alloc&) {
      run_->finish(ErrorInfo{"out of memory while copying the outputs"});
    }
    finish_request();
  }

  ~RunRequest() override { model_->arenas.give_back(std::move(arena_)); }

  void finish_request() noexcept {
    EngineState* engine = engine_;
    delete this;
    engine->end_run();  // last: the engine may be destroyed once this returns
  }

 private:
  std::shared_ptr<ModelState> model_;
  EngineState* engine_;
  std::shared_ptr<RunState> run_;
  ArenaPool::Arena arena_;
  std::vector<Tensor> recycled_;  // RunOptions::reuse_outputs, until the outputs are copied
  std::vector<kernels::ConstTensorView> views_;
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once, by the thread that set failed_
  // Nanoseconds in each operator's kernels; null unless RunOptions::profile.
  std::unique_ptr<std::atomic<int64_t>[]> op_ns_;
  struct RawTileEvent {
    std::chrono::steady_clock::duration since_run_start{}, duration{};
    int cpu = -1;
  };
  // One per node; null unless RunOptions::trace.
  std::unique_ptr<RawTileEvent[]> trace_;
  std::chrono::steady_clock::time_point start_;
};

std::string names_of(const std::vector<TensorSpec>& specs) {
  std::string out;
  for (const auto& s : specs) out += (out.empty() ? "'" : ", '") + s.name + "'";
  return out;
}

// The model-input index of each provided input, or an error message.
std::optional<std::string> match_inputs(const ModelState& m, const Inputs& inputs,
                                        std::vector<const TensorView*>& by_input) {
  by_input.assign(m.input_specs.size(), nullptr);
  for (const auto& [name, view] : inputs) {
    size_t i = 0;
    while (i < m.input_specs.size() && m.input_specs[i].name != name) ++i;
    if (i == m.input_specs.size())
      return "unknown input '" + name + "'; the model's inputs are " + names_of(m.input_specs);
    if (by_input[i] != nullptr) return "input '" + name + "' is given more than once";
    if (view.shape != m.input_specs[i].shape)
      return "input '" + name + "' has shape " + graph::shape_to_string(view.shape) +
             " but the model expects " + graph::shape_to_string(m.input_specs[i].shape);
    if (view.dtype != m.input_specs[i].dtype)
      return "input '" + name + "' is " + view.dtype + " but the model expects " +
             m.input_specs[i].dtype;
    if (view.data == nullptr && graph::shape_numel(view.shape) > 0)
      return "input '" + name + "' has no data (null pointer)";
    by_input[i] = &view;
  }
  for (size_t i = 0; i < by_input.size(); ++i)
    if (by_input[i] == nullptr) return "missing input '" + m.input_specs[i].name + "'";
  return std::nullopt;
}

}  // namespace

void RunState::finish(Result<Outputs> r) {
  std::function<void(const Result<Outputs>&)> callback;
  {
    std::lock_guard lock(mutex);
    result.emplace(std::move(r));
    callback = std::move(on_done);
  }
  done.notify_all();
  if (callback) callback(*result);  // result is never written again once set
}

Result<Outputs> RunState::wait_and_take() {
  std::unique_lock lock(mutex);
  done.wait(lock, [&] { return result.has_value(); });
  return std::move(*result);
}

std::shared_ptr<RunState> start_run(const std::shared_ptr<ModelState>& model, const Inputs& inputs,
                                    const RunOptions& options,
                                    std::function<void(const Result<Outputs>&)> on_done) {
  auto run = std::make_shared<RunState>();
  run->on_done = std::move(on_done);
  if (!model) {
    run->finish(ErrorInfo{"session has no model"});
    return run;
  }
  std::vector<const TensorView*> by_input;
  if (auto error = match_inputs(*model, inputs, by_input)) {
    run->finish(ErrorInfo{model->path + ": " + *error});
    return run;
  }
  auto engine = model->engine.lock();
  if (!engine) {
    run->finish(ErrorInfo{model->path + ": the engine this model was loaded by is gone"});
    return run;
  }
  RunRequest* request = nullptr;
  try {
    request = new RunRequest(model, engine.get(), run, options);
  } catch (const std::bad_alloc&) {
    run->finish(ErrorInfo{model->path + ": out of memory for a request arena of " +
                          std::to_string(model->graph.arena_bytes) + " bytes"});
    return run;
  }
  for (size_t i = 0; i < by_input.size(); ++i) request->bind_input(i, by_input[i]->data);
  engine->begin_run();
  try {
    engine->submit(*request, *model);  // the request deletes itself in on_complete()
  } catch (const std::bad_alloc&) {
    delete request;
    run->finish(ErrorInfo{model->path + ": out of memory while starting the run"});
    engine->end_run();
  }
  return run;
}

}  // namespace tessera::detail
