#!/usr/bin/env bash
# Run 7 (int4-kernel-2026-12-01-2, int4-kernel §24): int4 group sizes. The GEMV gpu tests with
# groups of 64 and 256 added (asymmetric and symmetric, fast and warp kernels; the warp kernel has
# since left the product, so the filter now runs the fast kernel's cases); 8b-int4 at --group-size 32, 64, 128,
# 256 (bytes grow as the groups shrink: TPOT should follow); and --context 4096 on the current
# code for the README's figures (attention-2026-12-01/run5 measured them before ce7e2d9).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_gpu_tests > $R/build.log 2>&1; echo "build rc=$?"; t built
build-gpu/decodebench_gpu_tests --gtest_filter='Shapes/Gemv*' > $R/gtest-gemv.txt 2>&1; echo "gemv tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $R/gtest-gemv.txt | head; t tested
step() {  # label model options...
  local l=$1 m=$2; shift 2
  timeout 120 build-gpu/decodebench --model $m --graph on "$@" -o $R/$l.json > $R/$l.txt 2>&1
  echo "$l rc=$?: $(grep -E '^TPOT' $R/$l.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -E '^bytes' $R/$l.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -E '^achieved' $R/$l.txt | tr -s ' ' | cut -d' ' -f5-7)"
}
{ for g in 32 64 128 256 128 64; do step 8b-int4-g$g 8b-int4 --group-size $g; done
  for m in 8b-int4 8b-int8 8b-fp16 4b-int4 1b-int4; do step ctx4096-$m $m --context 4096; done; } 2>&1 | tee $R/step.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
