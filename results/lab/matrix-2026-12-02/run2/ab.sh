#!/usr/bin/env bash
# Batch 1 before and after --batch, side by side on one H200: the keys the matrix re-run
# (../run1/matrix-compare.md) left unconfirmed or unstable against the
# committed matrix (ce7e2d9, measured a day earlier), each run alternately from a build of
# ce7e2d9 and one of this tree, three runs a side, so that the card's drift falls on both.
# From the repository root, on the GPU machine, with ce7e2d9's sources in ab-base/
# (`git archive ce7e2d9 CMakeLists.txt src include kernels configs scripts tests | tar -x -C ab-base`)
# and libre2-dev as in ../../measurement-2026-12-01/validate.sh's header:
#   bash results/lab/matrix-2026-12-02/run2/ab.sh
# Prediction: every key `same` at 1% (the batch-1 kernels' PTX is unchanged; the +1.3-1.5%
# of the re-run is the card, not the code). Kill criterion: none; a measurement.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
out=${OUT:-results/lab/matrix-2026-12-02/run2}
mkdir -p "$out"
cfg="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
{ cmake -S ab-base -B build-base $cfg && cmake --build build-base -j8 --target decodebench; } >"$out/build-base.log" 2>&1 &
{ cmake -S . -B build-gpu $cfg -DDECODEBENCH_DEV=ON && cmake --build build-gpu -j8 --target decodebench; } >"$out/build-head.log" 2>&1
wait
[ -x build-base/decodebench ] && [ -x build-gpu/decodebench ] || { tail -20 "$out"/build-*.log; exit 1; }
rm -f "$out/base.jsonl" "$out/head.jsonl"
keys=("--model 8b-fp16 --graph on" "--model 8b-fp16 --graph off" "--model 8b-int8 --graph on"
  "--model 8b-int8 --graph off" "--model 8b-int4 --graph on --sync-per-token")
for r in 1 2 3; do
  for k in "${keys[@]}"; do
    for side in base head; do
      b=build-$side; [ $side = head ] && b=build-gpu
      $b/decodebench $k --tokens 128 --warmup 16 --repeat 5 -o "$out/run.json" >/dev/null 2>>"$out/runs.log" &&
        build-gpu/decodebench report "$out/run.json" --format jsonl >>"$out/$side.jsonl"
    done
  done
done
build-gpu/decodebench compare "$out/base.jsonl" "$out/head.jsonl" --threshold 1% >"$out/ab-compare.md" 2>&1
rm -f "$out/run.json"
cut -d'|' -f2,5,9,10,11,12,15 "$out/ab-compare.md" | head -12; tail -3 "$out/ab-compare.md"
