#!/usr/bin/env bash
# Session 14 run 8: an fp16 copy of the residual stream for the normalized GEMVs' x (branch
# wip-s14-residh, DB_EXP_RESIDH=1: embed and the residual epilogues also write resid in fp16,
# and QKV, gate/up and the lm_head read that copy instead of the fp32 stream; item 81's
# lead (a)). gpu tests with the switch, then A/B in one build.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 > $R/build.log 2>&1; echo "build rc=$?"; grep -E "error" $R/build.log | head; t built
DB_EXP_RESIDH=1 timeout 170 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu-residh.txt 2>&1; echo "ctest residh rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu-residh.txt | head; t tested
one() {  # label model residh [options]
  local l=$1 m=$2 v=$3; shift 3
  DB_EXP_RESIDH=$v timeout 90 build-gpu/decodebench --model $m --graph on "$@" -o $R/c.json > $R/c.txt 2>&1; local rc=$?
  echo "$l $m $* rc=$rc: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  [ $rc -ne 0 ] && tail -2 $R/c.txt
}
{ for i in 1 2; do for m in 8b-int4 8b-int8 8b-fp16 4b-int4 4b-int8 1b-int4; do one main $m ""; one residh $m 1; done; done
  one main 70b-int4 ""; one residh 70b-int4 1
  for v in "" 1; do one check$v 1b-int4 "$v" --check; grep -h "logits\|check" $R/c.txt | head -3; done; } | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
