#!/usr/bin/env bash
# Session 12 run 9: branch wip-s12-wsf2 with eight producer lanes (one row copy each), the GEMV bench's --wsf: 8b's int4 shapes through the
# rows kernel (nibble, fragment) and the warp-specialized kernel with one-span stages at
# 60/100/140/200 KB a block, each checked against the rows kernel.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench_gemv_bench > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head
t built
timeout 150 build-gpu/decodebench_gemv_bench --wsf 2>&1 | tee $R/wsf.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
