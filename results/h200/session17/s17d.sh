#!/usr/bin/env bash
# Session 17 run 4 (item 97): after item 96, do the other branches in the int4 rows kernel's load
# path cost the same way? Timing switches (s17-branches.patch, on be01c1c):
# nt = DB_EXP_NOTAIL=1: load_group_meta always takes the uniform 8-row path (valid only where
#      every matrix's rows are a multiple of 8, as in 1b/4b/8b: same tokens expected);
# nl = DB_EXP_NOLASTBR=1: the last group of a block reloads itself instead of branching around
#      the next group's loads; ntl = both; n0 = neither (main).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j4 --target decodebench decodebench_gemv_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
b n0 "" & b nt "-DDB_EXP_NOTAIL=1" & b nl "-DDB_EXP_NOLASTBR=1" & b ntl "-DDB_EXP_NOTAIL=1 -DDB_EXP_NOLASTBR=1" &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model
  timeout 120 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int4; do for v in n0 nt nl ntl; do step $v build-$v/decodebench $m; done; done
  for sh in "8b gate/up" "8b down" "8b o"; do for v in n0 nt nl ntl; do
    echo "$v $(build-$v/decodebench_gemv_bench --only "$sh" int4 | tail -1)"; done; done; } 2>&1 | tee $R/step.txt
t done; rm -f $R/c.json $R/c.txt; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
