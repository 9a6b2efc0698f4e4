#!/usr/bin/env bash
# Session 17 run 8 (item 99): the single buffer's last group peeled off the group loop, so that
# no branch wraps the next group's loads (s17-peel.patch on f1d6173: the loop body as a lambda
# group_step; DB_EXP_PEEL=1 runs g_end - g - 1 steps that always load, then one that does not).
# m = main (.devrun/src-m), p0 = the lambda form without peeling (codegen check), p1 = peeled
# (every gpu test with it). All three schemes use the single-buffered rows kernel.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-p1 $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_PEEL=1 >/dev/null && cmake --build build-p1 -j10 > $R/build-p1.log 2>&1; echo "build p1 rc=$?" ) &
( cmake -S . -B build-p0 $CM >/dev/null && cmake --build build-p0 -j3 --target decodebench > $R/build-p0.log 2>&1; echo "build p0 rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-p1 -L gpu -j12 --output-on-failure > $R/ctest-p1.txt 2>&1; rc=$?; echo "ctest p1 rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-p1.txt | head -5; t tested
step() {  # label binary model
  timeout 60 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 8b-int8 8b-fp16 8b-int4; do
    step m .devrun/src-m/build/decodebench $m; step p0 build-p0/decodebench $m; step p1 build-p1/decodebench $m; done; } | tee $R/step.txt
t done; rm -f $R/c.json $R/c.txt; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
