#!/usr/bin/env bash
# Prepared in session 14 for the next session (compiled, never run on a GPU): item 81 (b),
# clusters of blocks sharing x. Run from branch wip-s15-cluster (main + DB_EXP_CLUSTER=N: the
# int4 nibble-layout GEMVs whose grid N divides run as clusters of N blocks; each block
# fetches 1/N of x into its shared memory and reads the rest from its neighbours').
# First correctness (every gpu test with the switch: the gemv tests go through the same
# launcher), then the step, A/B in one build.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head; t built
DB_EXP_CLUSTER=4 timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu-cluster4.txt 2>&1; echo "ctest cluster4 rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu-cluster4.txt | head; t tested
one() {  # label model cluster
  DB_EXP_CLUSTER=$3 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$1 $2 rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  [ $rc -ne 0 ] && tail -2 $R/c.txt
}
{ for i in 1 2; do for c in "" 2 4 8; do one "c$c" 8b-int4 "$c"; done; done
  for m in 4b-int4 1b-int4 70b-int4; do for c in "" 4; do one "c$c" $m "$c"; done; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
