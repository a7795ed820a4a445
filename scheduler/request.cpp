#include "scheduler/request.hpp"

namespace tessera::scheduler {

// make_unique<T[]> value-initialises, and since C++20 a value-initialised
// std::atomic holds zero: every node starts with no executed parents.
Request::Request(const GraphView& graph, int32_t priority)
    : graph_(graph),
      priority_(priority),
      executed_parents_(graph.node_count > 0
                            ? std::make_unique<std::atomic<int32_t>[]>(graph.node_count)
                            : nullptr),
      ran_on_(graph.main_parents && graph.node_count > 0
                  ? std::make_unique_for_overwrite<int32_t[]>(graph.node_count)
                  : nullptr),
      remaining_(graph.node_count) {}

Request::~Request() = default;

}  // namespace tessera::scheduler
