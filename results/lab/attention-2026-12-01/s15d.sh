#!/usr/bin/env bash
# Run 4 (attention-2026-12-01): where the time of a step at --context 4096 goes (8b-int4, main b822b65),
# per role, against context 0.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench decodebench_kernel_trace > $R/build.log 2>&1; echo "build rc=$?"; t built
for c in 4096 0; do
  DB_TRACE_OUT=$R/trace.csv CUDA_INJECTION64_PATH=build-gpu/libdecodebench_kernel_trace.so timeout 120 build-gpu/decodebench --model 8b-int4 --graph on --context $c --tokens 32 --repeat 2 -o $R/c.json > $R/c.txt 2>&1; echo "trace ctx $c rc=$?: $(grep -E '^TPOT' $R/c.txt)"
  n=$(wc -l < $R/trace.csv); echo "rows $n"
  # steps: the prefill (c), the warm-up (16), two repetitions of 32: the second repetition
  s0=$((c + 16 + 32)); python3 scripts/trace_step.py $R/trace.csv $s0 $((s0 + 16)) $((s0 + 31)) > $R/trace-ctx$c.txt 2>&1; echo "trace_step rc=$?"
  rm -f $R/trace.csv
done
cat $R/trace-ctx4096.txt | head -24
t done; rm -f $R/c.json; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
