#!/usr/bin/env bash
# Sets up, builds and runs every test:
#   1. Release build, all tests (unit, conformance against ONNX Runtime, bad input);
#   2. ThreadSanitizer build, the scheduler's tests;
#   3. ASan+UBSan build, the .tess reader's tests and the bad-input CLI tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${TESSERA_JOBS:-$(nproc)}"

echo "== release build and tests"
"$root/scripts/build.sh" release
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== ThreadSanitizer: scheduler tests"
"$root/scripts/build.sh" tsan --target test_ready_pool test_executor
ctest --test-dir build-tsan --output-on-failure -L scheduler

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: file reader and bad input"
"$root/scripts/build.sh" asan --target tessera test_tess_format
ctest --test-dir build-asan --output-on-failure -R '^(test_tess_format|cli_bad_input)$'
