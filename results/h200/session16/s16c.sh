#!/usr/bin/env bash
# Session 16 run 3 (item 92): where the int4 gate/up GEMV's warps wait, ncu's warp-state and
# scheduler sections, for main's nibble kernel (s0), item 91's staged kernel (s1, DB_EXP_SDB=1)
# and the tensor-core fragment kernel forced onto 8b's gate/up (sf, DB_EXP_FRAG_MIN=1e8); main's
# int8 and fp16 gate/up for comparison. Needs s16-sdb.patch and the DB_EXP_FRAG_MIN hook applied.
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" "-DCMAKE_CXX_FLAGS=$3" >/dev/null &&
      cmake --build build-$1 -j5 --target decodebench_gemv_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
b s0 "" "" & b s1 "-DDB_EXP_SDB=1" "" & b sf "-DDB_EXP_FRAG_MIN=100000000" "-DDB_EXP_FRAG_MIN=100000000" &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --metrics smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
n() { timeout 90 ncu --clock-control none -k regex:gemv_rows --launch-skip 4 --launch-count 1 $S ./build-$1/decodebench_gemv_bench --only "$2" $3 > $R/ncu-$1-$3.txt 2>&1; echo "ncu $1 $3 rc=$?"; }
n s0 "8b gate/up" int4; n s1 "8b gate/up" int4; n sf "8b gate/up" int4; n s0 "8b gate/up" int8; n s0 "8b gate/up" fp16
for f in $R/ncu-*.txt; do echo "== $f"; grep -E "Duration|inst_executed.sum|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|Registers Per|pipe_alu|pipe_fma|pipe_tensor|Achieved Occupancy|stalled" $f | tr -s ' ' | head -60; done
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
