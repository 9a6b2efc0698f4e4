#!/usr/bin/env bash
# session 10, run 6 (wip-s10-ws): the warp-specialized int4 GEMV (DB_EXP_WS=1) against the rows kernel
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gemv_bench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head
t built
DB_EXP_WS=1 timeout 90 build-gpu/decodebench_gpu_tests --gtest_filter='*Gemv*' > $R/gtest-ws.txt 2>&1; echo "gemv tests ws rc=$?"; grep -E "PASSED|FAILED" $R/gtest-ws.txt | head -12
t tested; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b gate/up" "8b qkv" "8b o" "1b gate/up" "1b down" "70b gate/up"; do
  echo "rows $(timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "ws   $(DB_EXP_WS=1 timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 60 build-gpu/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{ for m in 8b-int4 1b-int4 8b-int4 70b-int4; do step rows $m; step ws $m DB_EXP_WS=1; done; } | tee $R/step.txt
rm -f $R/*.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
