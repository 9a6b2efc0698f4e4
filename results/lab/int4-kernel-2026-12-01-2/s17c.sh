#!/usr/bin/env bash
# Run 3 (int4-kernel-2026-12-01-2, int4-kernel §22): the symmetric int4 fix. Symmetric matrices load their zero points
# from a cached constant of 8s through the same instructions as asymmetric ones, instead of
# branching around the loads. Every gpu test on the new tree (symmetric int4 GEMV cases added);
# parent (main, .devrun/src-m) against new on asymmetric and symmetric (nozp) int4 models.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 200 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; fi
build-gpu/decodebench_gpu_tests --gtest_filter='*sym*:*Frag*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|tests ran" | head -5
step() {  # label binary model
  timeout 120 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=.devrun/src-m/build/decodebench N=build-gpu/decodebench
{ for m in 8b-int4 .devrun/8b-int4-nozp.json 4b-int4 .devrun/4b-int4-nozp.json .devrun/1b-int4-nozp.json 8b-int4 .devrun/8b-int4-nozp.json; do
    step parent $M $m; step new $N $m; done
  $N --model .devrun/8b-int4-nozp.json --graph on -o $R/nozp-new.json > /dev/null 2>&1; echo "json kept"; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
