#!/usr/bin/env bash
# Session 13 run 8: a fragment QKV whose SM split leaves room for attention's block beside
# its own three (run 6's trace: attention launched later after a fragment QKV, +2.5 us a
# layer). Branch wip-s13-achunk: DB_EXP_FRAG=qkv with DB_EXP_FLOOR_FRAG = 44 (100 KB) / 60.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
one() {  # label model frag fragfloor
  DB_EXP_FRAG=$3 DB_EXP_FLOOR_FRAG=$4 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $2 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do
    one main 8b-int4 "" ""; one qkv 8b-int4 qkv ""; one qkv44 8b-int4 qkv 44; one qkv60 8b-int4 qkv 60; one qkv25 8b-int4 qkv 25
  done
  for m in 1b-int4 70b-int4; do one main $m "" ""; one qkv $m qkv ""; one qkv44 $m qkv 44; done
} | tee $R/step.txt
t stepped
DB_EXP_FRAG=qkv DB_EXP_FLOOR_FRAG=44 DB_TRACE_OUT=$R/trace-qkv44.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so \
  timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
python3 scripts/trace_step.py $R/trace-qkv44.csv 0 127 > $R/trace-qkv44.txt 2>&1; head -11 $R/trace-qkv44.txt; gzip $R/trace-qkv44.csv
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
