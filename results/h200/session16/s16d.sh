#!/usr/bin/env bash
# Session 16 run 4 (item 93): DB_EXP_RING=D, the int4 rows kernel with a per-thread ring of D
# groups in flight in shared memory (cp.async, scales and zero points included) beyond the group
# it computes. r0 = main, r2 / r3 = D 2 / 3 staged after x's loads, r2x = D 2 staged before them,
# r2f = D 2 with every launch asking for the 196 KB configuration (DB_EXP_CO_FLOOR=86).
# Every gpu test with r2; the step at context 0 (8b-int4 twice, 4b, 1b); the GEMV bench.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" "-DCMAKE_CXX_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j$3 $4 > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
T="--target decodebench decodebench_gemv_bench"
b r2 "-DDB_EXP_RING=2" 4 "" & b r0 "" 3 "$T" & b r3 "-DDB_EXP_RING=3" 3 "$T" &
b r2x "-DDB_EXP_RING=2 -DDB_EXP_RING_X=1" 3 "$T" & b r2f "-DDB_EXP_RING=2 -DDB_EXP_CO_FLOOR=86" 3 "$T" &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-r2 -L gpu -j8 --output-on-failure > $R/ctest-r2.txt 2>&1; rc=$?; echo "ctest r2 rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-r2.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-r2.txt | head -30; fi
step() {  # label binary model context
  timeout 120 $2 --model $3 --graph on --context $4 -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int4; do for v in r0 r2 r3 r2x r2f; do step $v build-$v/decodebench $m 0; done; done
  for sh in "8b gate/up" "8b down" "8b qkv"; do for v in r0 r2 r3; do echo "$v $(build-$v/decodebench_gemv_bench --only "$sh" int4 | tail -1)"; done; done; } 2>&1 | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
