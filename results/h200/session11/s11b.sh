#!/usr/bin/env bash
# Session 11 run 2: the warp-specialized fragment kernel (DB_EXP_WSF = KB of shared memory a
# block; 0 off): its gemv gpu tests, the GEMV bench and the step, off / 113 KB (two blocks an
# SM) / 200 KB (one).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"
t built; grep -hE "error|FAILED" $R/build*.log | head
for e in 113 200; do
  DB_EXP_WSF=$e timeout 60 build-gpu/decodebench_gpu_tests --gtest_filter='*Frag*:*Epilogue*' > $R/gtest-wsf$e.txt 2>&1
  echo "gtest wsf=$e rc=$?: $(grep -E 'PASSED|FAILED' $R/gtest-wsf$e.txt | tr '\n' ' ' | cut -c1-300)"
done
t tested; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "1b gate/up" "70b qkv" "70b gate/up"; do
  for e in 0 113 200; do echo "wsf=$e $(DB_EXP_WSF=$e timeout 30 build-gpu/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep -E 'fast|rror')"; done
done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
for m in 8b-int4 1b-int4 70b-int4; do for e in 0 113 200; do
  DB_EXP_WSF=$e timeout 60 build-gpu/decodebench --model $m --graph on -o $R/w$e-$m.json > $R/w$e-$m.txt 2>&1
  echo "wsf=$e $m rc=$?: $(grep -E '^TPOT' $R/w$e-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/w$e-$m.json) $(grep -i error $R/w$e-$m.txt | head -1)"
done; done | tee $R/step.txt
rm -f $R/*.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
