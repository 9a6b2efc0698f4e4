#!/usr/bin/env bash
# Run 10 (int4-tensor-core-2026-11-30-4): the fragment layout on more int4 matrices, in the step, against main:
# "tall" (.devrun/src-t): rows > cols (qkv, gate/up) or >= 2e8 weights; "qkv" (.devrun/src-q):
# cols < rows <= 2 cols (8b/4b/1b qkv) or >= 2e8 weights. int4_frag::preferred changed only.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j6 --target decodebench > $R/build.log 2>&1; echo "build rc=$?" ) &
for v in t q; do
  ( cd .devrun/src-$v && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 --target decodebench > $R/build-$v.log 2>&1; echo "build $v rc=$?" ) &
done
wait; t built
step() {  # label binary model
  timeout 60 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=build-gpu/decodebench T=.devrun/src-t/build/decodebench Q=.devrun/src-q/build/decodebench
{ for i in 1 2; do for m in 8b-int4 1b-int4; do step main $M $m; step tall $T $m; step qkv $Q $m; done; done
  step main $M 4b-int4; step tall $T 4b-int4; step qkv $Q 4b-int4; } | tee $R/step.txt
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
