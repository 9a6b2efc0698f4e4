#!/usr/bin/env bash
# Session 12 run 4: two int4 experiments on top of item 64's per-launch carveout.
# (a) wip-s12-staged (session 11's staged QKV, item 62, rebased onto main): the working tree.
# (b) every eligible int4 matrix in the fragment layout (kPreferredWeights = 1): .devrun/src-f.
# Against main (3a9b531): .devrun/src-m.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j6 --target decodebench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
( cd .devrun/src-f && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 --target decodebench > $R/build-f.log 2>&1; echo "build f rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 120 build-gpu/decodebench_gpu_tests --gtest_filter='*Gemv*:*Staged*' > $R/gtest.txt 2>&1; echo "gemv tests rc=$?: $(grep -E 'PASSED|FAILED' $R/gtest.txt | head -3 | tr '\n' ' ')"
step() {  # label binary model [options]
  local l=$1 b=$2 m=$3; shift 3
  timeout 90 $b --model $m "$@" -o $R/c.json > $R/c.txt 2>&1
  echo "$l $m $* rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=.devrun/src-m/build/decodebench S=build-gpu/decodebench F=.devrun/src-f/build/decodebench
{ for i in 1 2; do for m in 8b-int4 1b-int4 4b-int4; do step main $M $m --graph on; step staged $S $m --graph on; step fragall $F $m --graph on; done; done; } | tee $R/step.txt
rm -f $R/c.json; t stepped; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
