#!/usr/bin/env bash
# Session 14 run 7: run 6's x traffic split by source (branch wip-s14-nowait, -DDB_EXP_XSAME=
# 1 both inputs, 2 the residual stream only (QKV, gate/up), 3 the fp16 input only (O, down),
# 4 as 1 and the norm weights too). Timing only.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j3 --target decodebench > $R/build.log 2>&1; echo "build rc=$?" ) &
for v in 1 2 3 4; do ( cmake -S . -B build-x$v $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_XSAME=$v >/dev/null && cmake --build build-x$v -j3 --target decodebench > $R/build-x$v.log 2>&1; echo "build x$v rc=$?" ) & done
wait; t built
one() {  # label binary model
  timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$1 $3 rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do for b in gpu x1 x2 x3 x4; do one $b build-$b/decodebench 8b-int4; done; done
  for m in 4b-int4 8b-int8; do for b in gpu x1 x2 x3 x4; do one $b build-$b/decodebench $m; done; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
