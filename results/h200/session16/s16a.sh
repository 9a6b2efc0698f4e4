#!/usr/bin/env bash
# Session 16 run 1. Two changes against main (93abe18, .devrun/src-m):
# (a) item 89: the rows GEMV loads what finishing a group reads (the residual stream's old values,
#     the LoRA addend) with x, a group ahead, instead of after the group's reduction;
# (b) item 90: session 15's prepared DB_EXP_VLATE (0 = main's order, 1 = attention waits for its V
#     rows only before P V, 2 = and moves the O GEMV's trigger after that wait), on top of (a).
# Every gpu test on (a) with VLATE=0; A/B at context 0 (parent / new, interleaved) and at
# --context 4096 (v0 / v1 / v2, same tokens expected).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j3 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
for v in 1 2; do
  ( cmake -S . -B build-v$v $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_VLATE=$v >/dev/null &&
    cmake --build build-v$v -j3 --target decodebench > $R/build-v$v.log 2>&1; echo "build v$v rc=$?" ) &
done
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu.txt | head; t tested
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; tar czf $OUT/r.tgz -C $OUT r; exit 1; fi
step() {  # label binary model context
  timeout 120 $2 --model $3 --graph on --context $4 -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
M=.devrun/src-m/build/decodebench N=build-gpu/decodebench
{ for m in 8b-int4 8b-int8 8b-fp16 4b-int4 1b-int4 8b-int4; do step parent $M $m 0; step new $N $m 0; done
  for m in 8b-int4 8b-int8 8b-int4; do step v0 $N $m 4096; step v1 build-v1/decodebench $m 4096; step v2 build-v2/decodebench $m 4096; done
  for m in 8b-int4 8b-int8; do step v1 build-v1/decodebench $m 0; step v2 build-v2/decodebench $m 0; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
