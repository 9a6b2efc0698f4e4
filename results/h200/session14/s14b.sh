#!/usr/bin/env bash
# Session 14 run 2: the step's four corners for 8b-int4, {waits, no waits} x {dot, no dot}.
# Branch wip-s14-nowait: DB_EXP_NOWAIT (run 1, now also `attn`) and DB_EXP_FOLD (session 9's
# fold, compiled in: 1 replaces the int4 dot by an xor of the loaded words and meta, 2 folds x
# in too). Timing only where either is on.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j6 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?" ) &
for f in 1 2; do ( cmake -S . -B build-f$f $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_FOLD=$f >/dev/null && cmake --build build-f$f -j5 --target decodebench > $R/build-f$f.log 2>&1; echo "build f$f rc=$?" ) & done
wait; t built
one() {  # label binary model nowait
  DB_EXP_NOWAIT=$4 timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$1 $3 nowait=$4 rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  [ $rc -ne 0 ] && tail -2 $R/c.txt
}
G=qkv,o,gate_up,down; E=qkv,attn,o,gate_up,down
{ for i in 1 2; do for b in gpu f1 f2; do for n in "" $G $E; do one $b build-$b/decodebench 8b-int4 $n; done; done; done
  for m in 8b-int8 1b-int4; do one gpu build-gpu/decodebench $m ""; one gpu build-gpu/decodebench $m $E; done; } | tee $R/step.txt
t stepped
DB_EXP_NOWAIT=$E DB_TRACE_OUT=$R/trace-every.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so timeout 90 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/trace-every.txt 2>&1; echo "trace rc=$?"
gzip $R/trace-*.csv
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
