#!/usr/bin/env bash
# Session 14 run 5: work stealing in the single-buffered rows kernels (branch wip-s14-steal,
# DB_EXP_STEAL=1: a block's first group by its index, the rest claimed from a counter per
# launch site, so that no block finishes a kernel long after the others). gpu tests with
# the switch, then A/B in one build.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head; t built
DB_EXP_STEAL=1 timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu-steal.txt 2>&1; echo "ctest steal rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu-steal.txt | head; t tested
one() {  # label model steal [options]
  local l=$1 m=$2 st=$3; shift 3
  DB_EXP_STEAL=$st timeout 90 build-gpu/decodebench --model $m --graph on "$@" -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$l $m $* rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  [ $rc -ne 0 ] && tail -2 $R/c.txt
}
{ for i in 1 2; do for m in 8b-int4 8b-int8 8b-fp16 4b-int4 1b-int4; do one main $m ""; one steal $m 1; done; done
  one main 70b-int4 ""; one steal 70b-int4 1; one main 8b-int4 "" --context 4096; one steal 8b-int4 1 --context 4096; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
