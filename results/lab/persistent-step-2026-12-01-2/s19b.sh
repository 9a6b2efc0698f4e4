#!/usr/bin/env bash
# Run 5 (persistent-step-2026-12-01-2): which balanced launches of the two-group build (w16r8) finish. Run 4's
# w16r8 bench stopped after "balanced, no dot, waits" (killed by its timeout).
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
R=$OUT/r; mkdir -p $R
cmake -S . -B build-w16r8 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CUDA_FLAGS=-DCHAIN_ROWS=8" >/dev/null &&
  cmake --build build-w16r8 -j12 --target decodebench_chain_bench > $R/build.log 2>&1; echo "build rc=$?"
for f in 129 128 133 132 136 137; do  # kBal | kWait(1), kNoDot(4), kNoCopy(8)
  for rep in 1 2 3; do
    timeout 15 build-w16r8/decodebench_chain_bench --only $f --reps 50 > $R/only-$f-$rep.txt 2>&1; rc=$?
    echo "flags $f try $rep rc=$rc $(tail -1 $R/only-$f-$rep.txt)"
  done
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
