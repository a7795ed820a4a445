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
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
dir=$(case "$preset" in release) echo build ;; *) echo "build-$preset" ;; esac)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake --preset "$preset" "${generator[@]}" >/dev/null
fi
cmake --build "$dir" -j "$jobs" "$@"
