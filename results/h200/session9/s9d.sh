#!/usr/bin/env bash
# session 9, run 4: norm_w before the wait (wip-s9-normw, src-n) against main; fold 2 vs fold 3 (x's
# loads all from the same pieces: latency kept, L2 traffic gone); qkv/o double-buffered via DB_EXP_TUNE
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
TG="--target decodebench decodebench_gemv_bench"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j3 $TG > $R/build-main.log 2>&1; echo "build main rc=$?" ) &
( cd .devrun/src-n && cmake -S . -B build $CM >/dev/null && cmake --build build -j6 > $R/build-n.log 2>&1; echo "build n rc=$?" ) &
( cd .devrun/src-f2 && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_FOLD=2 >/dev/null && cmake --build build -j3 $TG > $R/build-f2.log 2>&1; echo "build f2 rc=$?" ) &
( cd .devrun/src-f3 && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_FOLD=3 >/dev/null && cmake --build build -j3 $TG > $R/build-f3.log 2>&1; echo "build f3 rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
M=build-gpu/decodebench; N=.devrun/src-n/build/decodebench
{
for m in 8b-int4 4b-int4 1b-int4 70b-int4 8b-int4; do step main $M $m; step normw $N $m; done
for m in 8b-int4 4b-int4; do step fold2 .devrun/src-f2/build/decodebench $m; step fold3 .devrun/src-f3/build/decodebench $m; done
step normw-qkvDB $N 8b-int4 "DB_EXP_TUNE=;6144x4096=8,1,0,1;"
step normw-qkvR4DB $N 8b-int4 "DB_EXP_TUNE=;6144x4096=4,1,0,1;"
step normw-oR4DB $N 8b-int4 "DB_EXP_TUNE=;4096x4096=4,1,0,1;"
step main $M 8b-int4; step normw $N 8b-int4
} | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do for v in main n f2 f3; do
  b=build-gpu/decodebench_gemv_bench; [ $v != main ] && b=.devrun/src-$v/build/decodebench_gemv_bench
  echo "$v $(timeout 30 $b --only "$sh" int4 2>&1 | grep fast)"
done; done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
timeout 200 ctest --test-dir .devrun/src-n/build -L gpu -j8 --output-on-failure > $R/ctest-n.txt 2>&1; echo "ctest n rc=$?"; grep -E "tests passed|\(Failed\)" $R/ctest-n.txt | head
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
