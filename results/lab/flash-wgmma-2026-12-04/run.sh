#!/usr/bin/env bash
# One device call (bash results/lab/flash-wgmma-2026-12-04/run.sh; run with carry [".debs"]):
# the wgmma prefill attention's first run, in the product (README.md here). The bench's checks
# against the CPU and the mma.sync kernel (exit 1 on a failure; a wrong barrier byte count
# hangs, hence the timeouts), its timing beside the mma.sync kernel, the gpu tests of the
# prefill (the kernel chunk by chunk, and the engine's prefill against the step path), then
# 8b-int4 prefilling 131000 tokens with each kernel. ~6-9 minutes with the build. The bench checks
# and times both of the kernel's pipelines (overlap, the product's; serial, the first version).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/flash-wgmma-2026-12-04/out}
mkdir -p "$out"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_flash_wgmma_bench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
grep -E "prefill attention's sm_90a kernel" "$out/build.log"
t built
timeout 150 $b/decodebench_flash_wgmma_bench --check >"$out/check.jsonl" 2>"$out/check.err"
rc=$?
echo "check rc $rc (124: a hang)"; head -5 "$out/check.err"
python3 - "$out/check.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "check" in r:
        print(f'{r["pipeline"]:7s} p0 {r["p0"]:5d} rows {r["rows"]:5d} heads {r["heads"]:2d}/{r["kv_heads"]:<2d} vs {r["reference"]:22s} '
              f'err/tol {r["max_err_over_tol"]:.3g} bad {r["bad"]} {r["result"]}')
    else:
        print(line.strip())
PY
t check
# A hang would hang every later use of the kernel too: then only the mma.sync kernel's prefill
# runs, so that the call ends inside its 600 s.
kernels="mma auto"
if [ $rc -eq 124 ]; then
  kernels=mma
else
timeout 150 $b/decodebench_flash_wgmma_bench --time >"$out/time.jsonl" 2>"$out/time.err"
echo "time rc $?"; head -5 "$out/time.err"
python3 - "$out/time.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "kernel" in r:
        print(f'{r["kernel"]:32s} {r["shape"]:15s} T={r["t"]:6d} {r["median_ms"]:9.3f} ms {r["tflops"]:6.1f} TFLOP/s (max diff {r["max_abs_diff_between_kernels"]:.3g})')
PY
t time
fi
for kernel in $kernels; do
  DECODEBENCH_PREFILL_ATTENTION=$kernel timeout 100 $b/decodebench --model 8b-int4 --graph on --context 131000 \
    --tokens 16 --repeat 1 -o "$out/ctx131000-$kernel.json" >"$out/ctx131000-$kernel.txt" 2>&1
  echo "decodebench $kernel rc $?"; grep -E "prefill|rror" "$out/ctx131000-$kernel.txt" | head -3
  python3 - "$out/ctx131000-$kernel.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    r = r[0] if isinstance(r, list) else r
    t = r["timing"]
    print(f'prefill {t["prefill_s"]:.2f} s ({t.get("prefill_attention", "?")}), TPOT {t["tpot_ms"]["median"]:.3f} ms at 131000')
except Exception as e:
    print("no result:", e)
PY
  t "ctx131000 $kernel"
done
# The gpu tests last (the call's 600 s may end inside them; their log comes back either way).
if [ $rc -ne 124 ]; then
  timeout 180 $b/decodebench_gpu_tests --gtest_filter='Chunks/PrefillAttentionWgmma.*:Kernels/PrefillVsSteps.*:Prefill.*' \
    >"$out/gpu-prefill.txt" 2>&1
  echo "gpu rc $?"; grep -E "^\[  (PASSED|FAILED) |tests ran|^\[  FAILED  \]|SKIPPED" "$out/gpu-prefill.txt" | head -20
  t gpu
fi
