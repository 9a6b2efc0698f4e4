#!/usr/bin/env bash
# One device call (bash results/lab/mixed-wgmma-2026-12-04/run.sh; `run` with carry [".debs"]
# where the checkout has one): the mixed-input wgmma GEMM's first run (README.md here). Its
# checks against the CPU (exit 1 on a failure, a trap on a barrier that waits 2 s), then one 8b
# layer at 8-512 sequences beside cuBLAS on fp16 weights and the dequantize_to_f16 + cuBLAS path,
# int4 (group 128, zero point) and int8; then the prediction and the kill criterion evaluated.
# ~5-7 minutes with the build. MIXED_SPLITS=S forces the K splits of every matrix and
# MIXED_NTILE=N a smaller N tile than the batch's (a second call's knobs); MIXED_ARGS gives
# shapes ("rows cols ...").
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/mixed-wgmma-2026-12-04/out}
mkdir -p "$out"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench_mixed_wgmma_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader >"$out/gpu.txt" 2>&1
git rev-parse HEAD >"$out/commit.txt" 2>/dev/null
args=()
[ -n "${MIXED_SPLITS:-}" ] && args+=(--splits "$MIXED_SPLITS")
[ -n "${MIXED_NTILE:-}" ] && args+=(--ntile "$MIXED_NTILE")
# shellcheck disable=SC2206
[ -n "${MIXED_ARGS:-}" ] && args+=($MIXED_ARGS)
timeout 420 $b/decodebench_mixed_wgmma_bench "${args[@]}" >"$out/mixed.jsonl" 2>"$out/mixed.err"
echo "bench rc $? (124: timeout; 1: a check failed or an error, see mixed.err)"
head -5 "$out/mixed.err"
grep -E '"checks"' "$out/mixed.jsonl"
grep -E '"result": "FAIL"' "$out/mixed.jsonl" | head -5
t bench
python3 - "$out/mixed.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"kernel"' in l]
by = {(r["kernel"], r["scheme"], r["batch"]): r for r in rows}
for b in sorted({r["batch"] for r in rows}):
    f = by.get(("cublas_fp16", "fp16", b))
    line = [f"B={b:3d} cublas_fp16 {f['us_layer']:8.2f} us" if f else f"B={b:3d}"]
    for k, s in [("mixed_wgmma", "int4_g128_zp"), ("dequant_cublas", "int4_g128_zp"), ("mixed_wgmma", "int8"), ("dequant_cublas", "int8")]:
        r = by.get((k, s, b))
        if r:
            rel = f" {r['us_layer'] / f['us_layer']:.2f}x" if f else ""
            line.append(f"{k}/{s} {r['us_layer']:8.2f} us{rel} {r['weight_gbps']:5.0f} GB/s")
    print(" | ".join(line))
f, m = by.get(("cublas_fp16", "fp16", 256)), by.get(("mixed_wgmma", "int4_g128_zp", 256))
m16 = by.get(("mixed_wgmma", "int4_g128_zp", 16))
if f and m and m16:
    r = m["us_layer"] / f["us_layer"]
    print(f"B=256 int4 {m['us_layer']:.2f} us = {r:.3f}x cuBLAS fp16 (predicted <= 1.10, kill > 1.25)")
    print(f"B=16 int4 {m16['us_layer']:.2f} us, {m16['weight_gbps']} GB/s (kill > 91.6 us)")
    small = [by[("mixed_wgmma", "int4_g128_zp", b)]["weight_gbps"] for b in (8, 16, 32, 64) if ("mixed_wgmma", "int4_g128_zp", b) in by]
    print(f"B=8..64 int4 streaming {min(small):.0f}-{max(small):.0f} GB/s (predicted >= 3150)")
    print("KILL" if r > 1.25 or m16["us_layer"] > 91.6 else "not killed", "by this call")
PY
t done
