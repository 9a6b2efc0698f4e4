#!/usr/bin/env bash
# The H200 benchmark matrix: 1b, 4b, 8b x fp16, int8, int4 x graph on/off with
# the auto kernel, plus the slow kernels for 8b (naive, dequant-cublas, fp16.cublas).
# Writes one JSON per run and matrix.md (decodebench report) into OUT.
#   scripts/bench_matrix.sh [BUILD_DIR] [OUT_DIR] [extra decodebench options...]
set -euo pipefail
build=${1:-build}
out=${2:-results/h200}
shift $(( $# > 2 ? 2 : $# )) || true
mkdir -p "$out"
bin="$build/decodebench"
written=()
run() {  # name, options...
  local name=$1; shift
  echo "== $name: decodebench $*" >&2
  "$bin" "$@" --tokens 128 --warmup 16 --repeat 5 -o "$out/$name.json" "${extra[@]}" >/dev/null
  written+=("$out/$name.json")
}
extra=("$@")
for m in 1b 4b 8b; do
  for q in fp16 int8 int4; do
    for g in on off; do
      run "$m-$q-graph-$g" --model "$m-$q" --graph "$g"
    done
  done
done
run 8b-int4-naive --model 8b-int4 --graph on --kernel int4.naive
run 8b-int4-dequant-cublas --model 8b-int4 --graph on --kernel int4.dequant-cublas
run 8b-int8-naive --model 8b-int8 --graph on --kernel int8.naive
run 8b-int8-dequant-cublas --model 8b-int8 --graph on --kernel int8.dequant-cublas
run 8b-fp16-cublas --model 8b-fp16 --graph on --kernel fp16.cublas
run 8b-int4-sync-per-token --model 8b-int4 --graph on --sync-per-token
"$bin" report "${written[@]}" --format md > "$out/matrix.md"  # these runs only, not other files in OUT
echo "wrote $out/matrix.md" >&2
