#!/usr/bin/env bash
# Session 18 run 16: ncu on the chain bench's persistent kernel (16 warps, CUDA-core dot):
# where do the consumers' cycles go? flags 26 = static | no copy | no x staging (the
# consumers alone), 2 = static, no waits (with the copies), 3 = static with waits.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-gpu -j16 --target decodebench_chain_bench > $R/build.log 2>&1; echo "build rc=$?"; t built
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --metrics smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fmaheavy_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
for f in 26 2 3; do
  timeout 150 ncu --clock-control none -k regex:chain_kernel --launch-skip 3 --launch-count 1 $S \
    build-gpu/decodebench_chain_bench --layers 8 --only $f --reps 2 > $R/ncu-$f.txt 2>&1; echo "ncu $f rc=$?"; t ncu $f
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
