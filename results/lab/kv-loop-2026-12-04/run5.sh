#!/usr/bin/env bash
# Device call 5 (bash results/lab/kv-loop-2026-12-04/run5.sh), on run4's warm build: the
# context sweep of results/h200/kv-cache and the single runs at 131000 and 32768 positions.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out5}
mkdir -p "$out/runs"
cmake --build $b -j16 --target decodebench >"$out/build.log" 2>&1 || { tail -5 "$out/build.log"; exit 1; }
t built
timeout 200 $b/decodebench sweep --model 8b-int4 --graph on --kv-cache fp16,fp8,int8 --context 0-131072*4 --tokens 32 \
  --repeat 2 -o "$out/runs/context-sweep.jsonl" >"$out/sweep.txt" 2>&1; echo "sweep rc $?"; tail -2 "$out/sweep.txt"; t sweep
for run in "fp8 131000" "int8 131000" "fp16 131000" "fp16 32768" "fp8 32768" "int8 32768"; do
  set -- $run; kv=$1; ctx=$2
  timeout 60 $b/decodebench --model 8b-int4 --graph on --context $ctx --kv-cache $kv --tokens 32 --repeat 2 \
    -o "$out/runs/8b-int4-ctx$ctx-$kv.json" 2>&1 | grep -E "TPOT|prefill |rror" | grep -v " on cuda: " | sed "s/^/ctx $ctx $kv: /"
  t "ctx $ctx $kv"
done
tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
