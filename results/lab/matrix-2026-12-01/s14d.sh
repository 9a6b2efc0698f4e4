#!/usr/bin/env bash
# Run 4 (matrix-2026-12-01): the landing run of the regime rule at 0.75 (b332756): build, every gpu
# test, then the matrix (scripts/bench_matrix.sh) so that results/h200 carries the new labels.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; t built
timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu.txt | head; t tested
tar czf $OUT/r.tgz -C $OUT r
nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
timeout 330 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
cut -d'|' -f2-5,7,10-11,15-19 $R/h200/matrix.md | grep -E "gemv .*on" | head -20
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
