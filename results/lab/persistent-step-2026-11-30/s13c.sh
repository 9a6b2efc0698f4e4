#!/usr/bin/env bash
# Runs 3-5 (persistent-step-2026-11-30): the flight bench (runs 3-4: --barriers, run 5: --rotate).
# The chain and flight benches have since left the default build: add -DDECODEBENCH_DEV=ON to
# the cmake -S line(s) below to run this today.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench_flight_bench > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head
t built
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 240 build-gpu/decodebench_flight_bench --rotate 2>&1 | tee $R/flight-rotate.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
