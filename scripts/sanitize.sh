#!/usr/bin/env bash
# The whole test suite built with AddressSanitizer and UBSan (host code, CPU-only) in
# build-asan/, and run: any sanitizer report fails the test that triggered it. Part of
# scripts/test.sh (and so of CI).
#   scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
build=${DB_ASAN_BUILD:-build-asan}

# The default build type (Release): the binary warns on stderr in any other, and the
# command-line tests count stderr's lines.
cmake -S . -B "$build" -DDECODEBENCH_SANITIZE=ON -DDECODEBENCH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$jobs"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" --output-on-failure -j"$jobs"
