#!/usr/bin/env bash
# Session 16 run 2 (item 91): DB_EXP_SDB, the int4 rows kernel keeping its next group in flight
# through per-thread cp.async slots in shared memory while it computes the current group.
# 0 = main's kernel, 1 = the next group staged after the wait, 2 = also the second group before it.
# Every gpu test with 1; A/B at context 0 on the int4 models; the GEMV bench on 8b's four shapes.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-s1 $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_SDB=1 >/dev/null && cmake --build build-s1 -j8 > $R/build-s1.log 2>&1; echo "build s1 rc=$?" ) &
for v in 0 2; do
  ( cmake -S . -B build-s$v $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_SDB=$v >/dev/null &&
    cmake --build build-s$v -j4 --target decodebench decodebench_gemv_bench > $R/build-s$v.log 2>&1; echo "build s$v rc=$?" ) &
done
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-s1 -L gpu -j8 --output-on-failure > $R/ctest-s1.txt 2>&1; rc=$?; echo "ctest s1 rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-s1.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-s1.txt | head -30; fi
step() {  # label binary model context
  timeout 120 $2 --model $3 --graph on --context $4 -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int4 70b-int4; do for v in 0 1 2; do step s$v build-s$v/decodebench $m 0; done; done
  for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do for v in 0 1 2; do echo "s$v $(build-s$v/decodebench_gemv_bench --only "$sh" int4 | tail -1)"; done; done; } 2>&1 | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
