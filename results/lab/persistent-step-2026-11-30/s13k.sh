#!/usr/bin/env bash
# Run 13 (persistent-step-2026-11-30): the refactored flight bench (launchers, median_ms),
# --barriers and --rotate, against runs 4-5's output.
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench_flight_bench > $R/build.log 2>&1; echo "build rc=$?"
timeout 120 build-gpu/decodebench_flight_bench --barriers > $R/flight-barriers3.txt 2>&1; echo "barriers rc=$?"
timeout 60 build-gpu/decodebench_flight_bench --rotate > $R/flight-rotate2.txt 2>&1; echo "rotate rc=$?"
grep -E 'alone|sync  128   0|16KBx12  128   0' $R/flight-barriers3.txt; grep -E 'rotated|kernel' $R/flight-rotate2.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
