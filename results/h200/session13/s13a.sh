#!/usr/bin/env bash
# Session 13 run 1: session 12's two prepared runs in one call. The tree is wip-s12-floor
# (next.sh's configurations); .devrun/src-w is wip-s12-wsf2 (next2.sh's GEMV bench --wsf).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j8 --target decodebench > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-w && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j8 --target decodebench_gemv_bench > $R/build-w.log 2>&1; echo "build-w rc=$?" ) &
wait
t built
cfg() {  # label FRAG FLOOR_INT4 (- for unset)
  local l=$1 f=$2 i4=$3; [ "$f" = - ] && f=""; [ "$i4" = - ] && i4=""
  for m in 8b-int4 1b-int4 8b-int4 70b-int4; do
    DB_EXP_FRAG=$f DB_EXP_FLOOR_INT4=$i4 timeout 90 build-gpu/decodebench --model $m --graph on -o $R/c.json > $R/c.txt 2>&1
    echo "$l $m rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  done
}
{ cfg main - -
  cfg nib25 none 25
  cfg tall tall -
  cfg tall25 tall 25
  cfg all25 all 25
  cfg main2 - - ; } | tee $R/step.txt
rm -f $R/c.json; t step done
DB_GIT_COMMIT=$(cat .devrun/commit-w) timeout 150 .devrun/src-w/build-gpu/decodebench_gemv_bench --wsf 2>&1 | tee $R/wsf.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
