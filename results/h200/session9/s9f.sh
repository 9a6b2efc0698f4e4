#!/usr/bin/env bash
# session 9, run 6: the int4 dot on tensor cores (branch int4-frag, src-fr); DB_EXP_NOFRAG=1 is the
# same build with the nibble layout (main's kernel)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
cd .devrun/src-fr && cmake -S . -B build $CM >/dev/null && cmake --build build -j16 > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error|FAILED" $R/build.log | head; cd - >/dev/null
B=.devrun/src-fr/build; t built
timeout 120 ctest --test-dir $B -R "Frag|Epilogue" -j8 --output-on-failure > $R/ctest-frag.txt 2>&1; rc=$?; echo "ctest frag rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-frag.txt | head -20
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error|row" $R/ctest-frag.txt | head -30; fi
t tested; tar czf $OUT/r.tgz -C $OUT r
step() {  # label model [env]
  local v=$1 m=$2; shift 2
  env "$@" timeout 60 $B/decodebench --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
{ for m in 8b-int4 1b-int4 70b-int4 8b-int4; do step nofrag $m DB_EXP_NOFRAG=1; step frag $m; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do
  echo "nofrag $(DB_EXP_NOFRAG=1 timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "frag $(timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench.txt
t benched; tar czf $OUT/r.tgz -C $OUT r
if [ $rc -eq 0 ]; then timeout 200 ctest --test-dir $B -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; echo "ctest gpu rc=$?"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head; fi
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
