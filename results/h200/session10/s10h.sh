#!/usr/bin/env bash
# session 10, run 8 (wip-s10-ws): 16 consumer warps with x from shared memory (DB_EXP_WS=2) or in registers (=3)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gemv_bench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head
t built
DB_EXP_WS=3 timeout 40 build-gpu/decodebench_gpu_tests --gtest_filter='*int4_gemv*' > $R/gtest-ws3.txt 2>&1; echo "int4 gemv tests ws3 rc=$?"; grep -E "PASSED|FAILED" $R/gtest-ws3.txt | head -8
for sh in "8b gate/up" "8b qkv" "8b o" "1b gate/up"; do
  echo "rows $(timeout 20 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "ws16 $(DB_EXP_WS=2 timeout 20 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "ws16x $(DB_EXP_WS=3 timeout 20 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 40 build-gpu/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{ step rows 8b-int4; step ws16 8b-int4 DB_EXP_WS=2; step ws16x 8b-int4 DB_EXP_WS=3; } | tee $R/step.txt
rm -f $R/*.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
