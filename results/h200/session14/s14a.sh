#!/usr/bin/env bash
# Session 14 run 1: what each dependency of the step costs with today's kernels. Branch
# wip-s14-nowait: DB_EXP_NOWAIT names the GEMVs (qkv, o, gate_up, down) that skip their
# pdl_wait and race the kernel before them. Timing only: their tokens are garbage.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
one() {  # label model nowait
  DB_EXP_NOWAIT=$3 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $2 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
ALL=qkv,o,gate_up,down
{ for i in 1 2; do one base 8b-int4 ""; one down 8b-int4 down; one gate_up 8b-int4 gate_up; one o 8b-int4 o
    one qkv 8b-int4 qkv; one all 8b-int4 $ALL; done
  one mlp 8b-int4 gate_up,down; one attn 8b-int4 qkv,o
  for m in 8b-int8 8b-fp16 1b-int4; do one base $m ""; one all $m $ALL; done
  one base 8b-int4 ""; } | tee $R/step.txt
t stepped
DB_EXP_NOWAIT=$ALL DB_TRACE_OUT=$R/trace-all.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so timeout 90 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/trace-all.txt 2>&1; echo "trace rc=$?"
DB_TRACE_OUT=$R/trace-base.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so timeout 90 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/trace-base.txt 2>&1; echo "trace rc=$?"
gzip $R/trace-*.csv
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
