#!/usr/bin/env bash
# Session 13 run 6: where the fragment layout's loss sits in the step (item 70). Branch
# wip-s12-floor; 8b-int4 traced (kernel tracer, scripts/trace_step.py) as main, tall and
# tall25, then untraced once each for reference.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
for l in main tall tall25; do
  e=(); [ $l = tall ] && e=(DB_EXP_FRAG=tall); [ $l = tall25 ] && e=(DB_EXP_FRAG=tall DB_EXP_FLOOR_INT4=25)
  env "${e[@]}" timeout 60 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "== $l untraced: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"
  env "${e[@]}" DB_TRACE_OUT=$R/trace-$l.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so \
    timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
  python3 scripts/trace_step.py $R/trace-$l.csv 0 127 > $R/trace-$l.txt 2>&1; cat $R/trace-$l.txt | head -30
  gzip $R/trace-$l.csv
done
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
