#!/usr/bin/env bash
# Run 2 (int4-kernel-2026-12-01-2, int4-kernel §22): why 8b-int4 without zero points (fewer bytes) ran 9% slower than
# with them in run 1. The same build (m0, no switches) on both models, with the kernel trace
# (step 0 summarized per role by scripts/trace_step.py) and nvidia-smi sampling power, SM clock
# and throttle reasons every 100 ms during each untraced run.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-m0 $CM "-DCMAKE_CUDA_FLAGS=" >/dev/null &&
  cmake --build build-m0 -j16 --target decodebench decodebench_kernel_trace > $R/build-m0.log 2>&1; echo "build rc=$?"; t built
B=build-m0/decodebench; LIB=$(find build-m0 -name 'libdecodebench_kernel_trace.so' | head -1)
for i in 1 2; do for m in 8b-int4 .devrun/8b-int4-nozp.json; do
  n=$(basename $m .json)
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,clocks_throttle_reasons.active,temperature.gpu --format=csv,noheader -lms 100 > $R/smi-$n-$i.csv &
  SP=$!; timeout 120 $B --model $m --graph on -o $R/$n-$i.json > $R/$n-$i.txt 2>&1; echo "$n $i rc=$?: $(grep -E '^TPOT' $R/$n-$i.txt)"; kill $SP
  sort -t, -k2 -n $R/smi-$n-$i.csv | awk -F, '{p[NR]=$2; c[NR]=$3; th[$5]++} END {print "  power median", p[int(NR/2)], "max", p[NR], " samples", NR; for (k in th) print "  throttle", k, th[k]}'
  awk -F, '{print $3}' $R/smi-$n-$i.csv | sort | uniq -c | sort -rn | head -3 | sed 's/^/  sm clock /'
done; done
for m in 8b-int4 .devrun/8b-int4-nozp.json; do n=$(basename $m .json)
  DB_TRACE_OUT=$R/trace-$n.csv CUDA_INJECTION64_PATH=$LIB timeout 120 $B --model $m --graph on --tokens 16 --warmup 4 --repeat 1 -o $R/tr-$n.json > /dev/null 2>&1
  echo "== trace $n"; python3 scripts/trace_step.py $R/trace-$n.csv 0 | head -30; gzip $R/trace-$n.csv; done
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
