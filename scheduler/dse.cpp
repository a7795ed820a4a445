#include "scheduler/dse.hpp"

namespace tessera::scheduler {

Dse::Dse(ReadyPool& pool, int32_t row, DseHooks hooks)
    : pool_(pool), row_(row), hooks_(std::move(hooks)) {}

bool Dse::run_next_path() {
  std::optional<ReadyEntry> head = pool_.pop(row_);  // Algorithm 1, line 9
  if (!head) return false;
  run_path(*head);
  return true;
}

void Dse::run_path(ReadyEntry head) {
  Request* request = head.request;
  int32_t node = head.node;
  while (true) {
    request->execute_node(node);  // line 11
    const GraphView& graph = request->graph();
    int32_t next = -1;  // line 13: N <- NULL
    batch_.clear();
    for (int32_t edge = graph.child_offsets[node]; edge < graph.child_offsets[node + 1];
         ++edge) {  // line 14
      const int32_t child = graph.children[edge];
      if (!request->mark_parent_executed(child)) continue;  // lines 15-16
      if (next < 0) {
        next = child;  // line 18: traverse to the first readied child
      } else {
        batch_.push_back({request, child});  // line 20, batched as in §3.3
      }
    }
    if (!batch_.empty()) {
      pool_.push_batch(row_, batch_);
      if (hooks_.on_pushed) hooks_.on_pushed(static_cast<int32_t>(batch_.size()));
    }
    // Per-request completion is not in Algorithm 1 (it runs one DNN forever);
    // the request counts its executed nodes instead. If a child is still
    // ours (next >= 0) the request cannot have completed, so it is safe to
    // keep using it; otherwise it must not be touched after this call.
    if (request->mark_node_done()) {
      request->on_complete();
      if (hooks_.on_request_completed) hooks_.on_request_completed();
      return;
    }
    if (next < 0) return;  // dead end: back to line 9
    node = next;
  }
}

}  // namespace tessera::scheduler
