#!/usr/bin/env bash
# Run 2 (persistent-step-2026-12-01-2): the balanced persistent kernel (persistent-step §6) in the chain bench, at 16
# warps of 4 rows (w16), 16 warps of 8 rows in two groups (w16r8) and 8 warps of 8 rows (w8r8),
# beside the kernels and the variants of persistent-step-2026-12-01 on the same machine.
# Run: VARIANTS="w16 w16r8 w8r8" bash results/lab/persistent-step-2026-12-01-2/s19a.sh
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j6 --target decodebench_chain_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
declare -A FL=([w16]="" [w16r8]="-DCHAIN_ROWS=8" [w8r8]="-DCHAIN_WARPS=8 -DCHAIN_ROWS=8")
for v in ${VARIANTS:-w16 w16r8 w8r8}; do b $v "${FL[$v]}" & done; wait; t built
grep -h "error" $R/build-*.log | head
for v in ${VARIANTS:-w16 w16r8 w8r8}; do
  timeout 200 build-$v/decodebench_chain_bench $ARGS 2>&1 | grep -v "ok$" | sed "s/^/$v /" | tee -a $R/chain.txt
done; t done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
