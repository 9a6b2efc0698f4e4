#!/usr/bin/env bash
# Session 14 run 3: does the tensor-core dot (fragment layout) pay once the waits are gone?
# Branch wip-s14-nowait (+ wip-s13-achunk merged): DB_EXP_FRAG / DB_EXP_FLOOR_INT4 as item 70,
# DB_EXP_NOWAIT as runs 1-2. Timing only where NOWAIT is set.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
one() {  # label model frag floor nowait
  DB_EXP_FRAG=$3 DB_EXP_FLOOR_INT4=$4 DB_EXP_NOWAIT=$5 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$1 $2 frag=$3 floor=$4 nowait=$5 rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
E=qkv,attn,o,gate_up,down
{ for i in 1 2; do for n in "" $E; do one main 8b-int4 "" "" $n; one all25 8b-int4 all 25 $n; one all 8b-int4 all "" $n; one tall25 8b-int4 tall 25 $n; done; done
  for n in "" $E; do one main 70b-int4 "" "" $n; one all25 70b-int4 all 25 $n; done; } | tee $R/step.txt
t stepped
DB_EXP_FRAG=all DB_EXP_FLOOR_INT4=25 DB_EXP_NOWAIT=$E DB_TRACE_OUT=$R/trace-all25-every.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so timeout 90 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/trace.txt 2>&1; echo "trace rc=$?"
gzip $R/trace-*.csv
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
