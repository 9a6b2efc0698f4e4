#!/usr/bin/env bash
# Run 10 (matrix-2026-12-01): --context 4096 on the current code (8b-int4 was last measured on
# c30c3a0's, launch-cost-2026-11-30/run4), JSONs kept.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"; t built
for m in 8b-int4 8b-int8 8b-fp16; do
  timeout 120 build-gpu/decodebench --model $m --graph on --context 4096 -o $R/$m-ctx4096.json > $R/c.txt 2>&1
  echo "$m --context 4096 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -E '^regime' $R/c.txt | cut -c1-60)"
done | tee $R/step.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
