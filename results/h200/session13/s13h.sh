#!/usr/bin/env bash
# Session 13 run 10: traces of 8b-int4 as main and with a fragment QKV built by shuffles
# (item 76), steps 0 and 127. Branch wip-s13-achunk.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
for l in main qkvshfl main2 qkvshfl2; do
  e=(); case $l in qkvshfl*) e=(DB_EXP_FRAG=qkv DB_EXP_FRAG_SHFL=1);; esac
  env "${e[@]}" DB_TRACE_OUT=$R/trace-$l.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so \
    timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
  python3 scripts/trace_step.py $R/trace-$l.csv 0 127 > $R/trace-$l.txt 2>&1; echo "== $l"; head -9 $R/trace-$l.txt
  rm -f $R/trace-$l.csv
done
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
