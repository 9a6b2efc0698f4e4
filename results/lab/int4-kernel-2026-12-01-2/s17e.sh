#!/usr/bin/env bash
# Run 5 (int4-kernel-2026-12-01-2): the landing run of int4-kernel §22-§23 (ce7e2d9: the packed int4 meta padded to
# whole blocks of 8 rows, no per-group branch). Build it and its parent (be01c1c, .devrun/src-m),
# every gpu test, A/B on one machine (asymmetric and symmetric int4, int8 unchanged), then the
# matrix of issue 4 (scripts/bench_matrix.sh) on the new build.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu.txt | head; t tested
tar czf $OUT/r.tgz -C $OUT r
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; exit 1; fi
step() {  # label binary model
  timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=.devrun/src-m/build/decodebench N=build-gpu/decodebench
{ for m in 8b-int4 4b-int4 .devrun/8b-int4-nozp.json 1b-int4 8b-int8 8b-int4; do step parent $M $m; step new $N $m; done; } | tee $R/step.txt
rm -f $R/c.json $R/c.txt; t stepped; tar czf $OUT/r.tgz -C $OUT r
nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
timeout 220 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
cut -d'|' -f2-5,10,11,15-19 $R/h200/matrix.md | grep -E "gemv .*on" | head -20
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
