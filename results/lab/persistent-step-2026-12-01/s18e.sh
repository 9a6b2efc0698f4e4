#!/usr/bin/env bash
# Run 14 (persistent-step-2026-12-01): the chain bench with the tensor-core dot (fragment layout, 8 rows a warp)
# at 8 and 16 consumer warps, beside the CUDA-core dot at 16 warps: is the consumers' dot,
# the bound of runs 11-13, faster with a third of the instructions? (Run 15: VARIANTS="f8 f16",
# the fragment builds checked against the rows kernel's fragment path, as run 14's check
# against the nibble path failed on 36 matrices by the fp16 sums of the nibble dot.)
# Run 17: VARIANTS="w16 w16spin f16", the mbarrier waits suspending instead of spinning
# (w16spin: the spinning waits of runs 1-16, beside it on the same machine).
# Run 18: VARIANTS="w16 w16r8", the consumers' slot and phase kept without a division, one
# x buffer (a slot more), and 8 rows a warp with the CUDA-core dot (w16r8).
# Then run 1 of persistent-step-2026-12-01-2 (on ff876d5): VARIANTS="w16 w16r8 w8r8" adds 8 warps
# of 8 rows (64-row stages of 33 KB: 6 slots where w16r8 has 2), lead (2) of persistent-step §4.
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j6 --target decodebench_chain_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
declare -A FL=([w16]="" [f8]="-DCHAIN_FRAG=1" [f16]="-DCHAIN_FRAG=1 -DCHAIN_WARPS=16" [w16spin]="-DCHAIN_SPIN=1" [w16r8]="-DCHAIN_ROWS=8" [w8r8]="-DCHAIN_WARPS=8 -DCHAIN_ROWS=8")
for v in ${VARIANTS:-w16 f8 f16}; do b $v "${FL[$v]}" & done; wait; t built
grep -h "error" $R/build-*.log | head
for v in ${VARIANTS:-w16 f8 f16}; do
  timeout 200 build-$v/decodebench_chain_bench 2>&1 | grep -v "ok$" | sed "s/^/$v /" | tee -a $R/chain.txt
done; t done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
