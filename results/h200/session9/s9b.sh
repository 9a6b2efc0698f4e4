#!/usr/bin/env bash
# session 9, run 2: is the int4 rows kernel issue-bound after items 45-47? DB_EXP_REPS 0-3 (wip-s9-reps);
# and the gpu tests of wip-int4-tail (src-b)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cd .devrun/src-reps && cmake -S . -B build $CM >/dev/null && cmake --build build -j6 --target decodebench decodebench_gemv_bench > $R/build-reps.log 2>&1; echo "build reps rc=$?" ) &
( cd .devrun/src-b && cmake -S . -B build $CM >/dev/null && cmake --build build -j10 > $R/build-b.log 2>&1; echo "build b rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
X=.devrun/src-reps/build
for pass in 1 2; do for sh in "8b gate/up" "8b down" "8b qkv" "8b o"; do for n in 0 1 2 3; do
  echo "reps$n $(DB_EXP_REPS=$n timeout 30 $X/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done; done; done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
for n in 1 0 2 3 1; do
  DB_EXP_REPS=$n timeout 60 $X/decodebench --model 8b-int4 --graph on -o $R/reps$n.json > $R/reps$n-8b-int4.txt 2>&1
  echo "reps$n 8b-int4 rc=$?: $(grep -E '^TPOT' $R/reps$n-8b-int4.txt | tr -s ' ' | cut -d' ' -f2-3)"
done | tee $R/step.txt
t stepped; tar czf $OUT/r.tgz -C $OUT r
timeout 240 ctest --test-dir .devrun/src-b/build -L gpu -j8 --output-on-failure > $R/ctest-b.txt 2>&1; echo "ctest b rc=$?"; grep -E "tests passed|\(Failed\)" $R/ctest-b.txt | head
t done; rm -f $R/*.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
