#!/usr/bin/env bash
# Prepared in session 15 for the next session (compiled for sm_90, never run on a GPU): the
# attention kernel waits for its V rows only before P V (DB_EXP_VLATE, item 86's lead), so that
# they arrive under the scores and the softmax. Apply first, on main c92642a or later:
#   git apply results/h200/session15/s15-vlate.patch
# then copy this script to .devrun/next.sh (about 5 minutes of device time). Three builds:
# 0 = main's order, 1 = V waited for late with the O GEMV's trigger where it is, 2 = the
# trigger moved after the late wait. Every gpu test with 1 and 2, then A/B at --context 4096
# and at context 0. Predicted: -0.02 to -0.06 ms for 8b at 4096 with 1 or 2; context 0
# unchanged, or slower with 1 for int8/fp16 if the O GEMV's loads queue in front of V
# (NOTES item 20).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
for v in 0 1 2; do
  ( cmake -S . -B build-v$v $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_VLATE=$v >/dev/null &&
    cmake --build build-v$v -j5 --target decodebench decodebench_gpu_tests > $R/build-v$v.log 2>&1; echo "build v$v rc=$?" ) &
done
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
for v in 1 2; do
  timeout 120 ctest --test-dir build-v$v -L gpu -E "memcheck|kernel_trace" -j8 --output-on-failure > $R/ctest-v$v.txt 2>&1
  echo "ctest v$v rc=$?: $(grep -E 'tests passed' $R/ctest-v$v.txt)"
done; t tested
step() {  # label binary model context
  timeout 120 $2 --model $3 --graph on --context $4 -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 ctx $4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 8b-int8 8b-int4; do for v in 0 1 2; do step v$v build-v$v/decodebench $m 4096; done; done
  for m in 8b-int4 8b-int8 8b-fp16; do for v in 0 1 2; do step v$v build-v$v/decodebench $m 0; done; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
