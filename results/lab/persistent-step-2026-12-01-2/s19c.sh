#!/usr/bin/env bash
# Run 6 (persistent-step-2026-12-01-2): the two-group build's fault in "balanced, no dot" (no waits; run 5: two
# launch failures and a hang in three tries), under compute-sanitizer, and the one-group build
# on the same flags.
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
R=$OUT/r; mkdir -p $R
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-w16r8 $CM "-DCMAKE_CUDA_FLAGS=-DCHAIN_ROWS=8" >/dev/null && cmake --build build-w16r8 -j8 --target decodebench_chain_bench > $R/b1.log 2>&1 &
cmake -S . -B build-w16 $CM >/dev/null && cmake --build build-w16 -j8 --target decodebench_chain_bench > $R/b2.log 2>&1 &
wait; echo built
for f in 132 140; do
  timeout 15 build-w16/decodebench_chain_bench --only $f --reps 200 > $R/w16-$f.txt 2>&1; echo "w16 flags $f rc=$? $(tail -1 $R/w16-$f.txt)"
  timeout 15 build-w16r8/decodebench_chain_bench --only $f --reps 50 > $R/w16r8-$f.txt 2>&1; echo "w16r8 flags $f rc=$? $(tail -1 $R/w16r8-$f.txt)"
done
for tool in memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool build-w16r8/decodebench_chain_bench --layers 4 --only 132 --reps 20 > $R/san-$tool.txt 2>&1
  echo "sanitizer $tool rc=$?"; grep -v "ok$" $R/san-$tool.txt | head -30
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
