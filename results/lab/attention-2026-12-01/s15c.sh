#!/usr/bin/env bash
# Run 3 (attention-2026-12-01): the attention split merge with every head at once (branch s15-merge) against
# its parent (main 018acd9, .devrun/src-m): every gpu test, then A/B on one machine at
# --context 4096 (where the merge runs: 33-34 splits) and at context 0 (one split: no merge).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/ctx4096; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; tar czf $OUT/r.tgz -C $OUT r; exit 1; fi
step() {  # label binary model context [json]
  timeout 120 $2 --model $3 --graph on --context $4 -o ${5:-$R/c.json} > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' ${5:-$R/c.json})"
}
M=.devrun/src-m/build/decodebench N=build-gpu/decodebench
{ for m in 8b-int4 8b-int8 8b-fp16 1b-int4 8b-int4; do step parent $M $m 4096; step new $N $m 4096 $R/ctx4096/$m.json; done
  for m in 8b-int4 8b-int8; do step parent $M $m 0; step new $N $m 0; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
