#!/usr/bin/env bash
# Session 12 run 6 (and 7, with DB_EXP_FFN_NORED=1 the second time: the reds skipped): branch wip-s12-ffn, the GEMV bench's --ffn: 8b's int4 gate/up + down as the
# step's two kernels against one fused kernel (ffn_int4), checked against each other.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench_gemv_bench > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head
t built
timeout 120 build-gpu/decodebench_gemv_bench --ffn 2>&1 | tee $R/ffn.txt
DB_EXP_FFN_NORED=1 timeout 60 build-gpu/decodebench_gemv_bench --ffn 2>&1 | tee $R/ffn-nored.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
