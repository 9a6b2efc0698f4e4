#!/usr/bin/env bash
# Prepared at the end of session 11 for session 12's first device run (results/NOTES.md,
# "Next, from session 11" (1)): branch wip-s11-carveout2, the preferred L1 / shared-memory
# carveout per kernel class: DB_EXP_CO_FP16 / _INT8 / _INT4 for the rows kernels by scheme
# (fp16's also serves every fp16 lm_head), DB_EXP_CO_OTHER for every other kernel. Before
# running, locally, on the branch:  git rev-parse --short=12 HEAD > .devrun/commit
# then run(command="bash .devrun/next.sh", carry=[".devrun"]). ~5 minutes. Percent of the
# largest configuration (228 KB) rounds up to a supported one on the H200: 3 -> 8 KB, 14 ->
# 32 KB, 25 -> 64 KB of shared memory (the rest of 256 KB is L1). The driver's own choices
# (session 11's trace): attention 164 KB, int4 qkv/o/gate-up and fp16 lm_head 32 KB, int4
# down 8 KB. Configurations (label OTHER FP16 INT8 INT4): unset (= main), uniform 25
# (b62f5e1), the GEMVs at 32 KB with the rest at 64 or 32, the GEMVs at 8 KB, the GEMVs at
# the driver's choice, fp16's at the driver's choice. Land the best as constants (branch
# land-carveout shows the form), then the gpu tests and the matrix.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"
t built
cfg() {  # label OTHER FP16 INT8 INT4 (- for unset)
  local l=$1; shift
  local v=("$@"); for i in 0 1 2 3; do [ "${v[$i]}" = - ] && v[$i]=""; done
  for m in 8b-fp16 8b-int8 8b-int4 4b-int8 4b-fp16 1b-int8; do
    DB_EXP_CO_OTHER=${v[0]} DB_EXP_CO_FP16=${v[1]} DB_EXP_CO_INT8=${v[2]} DB_EXP_CO_INT4=${v[3]} \
      timeout 60 build-gpu/decodebench --model $m --graph on -o $R/c.json > $R/c.txt 2>&1
    echo "$l $m rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json) $(grep carveout $R/c.txt | head -1)"
  done
}
{ cfg unset - - - -
  cfg all25 25 25 25 25
  cfg g14o25 25 14 14 14
  cfg all14 14 14 14 14
  cfg g3o25 25 3 3 3
  cfg gdefo25 25 - - -
  cfg fp16def 25 - 25 25
  cfg unset2 - - - - ; } | tee $R/step.txt
t stepped; tar czf $OUT/r.tgz -C $OUT r
# What configuration each kernel ran in (the trace's smem_executed), without and with g14o25.
for l in unset g14o25; do
  co=(); [ $l = g14o25 ] && co=(DB_EXP_CO_OTHER=25 DB_EXP_CO_FP16=14 DB_EXP_CO_INT8=14 DB_EXP_CO_INT4=14)
  env "${co[@]}" DB_TRACE_OUT=$R/trace-$l.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so \
    timeout 60 build-gpu/decodebench --model 8b-int8 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
  python3 scripts/trace_step.py $R/trace-$l.csv 0 127 > $R/trace-$l.txt 2>&1; echo "== $l"; grep -E "step|gate_up|down|qkv| o |attention|lm_head" $R/trace-$l.txt | head -7
  gzip $R/trace-$l.csv
done
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
