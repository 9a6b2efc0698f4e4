#!/usr/bin/env bash
# Session 11 run 6: does the L1 / shared-memory split move the step? DB_EXP_CARVEOUT (percent
# of the largest shared-memory configuration, on every kernel) unset / 0 / 25 / 50 / 100.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"
t built
for m in 8b-int4 1b-int4 8b-int8; do for c in unset 0 25 50 100 unset; do
  if [ $c = unset ]; then env -u DB_EXP_CARVEOUT timeout 60 build-gpu/decodebench --model $m --graph on -o $R/c.json > $R/c.txt 2>&1
  else DB_EXP_CARVEOUT=$c timeout 60 build-gpu/decodebench --model $m --graph on -o $R/c.json > $R/c.txt 2>&1; fi
  echo "carveout=$c $m rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json) $(grep carveout $R/c.txt | head -1)"
done; done | tee $R/step.txt
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
