#!/usr/bin/env bash
# session 10, run 2: (a) resident blocks per SM capped per GEMV (wip-s10-xpf, DB_EXP_BPS), so the
# next kernel's blocks find room early; (b) a raw kernel trace of 8b-int4; (c) session 9's prepared
# int4-frag per-shape run (.devrun/next.sh's content)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
CM="-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90"
( cmake -S . -B build-gpu $CM >/dev/null && cmake --build build-gpu -j8 --target decodebench decodebench_kernel_trace > $R/build-x.log 2>&1; echo "build x rc=$?" ) &
( cd .devrun/src-s && cmake -S . -B build $CM -DCMAKE_CUDA_FLAGS=-DDB_FRAG_STAGE=1 >/dev/null && cmake --build build -j8 --target decodebench decodebench_gemv_bench decodebench_gpu_tests > $R/build-s.log 2>&1; echo "build s rc=$?" ) &
wait; t built; grep -hE "error|FAILED" $R/build*.log | head
step() {  # label binary model [env]
  local v=$1 bin=$2 m=$3; shift 3
  env "$@" timeout 60 $bin --model $m --graph on -o $R/$v-$m.json > $R/$v-$m.txt 2>&1
  echo "$v $m rc=$?: $(grep -E '^TPOT' $R/$v-$m.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/$v-$m.json)"
}
X=build-gpu/decodebench
{
step x0 $X 8b-int4
for c in 0,3,0,0 0,2,0,0 0,0,3,0 0,0,2,0 0,0,0,1 0,3,2,0 3,0,0,0 2,0,0,0; do step "bps$c" $X 8b-int4 DB_EXP_BPS=$c; done
step x0 $X 8b-int4
} | tee $R/step-bps.txt
DB_TRACE_OUT=$R/trace.csv CUDA_INJECTION64_PATH=$PWD/build-gpu/libdecodebench_kernel_trace.so timeout 60 $X --model 8b-int4 --graph on --tokens 128 --warmup 0 --repeat 1 > /dev/null 2>&1
python3 scripts/trace_step.py $R/trace.csv 0 127 > $R/trace-8b-int4.txt 2>&1; gzip $R/trace.csv
t traced; rm -f $R/*.json; tar czf $OUT/r.tgz -C $OUT r
B=.devrun/src-s/build
timeout 60 $B/decodebench_gpu_tests --gtest_filter='*Frag*:*Epilogue*' > $R/gtest-frag.txt 2>&1; echo "frag tests rc=$?"; grep -E "PASSED|FAILED" $R/gtest-frag.txt | head -8
DB_EXP_FRAGDB=1 timeout 60 $B/decodebench_gpu_tests --gtest_filter='*Frag*:*Epilogue*' > $R/gtest-fragdb.txt 2>&1; echo "frag db tests rc=$?"; grep -E "PASSED|FAILED" $R/gtest-fragdb.txt | head -8
{ for m in 8b-int4 70b-int4 1b-int4 8b-int4; do step nofrag $B/decodebench $m DB_EXP_NOFRAG=1; step frag $B/decodebench $m; step fragdb $B/decodebench $m DB_EXP_FRAGDB=1; done; } | tee $R/step-frag.txt
rm -f $R/*.json; t stepped; tar czf $OUT/r.tgz -C $OUT r
for sh in "8b qkv" "8b o" "8b gate/up" "8b down" "1b gate/up" "70b qkv" "70b o" "70b gate/up" "70b down"; do
  echo "nofrag $(DB_EXP_NOFRAG=1 timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "frag $(timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
  echo "fragdb $(DB_EXP_FRAGDB=1 timeout 30 $B/decodebench_gemv_bench --only "$sh" int4 2>&1 | grep fast)"
done | tee $R/bench-frag.txt
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
