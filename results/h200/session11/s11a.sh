#!/usr/bin/env bash
# Prepared at the end of session 10 for the next session's first device run (results/NOTES.md,
# "Next, from session 10" (2)): branch int4-frag-main (the tensor-core int4 dot on the largest
# matrices only, int4_frag::preferred) against main. Before running, locally, on the branch:
#   rm -rf .devrun/src-*; mkdir -p .devrun/src-m
#   git archive main -- CMakeLists.txt src include kernels configs scripts tests | tar x -C .devrun/src-m
#   git rev-parse --short=12 HEAD > .devrun/commit
# then run(command="bash .devrun/next.sh", carry=[".devrun"]). ~4 minutes. Land it if 70b-int4
# is faster (predicted ~-3.5%) and 8b/1b/4b-int4 are not slower; then the matrix.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench decodebench_gemv_bench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 240 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
step() {  # label binary model
  timeout 60 $2 --model $3 --graph on -o $R/$1-$3.json > $R/$1-$3.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/$1-$3.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$1-$3.json)"
}
{ for i in 1 2; do for m in 8b-int4 70b-int4 1b-int4 4b-int4; do step main .devrun/src-m/build/decodebench $m; step frag build-gpu/decodebench $m; done; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b gate/up" "8b down" "70b gate/up" "70b down" "70b qkv"; do
  echo "main $(timeout 30 .devrun/src-m/build/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "frag $(timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
