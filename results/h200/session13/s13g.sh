#!/usr/bin/env bash
# Session 13 run 9: the fragment kernel with x's B registers built by shuffles, no shared
# memory (DB_EXP_FRAG_SHFL=1), so that it asks for the same split as its neighbours and
# leaves attention's block room (item 75). Branch wip-s13-achunk. Correctness: the fragment
# gpu tests with the switch on, and the tokens hash equal to the shared-memory variant's.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"
t built
DB_EXP_FRAG_SHFL=1 timeout 120 ctest --test-dir build-gpu -L gpu -R 'Frag|int4_gemv' -j4 > $R/ctest-shfl.txt 2>&1; echo "ctest shfl rc=$?"; grep -E 'tests passed|Failed|failed' $R/ctest-shfl.txt | head
t tested
one() {  # label model frag shfl
  DB_EXP_FRAG=$3 DB_EXP_FRAG_SHFL=$4 timeout 90 build-gpu/decodebench --model $2 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $2 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do
    one main 8b-int4 "" 0; one qkv 8b-int4 qkv 0; one qkv-shfl 8b-int4 qkv 1; one tall-shfl 8b-int4 tall 1; one all-shfl 8b-int4 all 1
  done
  for m in 1b-int4 4b-int4 70b-int4; do one main $m "" 0; one qkv-shfl $m qkv 1; one all-shfl $m all 1; done
} | tee $R/step.txt
t stepped
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
