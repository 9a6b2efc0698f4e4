#!/usr/bin/env bash
# Session 13 run 12: the int4 QKV GEMV double-buffered (DB_EXP_DB_QKV=1; =2 also O), so that
# a block's two groups are both in flight before the wait on the down GEMV. Branch
# wip-s13-qkvdb (main + the switch).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"
t built
one() {  # label model dbqkv
  DB_EXP_DB_QKV=$3 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $2 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do one main 8b-int4 ""; one db1 8b-int4 1; one db2 8b-int4 2; done
  for m in 1b-int4 4b-int4 70b-int4; do one main $m ""; one db1 $m 1; one db2 $m 2; done
  one main2 8b-int4 ""; one db1 8b-int4 1; } | tee $R/step.txt
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
