#!/usr/bin/env bash
# session 10, run 5 (wip-s10-pair): the O GEMV and gate/up in one kernel with a grid barrier
# (DB_EXP_PAIR=1) against two kernels; the branch (pair off) against main c30c3a0 (resid via ld.cg)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
M=.devrun/src-m/build/decodebench; X=build-gpu/decodebench
{ for i in 1 2; do for m in 8b-int4 8b-int8; do step main $M $m; step x $X $m; step pair $X $m DB_EXP_PAIR=1; done; done
  for m in 4b-int4 1b-int4 4b-int8 8b-fp16 70b-int4; do step x $X $m; step pair $X $m DB_EXP_PAIR=1; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
DB_EXP_PAIR=1 timeout 300 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-pair.txt 2>&1; echo "ctest pair rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-pair.txt | head -20
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
