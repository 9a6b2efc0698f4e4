#!/usr/bin/env bash
# Prepared at the end of session 12 (results/NOTES.md item 68, "Next, from session 12" (2)):
# branch wip-s12-wsf2 at its last commit. The GEMV bench's --wsf now also runs the kernel
# from contiguous tiles (weights, scales and zero points of 8 rows x 1024 columns: one 4288-
# byte bulk copy a stage instead of ten), "wsf2 tiled". Runs 8-9 measured ~74 ns a copy per
# SM whatever the ring depth; if that per-copy cost is the bound, tiled should stream ~10x
# more stages. Before running, locally, on the branch: git rev-parse --short=12 HEAD >
# .devrun/commit, then run(command="bash .devrun/next2.sh", carry=[".devrun"]). ~1.5 minutes.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench_gemv_bench > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head
t built
timeout 150 build-gpu/decodebench_gemv_bench --wsf 2>&1 | tee $R/wsf.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
