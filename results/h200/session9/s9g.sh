#!/usr/bin/env bash
# session 9, run 7: the fragment dot with its k-steps interleaved across row pairs (one chain per
# pair, src-c1) and with two chains per pair (src-c2), against the nibble layout (DB_EXP_NOFRAG=1)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
TG="--target decodebench decodebench_gemv_bench"
( cd .devrun/src-c1 && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_FRAG_CHAINS=1 >/dev/null && cmake --build build -j8 $TG > $R/build-c1.log 2>&1; echo "build c1 rc=$?" ) &
( cd .devrun/src-c2 && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_FRAG_CHAINS=2 >/dev/null && cmake --build build -j8 $TG > $R/build-c2.log 2>&1; echo "build c2 rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
A=.devrun/src-c1/build/decodebench; B=.devrun/src-c2/build/decodebench
{ for m in 8b-int4 70b-int4 1b-int4 8b-int4; do step nofrag $A $m DB_EXP_NOFRAG=1; step chains1 $A $m; step chains2 $B $m; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down" "1b gate/up"; do
  echo "nofrag $(DB_EXP_NOFRAG=1 timeout 30 .devrun/src-c1/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "chains1 $(timeout 30 .devrun/src-c1/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "chains2 $(timeout 30 .devrun/src-c2/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
