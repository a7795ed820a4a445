#!/usr/bin/env bash
# Configures and builds one preset (default: release) after setup.
#   scripts/build.sh [release|debug|asan|tsan] [cmake --build args...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
preset="${1:-release}"
shift || true
"$root/scripts/setup.sh"
cd "$root"
jobs="${TESSERA_JOBS:-$(nproc)}"
dir=$(case "$preset" in release) echo build ;; *) echo "build-$preset" ;; esac)
# Configure when there is no complete configuration (a failed one leaves a
# cache without build.ninja); otherwise Ninja re-runs CMake itself as needed.
if [ ! -f "$dir/build.ninja" ]; then
  rm -f "$dir/CMakeCache.txt"
  cmake --preset "$preset" >/dev/null
fi
cmake --build "$dir" -j "$jobs" "$@"
