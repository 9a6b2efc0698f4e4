#!/usr/bin/env bash
# Session 11 run 5: the landing run of land-frag (822b9e1: the tensor-core int4 dot on
# matrices of >= 2e8 weights): its gpu tests on its own build; and the kernel traces of
# 8b-int4 on it and on the staged-QKV candidate (.devrun/src-s, a4a4fb4), which run 4
# measured 10% slower in the step though faster in the GEMV bench: where does it lose?
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j11 > $R/build.log 2>&1; echo "build rc=$?" ) &
( cd .devrun/src-s && cmake -S . -B build $CM >/dev/null && cmake --build build -j5 --target decodebench decodebench_kernel_trace > $R/build-s.log 2>&1; echo "build s rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
timeout 240 ctest --test-dir build-gpu -L gpu -j8 --output-on-failure > $R/ctest-gpu.txt 2>&1; rc=$?; echo "ctest rc=$rc"; grep -E "tests passed|\(Failed\)" $R/ctest-gpu.txt | head -20
t tested; tar czf $OUT/r.tgz -C $OUT r
trace() {  # label build-dir
  DB_GIT_COMMIT=$3 DB_TRACE_OUT=$R/trace-$1.csv CUDA_INJECTION64_PATH=$PWD/$2/libdecodebench_kernel_trace.so timeout 60 $2/decodebench --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
  python3 scripts/trace_step.py $R/trace-$1.csv 0 64 127 > $R/trace-$1.txt 2>&1; echo "== $1"; grep -E "step|gate_up|down|qkv| o |attention|lm_head" $R/trace-$1.txt | head -9
  gzip $R/trace-$1.csv
}
trace frag build-gpu $(cat .devrun/commit)
trace staged .devrun/src-s/build $(cat .devrun/commit-s)
t traced; tar czf $OUT/r.tgz -C $OUT r
for m in 8b-int4 70b-int4; do timeout 60 build-gpu/decodebench --model $m --graph on -o $R/frag-$m.json > $R/frag-$m.txt 2>&1; echo "frag $m: $(grep -E '^TPOT' $R/frag-$m.txt)"; done
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
