#!/usr/bin/env bash
# Session 18 run 12: the chain bench with 8 and with 16 consumer warps (stages of 32 and 64
# rows x 1024 columns, 4 rows a warp): does the consumers' dot, the bound in run 11, scale
# with warps?
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j8 --target decodebench_chain_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
b w8 "" & b w16 "-DCHAIN_WARPS=16" & wait; t built
for v in ${VARIANTS:-w8 w16}; do
  timeout 200 build-$v/decodebench_chain_bench 2>&1 | grep -v "non-finite outputs" | sed "s/^/$v /" | tee -a $R/chain.txt
  timeout 200 build-$v/decodebench_chain_bench --check static --reps 10 2>&1 | grep -E "FAIL|differ|persistent, static " | sed "s/^/$v check-static /" | tee -a $R/chain.txt
done; t done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
