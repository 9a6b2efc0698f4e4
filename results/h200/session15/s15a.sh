#!/usr/bin/env bash
# Session 15 run 1: the byte-pair int4 dot (DB_EXP_PRMT=1, branch wip-s15-prmt) against main's
# in one session: gpu tests with it, the GEMV bench per 8b shape, the step, and ncu's pipe
# utilization of the 8b gate/up kernel both ways.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 --target decodebench decodebench_gemv_bench > $R/build.log 2>&1; echo "build rc=$?" ) &
( cmake -S . -B build-p $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_PRMT=1 >/dev/null && cmake --build build-p -j8 > $R/build-p.log 2>&1; echo "build p rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 150 ctest --test-dir build-p -L gpu -j8 --output-on-failure > $R/ctest-gpu-p.txt 2>&1; echo "ctest p rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu-p.txt | head; t tested
{ for i in 1 2; do for sh in "8b qkv" "8b o" "8b gate/up" "8b down" "70b qkv"; do for b in build-gpu build-p; do
  echo "$b $(./$b/decodebench_gemv_bench --only "$sh" int4)"; done; done; done; } | tee $R/bench.txt; t benched
step() {  # label binary model
  timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int4 70b-int4; do step main build-gpu/decodebench $m; step prmt build-p/decodebench $m; done; } | tee $R/step.txt; t stepped
M="regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__inst_executed.sum"
for b in build-gpu build-p; do
  timeout 60 ncu --clock-control none -k regex:gemv_rows --launch-skip 4 --launch-count 1 --metrics "$M" ./$b/decodebench_gemv_bench --only "8b gate/up" int4 > $R/ncu-$b.txt 2>&1; echo "ncu $b rc=$?"
done
grep -E "pct|duration|inst_executed.sum" $R/ncu-build-gpu.txt | grep -v " 0$\| 0,00$" | head -40
t ncu
for b in build-gpu build-p; do
  cuobjdump -sass build-p/decodebench_gemv_bench > /dev/null 2>&1
  cuobjdump -sass ./$b/decodebench_gemv_bench | awk '/Function :/ {on = ($0 ~ /SchemeE2ELi1ELi8ELb0ELb0E/)} on && /\/\*[0-9a-f]+\*\// {split($0, a, "*/"); s=a[2]; gsub(/^[ \t]+/, "", s); sub(/^@!?U?P[0-9T] /, "", s); split(s, o, /[ .;]/); n[o[1]]++} END {for (k in n) print n[k], k}' | sort -rn | head -25 > $R/sass-$b.txt
done
paste $R/sass-build-gpu.txt $R/sass-build-p.txt | head -25
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
