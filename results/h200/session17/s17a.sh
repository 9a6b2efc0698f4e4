#!/usr/bin/env bash
# Session 17 run 1 (item 95): two timing-only probes of the int4 rows kernel's DRAM streams.
# mh = DB_EXP_METAHOT=16: every group reads its scales and zero points from the first 16 blocks
#      of 8 rows (12 KB, cache-resident): the meta streams' DRAM cost goes, every load stays
#      (wrong values: timing only).
# gs = DB_EXP_GSTRIDE=1: int4 blocks take groups b, b + grid, ... instead of a contiguous range.
# m0 = the same tree without switches; nozp = m0 on 8b-int4 without zero points (0.8% fewer
# bytes, one meta stream fewer; no code).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
b() { cmake -S . -B build-$1 $CM "-DCMAKE_CUDA_FLAGS=$2" >/dev/null &&
      cmake --build build-$1 -j5 --target decodebench decodebench_gemv_bench > $R/build-$1.log 2>&1; echo "build $1 rc=$?"; }
b m0 "" & b mh "-DDB_EXP_METAHOT=16" & b gs "-DDB_EXP_GSTRIDE=1" &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model
  timeout 120 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for i in 1 2; do for v in m0 mh gs; do step $v build-$v/decodebench 8b-int4; done
    step nozp build-m0/decodebench .devrun/8b-int4-nozp.json; done
  for v in m0 mh gs; do step $v build-$v/decodebench 4b-int4; done
  for sh in "8b gate/up" "8b down" "8b qkv" "8b o"; do for v in m0 mh gs; do
    echo "$v $(build-$v/decodebench_gemv_bench --only "$sh" int4 | tail -1)"; done; done; } 2>&1 | tee $R/step.txt
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
