#!/usr/bin/env bash
# Run 2 (launch-cost-2026-11-30-3): landing run of land-carveout2 (per-launch carveout, floor 14%): build it and
# main (be36f9a, .devrun/src-m), gpu tests, A/B twice, 70b-int4, context 4096.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j13 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 150 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; exit 1; fi
step() {  # label binary model [options]
  local l=$1 b=$2 m=$3; shift 3
  timeout 90 $b --model $m "$@" -o $R/c.json > $R/c.txt 2>&1
  echo "$l $m $* rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=.devrun/src-m/build/decodebench N=build-gpu/decodebench
{ for i in 1 2; do for m in 8b-int8 8b-int4 8b-fp16 4b-int8 4b-fp16 1b-int4; do step main $M $m --graph on; step new $N $m --graph on; done; done
  step main $M 70b-int4 --graph on; step new $N 70b-int4 --graph on
  for m in 8b-int8 8b-fp16; do step main $M $m --context 4096 --graph on; step new $N $m --context 4096 --graph on; step main $M $m --context 4096 --graph on; step new $N $m --context 4096 --graph on; done
  step main $M 8b-int4 --graph off; step new $N 8b-int4 --graph off; } | tee $R/step.txt
rm -f $R/c.json; t stepped; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
