#!/usr/bin/env bash
# Run 5 (launch-cost-2026-11-30-3): the carveout floor (kernels/carveout.h kMinCarveoutPercent): main's 14
# (32 KB on H200) against 7 (16 KB) and 0 (each launch only what its resident blocks need).
# Three copies of main (3a9b531 + results) under .devrun/src-m, src-f7, src-f0.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
for v in m f7 f0; do
  ( cd .devrun/src-$v && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 --target decodebench > $R/build-$v.log 2>&1; echo "build $v rc=$?" ) &
done
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label model
  timeout 90 .devrun/src-$1/build/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $2 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do for m in 8b-fp16 8b-int8 8b-int4 4b-int8 4b-fp16 1b-fp16; do for v in m f7 f0; do step $v $m; done; done; done; } | tee $R/step.txt
rm -f $R/c.json; t stepped; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
