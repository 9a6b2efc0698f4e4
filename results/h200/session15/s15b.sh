#!/usr/bin/env bash
# Session 15 run 2: rolling loads (DB_EXP_ROLL=1, branch wip-s15-roll) against main in one
# session: gpu tests with it, the GEMV bench, the step, and where the next group's loads sit in
# the int4 gate/up kernel's SASS both ways.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 --target decodebench decodebench_gemv_bench > $R/build.log 2>&1; echo "build rc=$?" ) &
( cmake -S . -B build-r $CM -DCMAKE_CUDA_FLAGS=-DDB_EXP_ROLL=1 >/dev/null && cmake --build build-r -j8 > $R/build-r.log 2>&1; echo "build r rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
seq_of() {  # binary, kernel pattern: the opcode sequence, runs collapsed
  cuobjdump -sass "$1" | awk -v pat="$2" '/Function :/ {on = ($0 ~ pat)} on && /\/\*[0-9a-f]+\*\// {split($0, a, "\\*/"); s=a[2]; gsub(/^[ \t]+/, "", s); sub(/^@!?U?P[0-9T] /, "", s); split(s, o, /[ ;]/); print o[1]}' |
    awk '{if ($1 == p) n++; else {if (p != "") printf "%s%s ", p, (n > 1 ? "x" n : ""); p = $1; n = 1}} END {printf "%s%s\n", p, (n > 1 ? "x" n : "")}' | fold -w 200
}
for b in build-gpu build-r; do seq_of ./$b/decodebench_gemv_bench 'SchemeE2ELi1ELi8ELb0ELb0E' > $R/sass-$b.txt; done
wc -c $R/sass-*.txt
timeout 150 ctest --test-dir build-r -L gpu -j8 --output-on-failure > $R/ctest-gpu-r.txt 2>&1; echo "ctest r rc=$?"; grep -E "tests passed|\(Failed\)|Timeout" $R/ctest-gpu-r.txt | head; t tested
{ for i in 1 2; do for sh in "8b qkv" "8b o" "8b gate/up" "8b down"; do for s in int4 int8; do for b in build-gpu build-r; do
  echo "$b $(./$b/decodebench_gemv_bench --only "$sh" $s)"; done; done; done; done; } | tee $R/bench.txt; t benched
step() {  # label binary model
  timeout 90 $2 --model $3 --graph on -o $R/c.json > $R/c.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
}
{ for m in 8b-int4 4b-int4 1b-int4 8b-int8 8b-fp16 8b-int4 70b-int4; do step main build-gpu/decodebench $m; step roll build-r/decodebench $m; done; } | tee $R/step.txt; t stepped
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
