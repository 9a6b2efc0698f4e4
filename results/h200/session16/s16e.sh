#!/usr/bin/env bash
# Session 16 run 5 (item 94): int4 at 4 rows a group and more warps an SM, int8's shape (item 92:
# int8 streams 74% of DRAM at twice int4's warps a scheduler). m0 = main (8 rows, 128 registers,
# 4 blocks of 128 threads an SM); q0 = 4 rows (96 registers, 5 blocks); q6 / q8 = 4 rows with at
# least 6 / 8 blocks an SM (80 / 64 registers, some spills). Every gpu test with q8; the step at
# context 0; the GEMV bench on 8b's four int4 shapes.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j$3 $4 > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
T="--target decodebench decodebench_gemv_bench"
b q8 "-DDB_EXP_INT4_R=4 -DDB_EXP_MINB=8" 6 "" & b m0 "" 3 "$T" & b q0 "-DDB_EXP_INT4_R=4" 3 "$T" &
b q6 "-DDB_EXP_INT4_R=4 -DDB_EXP_MINB=6" 3 "$T" &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-q8 -L gpu -j8 --output-on-failure > $R/ctest-q8.txt 2>&1; rc=$?; echo "ctest q8 rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-q8.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-q8.txt | head -30; fi
step() {  # label binary model context
  timeout 120 $2 --model $3 --graph on --context $4 -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int4; do for v in m0 q0 q6 q8; do step $v build-$v/decodebench $m 0; done; done
  for sh in "8b gate/up" "8b down" "8b qkv" "8b o"; do for v in m0 q0 q6 q8; do echo "$v $(build-$v/decodebench_gemv_bench --only "$sh" int4 | tail -1)"; done; done; } 2>&1 | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
