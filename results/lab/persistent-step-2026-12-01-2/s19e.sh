#!/usr/bin/env bash
# Run 9 (persistent-step-2026-12-01-2, final): the whole build on the series' last code, every
# gpu test, 8b-int4's step twice (decodebench's step did not change in this series), and the chain bench
# as committed (16 warps of 4 rows: every check, the balanced lines).
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; t built
grep -hE "error|warning" $R/build.log | head
(cd build-gpu && timeout 200 ctest -L gpu -j12 2>&1 | grep -E "tests passed|tests failed|Failed|\*\*\*" | head) | tee $R/ctest.txt; t tests
for i in 1 2; do timeout 60 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "8b-int4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"; done | tee $R/step.txt
timeout 100 build-gpu/decodebench_chain_bench > $R/chain-w16.txt 2>&1; echo "chain w16 rc=$?"
grep -E "kernels|balanced|FAILED" $R/chain-w16.txt; t done
rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
