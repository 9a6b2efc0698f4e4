#!/usr/bin/env bash
# Where the landed skinny GEMM's warps wait: Nsight Compute's stall reasons for the int4 kernel
# at 8 sequences (4 row tiles, 1 chunk: skinny_kernel<int4, 4, 1, 1>) on 8b's gate/up, beside
# the rows GEMV at batch 1 on the same matrix. From the repository root, on the GPU machine
# (libre2-dev as in ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-2/stalls.sh
# Prediction (before running): both kernels' first stall is long_scoreboard (a weight load
# not yet back), the skinny's at more cycles an instruction; the skinny's barrier and
# math-pipe stalls small. A measurement: no kill criterion; at most one device call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-2/run5}
mkdir -p "$out"
b=build-gpu
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench_skinny_bench; } >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
m=dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__average_warp_latency_per_inst_issued.ratio,sm__warps_active.avg.per_cycle_active
for r in long_scoreboard short_scoreboard barrier math_pipe_throttle mio_throttle lg_throttle wait not_selected \
  selected dispatch_stall no_instruction branch_resolving drain membar tex_throttle imc_miss; do
  m=$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
# The bench times 4 + 40 launches a batch: B = 1, 2, 4 come before 8. A metric this ncu does
# not know fails the run: then the WarpStateStats section with all its details instead.
what="--metrics $m"
ncu --clock-control none --kernel-name-base mangled -k 'regex:skinny_kernelILNS_6SchemeE2ELi4ELi1ELi1E' \
  --launch-skip 132 -c 1 $what $b/decodebench_skinny_bench 28672 4096 >"$out/ncu-skinny-b8.txt" 2>&1
if grep -q "==ERROR==" "$out/ncu-skinny-b8.txt"; then
  what="--section WarpStateStats --section SpeedOfLight --print-details all"
  ncu --clock-control none --kernel-name-base mangled -k 'regex:skinny_kernelILNS_6SchemeE2ELi4ELi1ELi1E' \
    --launch-skip 132 -c 1 $what $b/decodebench_skinny_bench 28672 4096 >"$out/ncu-skinny-b8.txt" 2>&1
fi
ncu --clock-control none --kernel-name-base mangled -k 'regex:gemv_rows_kernelILNS_6SchemeE2' -c 1 $what \
  $b/decodebench_skinny_bench 28672 4096 >"$out/ncu-gemv.txt" 2>&1
for f in ncu-skinny-b8 ncu-gemv; do
  echo "== $f"; grep -iE "error|skinny_kernel|gemv_rows|dram|duration|latency|warps_active|stall|cycles per" "$out/$f.txt" |
    grep -vE " 0(\.0+)?$" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -30
done
