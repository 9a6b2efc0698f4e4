#!/usr/bin/env bash
# Session 11 run 7: landing run of land-frag + the uniform carveout (b62f5e1): gpu tests, A/B
# against main (5ca480c, .devrun/src-m), the matrix.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j13 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 150 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; exit 1; fi
step() {  # label binary model
  timeout 60 $2 --model $3 --graph on -o $R/$1-$3.json > $R/$1-$3.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/$1-$3.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$1-$3.json)"
}
{ for i in 1 2; do for m in 8b-int8 8b-int4 8b-fp16 4b-int8 1b-int4; do step main .devrun/src-m/build/decodebench $m; step new build-gpu/decodebench $m; done; done
  step main .devrun/src-m/build/decodebench 70b-int4; step new build-gpu/decodebench 70b-int4; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
timeout 200 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
cut -d'|' -f2-5,7,10-11,15-18 $R/h200/matrix.md | grep -E "gemv .*on" | head -20
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
