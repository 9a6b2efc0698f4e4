#!/usr/bin/env bash
# Session 18 run 13: the chain bench's split mode (a work item is one 33 KB stage, partial
# sums added into fp32, the epilogue applied as the next matrix stages its input), 16 warps.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-gpu -j16 --target decodebench_chain_bench > $R/build.log 2>&1; echo "build rc=$?"; t built
timeout 250 build-gpu/decodebench_chain_bench 2>&1 | tee $R/chain.txt; t chain
timeout 200 build-gpu/decodebench_chain_bench --check static --reps 10 2>&1 | grep -E "FAIL|differ|split|static" | grep -v "check" | sed "s/^/check-static /" | tee -a $R/chain.txt; t done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
