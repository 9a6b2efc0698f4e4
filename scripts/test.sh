#!/usr/bin/env bash
# The test command (the README's, and what CI runs through .ci/run): installs what is
# missing, builds, and runs every test. Without a GPU the gpu-labelled tests skip visibly.
#   scripts/test.sh           the build and its tests, then the lab's benches built with
#                             -DDECODEBENCH_DEV=ON so that they keep compiling, then the
#                             whole suite under ASan and UBSan (scripts/sanitize.sh) and
#                             every fuzz target for 60 s (scripts/fuzz.sh)
#   scripts/test.sh --quick   the build and its tests only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

scripts/install_deps.sh
cmake -S . -B build
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
[ "${1:-}" = --quick ] && exit 0

# The lab's benches (tests/bench/) and hooks: the same build folder with DECODEBENCH_DEV on,
# so that only they compile; then back off, so that build/ stays the product build.
cmake -S . -B build -DDECODEBENCH_DEV=ON >/dev/null
cmake --build build -j"$jobs"
cmake -S . -B build -DDECODEBENCH_DEV=OFF >/dev/null

# Hostile input (docs/input-safety.md): the test suite with ASan and UBSan, CPU-only, in
# build-asan/; then each libFuzzer target for 60 s from its seed corpus, in build-fuzz/.
scripts/sanitize.sh
scripts/fuzz.sh 60
