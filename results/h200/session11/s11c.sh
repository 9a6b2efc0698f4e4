#!/usr/bin/env bash
# Session 11 run 4: landing run. build-gpu = the staged QKV kernel (a4a4fb4, on top of
# land-frag 822b9e1), .devrun/src-f = land-frag alone, .devrun/src-m = main (5ca480c).
# gpu tests on the candidate; A/B on 8b/1b-int4 twice, 70b/4b-int4 once; if the staged
# kernel makes 8b-int4 >= 0.5% faster, the matrix on it, ctx4096.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j10 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
( cd .devrun/src-f && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-f.log 2>&1; echo "build f rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 240 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; exit 1; fi
step() {  # label binary model
  local c=$DB_GIT_COMMIT; [ $1 = frag ] && c=$(cat .devrun/commit-f)
  DB_GIT_COMMIT=$c timeout 60 $2 --model $3 --graph on -o $R/$1-$3.json > $R/$1-$3.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/$1-$3.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$1-$3.json)"
}
{ for i in 1 2; do for m in 8b-int4 1b-int4; do step main .devrun/src-m/build/decodebench $m; step frag .devrun/src-f/build/decodebench $m; step staged build-gpu/decodebench $m; done; done
  for m in 70b-int4; do step main .devrun/src-m/build/decodebench $m; step frag .devrun/src-f/build/decodebench $m; step staged build-gpu/decodebench $m; done
  step main .devrun/src-m/build/decodebench 4b-int4; step staged build-gpu/decodebench 4b-int4; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
gain=$(awk '/ 8b-int4 /{v=$4+0; if ($1=="main") m+=v; if ($1=="staged") s+=v} END {print (s < 0.995*m) ? 1 : 0}' $R/step.txt)
echo "staged faster on 8b-int4: $gain"
if [ "$gain" = 1 ]; then
  nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
  timeout 300 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
  cut -d'|' -f2-5,7,10-11,15-18 $R/h200/matrix.md | grep -E "int4|int8 .*gemv .*on" | head -20
  t matrix; tar czf $OUT/r.tgz -C $OUT r
  timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --context 4096 -o $R/8b-int4-context-4096.json > $R/ctx4096.txt 2>&1; grep TPOT $R/ctx4096.txt
fi
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
