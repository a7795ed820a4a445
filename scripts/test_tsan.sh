#!/usr/bin/env bash
# ThreadSanitizer check of the scheduler: configures build-tsan (preset 'tsan':
# RelWithDebInfo, -fsanitize=thread, no benchmarks), builds ONLY the
# scheduler's test targets and runs the tests labelled "scheduler". Any TSan
# report makes the test exit non-zero (TSan's exitcode), so ctest fails.
#   scripts/test_tsan.sh            (TESSERA_JOBS=n to change parallelism)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${TESSERA_JOBS:-$(nproc)}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build-tsan/CMakeCache.txt ]; then
  cmake --preset tsan "${generator[@]}"
else
  cmake build-tsan  # re-configure in place (keeps the generator chosen first)
fi
cmake --build build-tsan -j "$jobs" --target test_ready_pool test_executor
export TSAN_OPTIONS="${TSAN_OPTIONS:-} halt_on_error=1 second_deadlock_stack=1"
ctest --test-dir build-tsan -L scheduler --output-on-failure
