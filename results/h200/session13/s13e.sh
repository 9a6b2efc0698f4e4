#!/usr/bin/env bash
# Session 13 run 7: attention at 64 positions a block (under 32 KB of shared memory) with and
# without the fragment layout on QKV (run 6's trace: a fragment QKV costs attention +2.5 us a
# layer). Branch wip-s13-achunk: build-gpu as is, build-c64 with -DDB_EXP_ACHUNK=64.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?" ) &
( cmake -S . -B build-c64 $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_ACHUNK=64 >/dev/null && cmake --build build-c64 -j8 --target decodebench > $R/build-c64.log 2>&1; echo "build-c64 rc=$?" ) &
wait; t built
one() {  # label build model frag
  DB_EXP_FRAG=$4 timeout 90 $2/decodebench --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do
    one c128 build-gpu 8b-int4 ""; one c128-qkv build-gpu 8b-int4 qkv
    one c64 build-c64 8b-int4 ""; one c64-qkv build-c64 8b-int4 qkv; one c64-tall build-c64 8b-int4 tall
  done
  for m in 8b-int8 8b-fp16 1b-int4 4b-int4; do one c128 build-gpu $m ""; one c64 build-c64 $m ""; one c64-qkv build-c64 $m qkv; done
  DB_EXP_FRAG= timeout 90 build-c64/decodebench --model 8b-int4 --graph on --context 4096 -o $R/c.json > $R/c.txt 2>&1; echo "c64 8b-int4 ctx4096: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"
  timeout 90 build-gpu/decodebench --model 8b-int4 --graph on --context 4096 -o $R/c.json > $R/c.txt 2>&1; echo "c128 8b-int4 ctx4096: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"
} | tee $R/step.txt
t stepped
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
