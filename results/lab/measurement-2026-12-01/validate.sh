#!/usr/bin/env bash
# The GPU checks the layout, measurement and gate changes of 2026-12-01 still owe, prepared
# for a GPU machine (each stage fits the device tool's 10-minute limit; run them in order,
# with the build kept warm between them). From the repository root:
#   bash results/lab/measurement-2026-12-01/validate.sh build     # build (product + DEV), ctest -L gpu
#   bash results/lab/measurement-2026-12-01/validate.sh matrix    # the matrix on this tree, compared with the committed one
#   bash results/lab/measurement-2026-12-01/validate.sh aa 1 5    # A/A pairs 1-5 of the CI matrix (then 6 10)
#   bash results/lab/measurement-2026-12-01/validate.sh slowdown  # a 4% injected slowdown on 8b-int4
# Outputs go to $OUT (the device tool's folder), else to results/h200/validate/.
# The device machine has no libre2-dev: `apt-get download libre2-dev libre2-9` into .debs/
# here (git-ignored through .git/info/exclude), carry it, and before the script run
#   for f in .debs/*.deb; do dpkg -x $f /tmp/r; done; export PKG_CONFIG_SYSROOT_DIR=/tmp/r \
#     PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
#
# Predictions (written before running):
# - matrix: every run within 1% of results/h200/*.json (the product kernels' PTX is
#   identical before and after the restructuring; the protocol issues the same CUDA calls
#   in the timed loop); compare --threshold 1% gives 0 regressed, 0 improved.
# - aa: 10 of 10 pairs with no "regressed" or "improved" (8b medians move < 0.1% between
#   processes); 8b-int8 may show "unstable" (it ends at the software power cap on this card).
#   Each pair is two sweeps of 3 keys x 3 runs (~90 s): five pairs a call.
# - slowdown: DECODEBENCH_DEV_DELAY_US=66 adds ~66 us to 8b-int4's 1.65 ms step (+4%):
#   "regressed", exit 1; 8b-fp16 (+1.8%) stays "same".
# Kill criterion: none of this is research; if a stage fails, its output says why.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/h200/validate}
mkdir -p "$out"
stage=${1:?usage: validate.sh build|matrix|aa|slowdown}
b=build-gpu
matrix=(--model 8b-int4,8b-int8,8b-fp16 --graph on --tokens 128 --repeat 5 --runs 3)  # scripts/ci_regression.sh's

case "$stage" in
  build)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
      >"$out/build.log" 2>&1 && cmake --build $b -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    ctest --test-dir $b -L gpu -j8 --output-on-failure >"$out/ctest-gpu.txt" 2>&1
    tail -3 "$out/ctest-gpu.txt"
    $b/decodebench --model 8b-int4 --graph on | tee "$out/8b-int4.txt"
    ;;
  matrix)
    scripts/bench_matrix.sh $b "$out/matrix" >/dev/null 2>"$out/matrix.log"
    # The committed matrix against this tree's, run by run (the committed files predate the
    # repetition fields: compare derives the repetitions from their samples).
    committed=$(ls results/h200/*.json | grep -v baseline.json)
    $b/decodebench report $committed --format jsonl -o "$out/committed.jsonl"
    $b/decodebench report "$out"/matrix/*.json --format jsonl -o "$out/rerun.jsonl"
    $b/decodebench compare "$out/committed.jsonl" "$out/rerun.jsonl" --threshold 1% | tee "$out/matrix-compare.md"
    ;;
  aa)
    for i in $(seq "${2:-1}" "${3:-10}"); do
      $b/decodebench sweep "${matrix[@]}" -o "$out/aa-$i-a.jsonl" >/dev/null 2>>"$out/aa.log"
      $b/decodebench sweep "${matrix[@]}" -o "$out/aa-$i-b.jsonl" >/dev/null 2>>"$out/aa.log"
      $b/decodebench compare "$out/aa-$i-a.jsonl" "$out/aa-$i-b.jsonl" >"$out/aa-$i.md" 2>>"$out/aa.log"
      echo "pair $i: exit $?: $(grep -m1 ' matched: ' "$out/aa-$i.md")" | tee -a "$out/aa-summary.txt"
    done
    ;;
  slowdown)
    $b/decodebench sweep "${matrix[@]}" -o "$out/slow-base.jsonl" >/dev/null 2>>"$out/slowdown.log"
    DECODEBENCH_DEV_DELAY_US=66 $b/decodebench sweep "${matrix[@]}" -o "$out/slow-new.jsonl" >/dev/null \
      2>>"$out/slowdown.log"
    $b/decodebench compare "$out/slow-base.jsonl" "$out/slow-new.jsonl" | tee "$out/slowdown.md"
    echo "compare exit: ${PIPESTATUS[0]}" | tee -a "$out/slowdown.md"
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
