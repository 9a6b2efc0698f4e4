#!/usr/bin/env bash
# What the merges of 2026-12-03 owe the GPU (no device time was left when they landed): the
# whole gpu suite, the matrix's tokens and TPOT against the committed one, and the energy
# window read on the counter's updates. From the repository root, on the GPU machine, in two
# calls (the build kept warm between them):
#   bash results/lab/landing-2026-12-03/run.sh gpu      # build, ctest -L gpu, the matrix (~8 min)
#   bash results/lab/energy-2026-12-03/run.sh aligned   # at once after (its own predictions)
# Outputs go to $OUT, else results/lab/landing-2026-12-03/run1: ctest-gpu.txt, matrix.md,
# compare.md, hashes.txt, matrix.tar.gz.
#
# What landed untested on a GPU: the linear plan (every kernel choice decided on the host,
# engine.cu split; PTX identical to 8562e76 apart from names, scripts/ptx_diff.sh), the renames
# and the lab out of the product; the host-memory plan and streamed weight writes (device
# weights compare against host_rows now); the energy sampler's aligned windows.
# Prediction (before running): `ctest -L gpu` all pass (436 tests in the CPU machine's build
# list, the gpu label); every matrix key's check.tokens_hash equal to results/h200/*.json's;
# `compare --threshold 1%` against the committed matrix: no key regressed (the PTX is the same
# and the timed loop's calls are the same).
# Kill criterion: none; a verification. A failure says where.
# The device machine has no libre2-dev: `apt-get download libre2-dev libre2-9` into .debs/ here
# (git-ignored through .git/info/exclude) and carry it; this script unpacks it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/landing-2026-12-03/run1}
mkdir -p "$out"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
case "${1:?usage: run.sh gpu}" in
  gpu)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } >"$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    t built
    (cd $b && timeout 300 ctest -L gpu -j8 --output-on-failure) >"$out/ctest-gpu.txt" 2>&1
    grep -E "tests passed|tests failed|\*\*\*Failed" "$out/ctest-gpu.txt" | head -20; t tests
    m=$(mktemp -d)
    scripts/bench_matrix.sh $b "$m" 2>"$out/matrix.log"
    cp "$m/matrix.md" "$out/"
    python3 - "$m" >"$out/hashes.txt" <<'PY'
import glob, json, os, sys
bad = 0
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    ref = os.path.join("results/h200", os.path.basename(f))
    if not os.path.exists(ref):
        continue
    a = json.load(open(ref))["check"]["tokens_hash"]
    b = json.load(open(f))["check"]["tokens_hash"]
    print(os.path.basename(f), a, b, "same" if a == b else "DIFFERENT")
    bad += a != b
print("tokens hashes different:", bad)
PY
    tail -1 "$out/hashes.txt"
    $b/decodebench report results/h200/*-graph-*.json --format jsonl >"$m/base.jsonl"
    $b/decodebench report "$m"/*-graph-*.json --format jsonl >"$m/new.jsonl"
    $b/decodebench compare "$m/base.jsonl" "$m/new.jsonl" --threshold 1% >"$out/compare.md" 2>&1
    echo "compare exit $?: $(grep -E ' matched: ' "$out/compare.md")"
    tar -C "$m" -czf "$out/matrix.tar.gz" .
    t matrix
    ;;
esac
