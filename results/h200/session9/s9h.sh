#!/usr/bin/env bash
# session 9, run 8: the fragment dot with x staged through per-warp shared memory (int4-frag,
# -DDB_FRAG_STAGE=1, chains interleaved), against the nibble layout (DB_EXP_NOFRAG=1)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cd .devrun/src-s && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_FRAG_STAGE=1 >/dev/null && cmake --build build -j16 --target decodebench decodebench_gemv_bench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head; cd - >/dev/null
B=.devrun/src-s/build; t built
timeout 60 $B/decodebench_gpu_tests --gtest_filter='*Frag*:*Epilogue*' > $R/gtest-frag.txt 2>&1; echo "frag tests rc=$?"; grep -E "PASSED|FAILED" $R/gtest-frag.txt | head -8
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 60 $B/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{ for m in 8b-int4 70b-int4 1b-int4 8b-int4; do step nofrag $m DB_EXP_NOFRAG=1; step stage $m; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down" "1b gate/up"; do
  echo "nofrag $(DB_EXP_NOFRAG=1 timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "stage $(timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
