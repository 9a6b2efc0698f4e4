#!/usr/bin/env bash
# session 10, run 1: cross-kernel L2 prefetch (wip-s10-xpf, DB_EXP_XPF="mode,groups,who"): each
# GEMV prefetches the first groups of the next GEMV's blocks, in the idle memory between kernels
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
TG="--target decodebench decodebench_gemv_bench"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j10 $TG > $R/build-x.log 2>&1; echo "build x rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j6 $TG > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
M=.devrun/src-m/build/decodebench; X=build-gpu/decodebench
{
step main $M 8b-int4; step x0 $X 8b-int4
for c in 1,1,15 2,1,15 5,1,15 6,1,15 9,1,15 1,1,2 1,2,2 1,3,2 2,2,2 1,1,8 5,1,8 1,1,4 5,1,4 1,1,1; do step "x$c" $X 8b-int4 DB_EXP_XPF=$c; done
step main $M 8b-int4; step x0 $X 8b-int4
for m in 8b-int8 8b-fp16 4b-int8; do step main $M $m; step x0 $X $m; step x1,1,15 $X $m DB_EXP_XPF=1,1,15; step x2,1,15 $X $m DB_EXP_XPF=2,1,15; done
} | tee $R/step.txt
rm -f $R/*.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
