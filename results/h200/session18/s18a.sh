#!/usr/bin/env bash
# Session 18 run 1: the persistent-chain prototype (tests/bench/chain_bench.cu) against the
# rows kernel on 8b-int4's layer matrices; the refactor of the int4 dot into int4_dot.cuh
# (gemv gpu tests, 8b-int4 TPOT); session 17's prepared SASS diff (dump half).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
  cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; t built
grep -hE "error|warning" $R/build.log | head
OUT=$R bash results/h200/session17/prepared-sass-diff.sh dump 2>&1 | tee $R/sass.txt
timeout 300 build-gpu/decodebench_chain_bench 2>&1 | tee $R/chain.txt; t chain
timeout 200 build-gpu/decodebench_chain_bench --slots 4 --reps 10 2>&1 | grep -E "persistent|kernels" | sed 's/^/slots4 /' | tee -a $R/chain.txt; t chain4
for i in 1 2; do timeout 120 build-gpu/decodebench --model 8b-int4 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "8b-int4 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3)"; done | tee $R/step.txt
(cd build-gpu && timeout 250 ctest -L gpu -j12 -R "Gemv|Int4|Frag" 2>&1 | tail -5) | tee $R/ctest.txt; t done
rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
