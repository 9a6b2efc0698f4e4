#!/usr/bin/env bash
# Run 4 (launch-cost-2026-11-30): landing run of the int4 early launch in attention: gpu tests, A/B against
# eb6e43a (.devrun/src-m), the matrix, ctx4096, a trace of 8b-int4
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R/h200; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j12 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-m && cmake -S . -B build $CM >/dev/null && cmake --build build -j4 --target decodebench > $R/build-m.log 2>&1; echo "build m rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 240 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
if [ $rc -ne 0 ]; then grep -E "Failure|got |Expected|Which is|error" $R/ctest-gpu.txt | head -30; exit 1; fi
step() {  # label binary model
  timeout 60 $2 --model $3 --graph on -o $R/$1-$3.json > $R/$1-$3.txt 2>&1
  echo "$1 $3 rc=$?: $(grep -E '^TPOT' $R/$1-$3.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$1-$3.json)"
}
{ for i in 1 2; do for m in 8b-int4 4b-int4 1b-int4; do step base .devrun/src-m/build/decodebench $m; step new build-gpu/decodebench $m; done; done
  for m in 70b-int4 8b-int8; do step base .devrun/src-m/build/decodebench $m; step new build-gpu/decodebench $m; done; } | tee $R/step.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
nvidia-smi > $R/h200/nvidia-smi.txt 2>&1
timeout 300 scripts/bench_matrix.sh build-gpu $R/h200 2> $R/matrix.log; echo "matrix rc=$?"
cut -d'|' -f2-5,7,10-11,15-18 $R/h200/matrix.md | grep -E "int4|int8 .*gemv .*on" | head -20
t matrix; tar czf $OUT/r.tgz -C $OUT r
timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --context 4096 -o $R/8b-int4-context-4096.json > $R/ctx4096.txt 2>&1; grep TPOT $R/ctx4096.txt
DB_TRACE_OUT=$R/trace.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so timeout 60 build-gpu/decodebench --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
python3 scripts/trace_step.py $R/trace.csv 0 127 > $R/trace-8b-int4.txt 2>&1; grep -E "step|gate_up|down|qkv| o |attention|lm_head" $R/trace-8b-int4.txt | head -14
t done; gzip $R/trace.csv; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
