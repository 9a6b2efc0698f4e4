#!/usr/bin/env bash
# Session 18 run 2: the chain bench again (run 1's check failed on 4 matrices with the check
# lines lost to stdout's buffer; the chain's values drifted with depth, so gains are now
# calibrated per matrix and every failure prints where).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-gpu -j16 --target decodebench_chain_bench > $R/build.log 2>&1; echo "build rc=$?"; t built
grep -hE "error|warning" $R/build.log | head
timeout 300 build-gpu/decodebench_chain_bench 2>&1 | tee $R/chain.txt; t chain
timeout 200 build-gpu/decodebench_chain_bench --slots 4 --reps 10 --check static 2>&1 | grep -E "persistent|kernels|waited|FAIL|differ" | sed 's/^/slots4 /' | tee -a $R/chain.txt; t chain4
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
