#!/usr/bin/env bash
# Run 3 (launch-cost-2026-11-30-3; machine still warm from run 2, build-gpu kept): the matrix.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"; t built
nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
timeout 400 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
cut -d'|' -f2-5,7,10-11,15-18 $R/h200/matrix.md | grep -E "gemv .*on" | head -20
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
