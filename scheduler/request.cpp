#include "scheduler/request.hpp"

namespace tessera::scheduler {

Request::Request(const GraphView& graph, int32_t priority)
    : graph_(graph),
      priority_(priority),
      pending_parents_(graph.node_count > 0
                           ? std::make_unique<std::atomic<int32_t>[]>(graph.node_count)
                           : nullptr),
      ran_on_(graph.main_parents && graph.node_count > 0
                  ? std::make_unique_for_overwrite<int32_t[]>(graph.node_count)
                  : nullptr),
      remaining_(graph.node_count) {
  // relaxed: the request is handed to the executor (submit) after this, and
  // that hand-over orders these stores before any worker reads them. (A
  // view without parent counts can be queued, never run: ready-pool tests.)
  if (graph.parent_counts == nullptr) return;
  for (int32_t node = 0; node < graph.node_count; ++node)
    pending_parents_[static_cast<size_t>(node)].store(graph.parent_counts[node],
                                                      std::memory_order_relaxed);
}

Request::~Request() = default;

}  // namespace tessera::scheduler
