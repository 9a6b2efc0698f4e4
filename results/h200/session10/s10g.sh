#!/usr/bin/env bash
# session 10, run 7 (wip-s10-ws): the warp-specialized int4 GEMV at 8 (DB_EXP_WS=1) and 16 (=2) consumer warps
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gemv_bench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head
t built
DB_EXP_WS=2 timeout 60 build-gpu/decodebench_gpu_tests --gtest_filter='*int4_gemv*' > $R/gtest-ws2.txt 2>&1; echo "int4 gemv tests ws2 rc=$?"; grep -E "PASSED|FAILED" $R/gtest-ws2.txt | head -8
for sh in "8b gate/up" "8b qkv" "8b o" "1b gate/up"; do
  echo "rows $(timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "ws8  $(DB_EXP_WS=1 timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "ws16 $(DB_EXP_WS=2 timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 60 build-gpu/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{ step rows 8b-int4; step ws8 8b-int4 DB_EXP_WS=1; step ws16 8b-int4 DB_EXP_WS=2; } | tee $R/step.txt
rm -f $R/*.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
