#!/usr/bin/env bash
# Run 19 (persistent-step-2026-12-01, final): the whole build on this series' tree, every gpu test (the
# int4 dot, GroupMeta, the fragment dot and reduce_rows moved into headers: int4_dot.cuh,
# common.cuh; PTX checked identical locally), 8b-int4's step, and the chain bench as
# committed (16 warps, 4 rows a warp) and with 8 rows a warp.
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
{ cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?"; } &
{ cmake -S . -B build-r8 $CM -DCMAKE_CUDA_FLAGS=-DCHAIN_ROWS=8 >/dev/null &&
  cmake --build build-r8 -j4 --target decodebench_chain_bench > $R/build-r8.log 2>&1; echo "build r8 rc=$?"; } &
wait; t built; grep -hE "error|warning" $R/build*.log | grep -v cli_helpers | head
(cd build-gpu && timeout 200 ctest -L gpu -j12 2>&1 | grep -E "tests passed|tests failed|Failed|\*\*\*" | head) | tee $R/ctest.txt; t tests
for i in 1 2; do timeout 60 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "8b-int4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"; done | tee $R/step.txt
timeout 100 build-gpu/decodebench_chain_bench > $R/chain-w16.txt 2>&1; echo "chain w16 rc=$?"
timeout 100 build-r8/decodebench_chain_bench > $R/chain-w16r8.txt 2>&1; echo "chain w16r8 rc=$?"; t done
rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
