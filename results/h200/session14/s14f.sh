#!/usr/bin/env bash
# Session 14 run 6: what x's L2 traffic costs the real kernels (branch wip-s14-nowait,
# -DDB_EXP_XSAME=1: every thread reads x's first pieces, so the loads, their latency and the
# normalization stay and the traffic goes; the dot stays). With and without the waits
# (DB_EXP_NOWAIT). Timing only where either is on.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 --target decodebench > $R/build.log 2>&1; echo "build rc=$?" ) &
( cmake -S . -B build-xs $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_XSAME=1 >/dev/null && cmake --build build-xs -j8 --target decodebench > $R/build-xs.log 2>&1; echo "build xs rc=$?" ) &
wait; t built
one() {  # label binary model nowait
  DB_EXP_NOWAIT=$4 timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$1 $3 nowait=$4 rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
E=qkv,attn,o,gate_up,down
{ for i in 1 2; do for b in gpu xs; do for n in "" $E; do one $b build-$b/decodebench 8b-int4 $n; done; done; done
  for m in 8b-int8 8b-fp16 1b-int4 4b-int4; do for b in gpu xs; do one $b build-$b/decodebench $m ""; done; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
