#!/usr/bin/env bash
# session 9, run 1: wip-int4-tail (src-b) and wip-l2-next (src-pf, DB_EXP_PF=first,loop) against main
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
TG="--target decodebench decodebench_gemv_bench"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j5 $TG > $R/build-main.log 2>&1; echo "build main rc=$?" ) &
( cd .devrun/src-b && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 $TG > $R/build-b.log 2>&1; echo "build b rc=$?" ) &
( cd .devrun/src-pf && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 $TG > $R/build-pf.log 2>&1; echo "build pf rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
M=build-gpu/decodebench; B=.devrun/src-b/build/decodebench; P=.devrun/src-pf/build/decodebench
{
for m in 8b-int4 4b-int4 1b-int4; do step main $M $m; step tail $B $m; done
for m in 8b-int4 4b-int4 8b-int8 8b-fp16; do
  step main $M $m
  for pf in 0,0 1,0 2,0 0,1 0,2 1,1 0,4; do step pf$pf $P $m DB_EXP_PF=$pf; done
done
step main $M 8b-int4; step tail $B 8b-int4
} | tee $R/step.txt
t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do
  echo "main $(timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "tail $(timeout 30 .devrun/src-b/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  for pf in 0,0 1,0 2,0 0,1 0,2; do echo "pf$pf $(DB_EXP_PF=$pf timeout 30 .devrun/src-pf/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"; done
done | tee $R/bench.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
