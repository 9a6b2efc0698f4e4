#!/usr/bin/env bash
# session 10, run 3 (wip-s10-xpf): attention lets the O GEMV launch before its wait
# (DB_EXP_ATRIG=1); int4's second group copied to shared memory before the wait
# (DB_EXP_STAGE=1: blocks of exactly two groups, i.e. qkv; 2: every block of two or more)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head
t built
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 60 build-gpu/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{
for i in 1 2; do
step x0 8b-int4; step atrig 8b-int4 DB_EXP_ATRIG=1; step stage1 8b-int4 DB_EXP_STAGE=1; step stage2 8b-int4 DB_EXP_STAGE=2
step atrig-stage1 8b-int4 DB_EXP_ATRIG=1 DB_EXP_STAGE=1; step atrig-stage2 8b-int4 DB_EXP_ATRIG=1 DB_EXP_STAGE=2
done
for m in 8b-int8 8b-fp16 4b-int8; do step x0 $m; step atrig $m DB_EXP_ATRIG=1; done
for m in 4b-int4 1b-int4 70b-int4; do step x0 $m; step atrig $m DB_EXP_ATRIG=1; step stage1 $m DB_EXP_STAGE=1; step stage2 $m DB_EXP_STAGE=2; done
} | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
DB_EXP_STAGE=2 DB_EXP_ATRIG=1 timeout 200 build-gpu/decodebench_gpu_tests --gtest_filter='*Gemv*:*Engine*:*Graph*:*Backend*' > $R/gtest-stage2-atrig.txt 2>&1; echo "gtest stage2+atrig rc=$?"; grep -E "PASSED|FAILED" $R/gtest-stage2-atrig.txt | head -8
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
