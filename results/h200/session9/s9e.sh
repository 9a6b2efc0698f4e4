#!/usr/bin/env bash
# session 9, run 5: teams (wip-s9-teams, DB_EXP_TEAMS=1: the int4 blocks sharing an SM as one block
# that stages x once) against main fd20cae; gpu tests with teams on
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j5 --target decodebench decodebench_gemv_bench > $R/build-main.log 2>&1; echo "build main rc=$?" ) &
( cd .devrun/src-t && cmake -S . -B build $CM >/dev/null && cmake --build build -j11 > $R/build-t.log 2>&1; echo "build t rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
M=build-gpu/decodebench; X=.devrun/src-t/build/decodebench
{
for m in 8b-int4 4b-int4 1b-int4 70b-int4 8b-int4; do step main $M $m; step teams0 $X $m; step teams1 $X $m DB_EXP_TEAMS=1; done
} | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do
  echo "main $(timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "teams0 $(timeout 30 .devrun/src-t/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "teams1 $(DB_EXP_TEAMS=1 timeout 30 .devrun/src-t/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
DB_EXP_TEAMS=1 timeout 200 ctest --test-dir .devrun/src-t/build -L gpu -j8 --output-on-failure > $R/ctest-t.txt 2>&1; echo "ctest teams1 rc=$?"; grep -E "tests passed|\(Failed\)" $R/ctest-t.txt | head
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
