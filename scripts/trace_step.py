#!/usr/bin/env python3
"""Where a decode step's time goes, per position, from tests/tools/kernel_trace.cpp's CSV.

    scripts/trace_step.py trace.csv [POSITION ...]

A step is the kernels from an embed_kernel to the finish_step_kernel after it. Each
kernel's "exposed" time is how far it moves the step's end: its end minus the latest end before it (0 when it finishes
under an earlier kernel). Summed per role (qkv, attention, o, gate_up, down, lm_head, ...),
the exposed times add up to the step; `busy` is the kernel's own start-to-end time and
`early` how long it was resident before the previous kernel ended (programmatic dependent
launch). Positions default to the first, a quarter, the middle and the last step.
Bad input (no file, not the tool's CSV, a position that is not a number) is one line on
stderr and exit 2.
"""
import csv
import sys


def role_of(name, gemv_index, layers):
    for key, role in (("embed", "embed"), ("finish_step", "finish"), ("attention", "attention"),
                      ("argmax", "argmax"), ("lora", "lora"), ("rmsnorm", "rmsnorm"), ("silu", "silu")):
        if key in name:
            return role
    # The GEMVs, the batched step's skinny GEMM, and cuBLAS (nvjet on sm_90 with CUDA 13, gemm or
    # Kernel in older kernels' names) in the step's order.
    if "gemv" in name or "skinny" in name or "nvjet" in name or "gemm" in name.lower() or "Kernel" in name:
        return "lm_head" if gemv_index == 4 * layers else ("qkv", "o", "gate_up", "down")[gemv_index % 4]
    return "other"


COLUMNS = ("start_ns", "end_ns", "grid_x", "grid_y", "block_x", "registers", "static_smem", "dynamic_smem",
           "smem_executed", "name")


def fail(msg):
    print(f"trace_step: {msg}", file=sys.stderr)
    sys.exit(2)


def read_kernels(path):
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                fail(f"{path}: not a kernel_trace CSV (no column {missing[0]})")
            return sorted(((int(r["start_ns"]), int(r["end_ns"]), r["name"], r) for r in reader), key=lambda k: k[0])
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except (ValueError, TypeError):
        fail(f"{path}: a start_ns or end_ns that is not an integer")


def main():
    if len(sys.argv) < 2:
        fail("usage: trace_step.py TRACE.csv [POSITION ...]")
    ks = read_kernels(sys.argv[1])
    steps, cur = [], None
    for k in ks:
        if "embed" in k[2]:
            cur = []
            steps.append(cur)
        if cur is not None:
            cur.append(k)
            if "finish_step" in k[2]:  # the step's last kernel: what follows is not the step's
                cur = None
    if not steps:
        fail("no embed_kernel in the trace (is it a decodebench run?)")
    if not all(p.isdigit() for p in sys.argv[2:]):
        fail(f"positions are step numbers from 0: {' '.join(sys.argv[2:])}")
    wanted = [int(p) for p in sys.argv[2:]] or sorted({0, len(steps) // 4, len(steps) // 2, len(steps) - 1})
    if max(wanted) >= len(steps):
        fail(f"position {max(wanted)}: the trace has {len(steps)} steps (0 to {len(steps) - 1})")
    for p in wanted:
        step = steps[p]
        layers = sum("attention" in k[2] for k in step)
        acc, g, last_end, first = {}, 0, step[0][0], step[0][0]
        for start, end, name, r in step:
            role = role_of(name, g, layers)
            if role in ("qkv", "o", "gate_up", "down", "lm_head"):
                g += 1
            a = acc.setdefault(role, [0, 0.0, 0.0, 0.0, r])
            a[0] += 1
            a[1] += max(0, end - last_end) / 1e3
            a[2] += (end - start) / 1e3
            a[3] += max(0, last_end - start) / 1e3
            last_end = max(last_end, end)
        print(f"step {p}: {(last_end - first) / 1e3:.1f} us, {len(step)} kernels, {layers} layers")
        print(f"  {'role':10s} {'n':>4s} {'exposed us':>11s} {'busy us':>9s} {'early us':>9s}  grid x block, regs, smem (executed)")
        for role, (n, exposed, busy, early, r) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
            print(f"  {role:10s} {n:4d} {exposed:11.1f} {busy:9.1f} {early:9.1f}  {r['grid_x']}x{r['grid_y']} x {r['block_x']}, "
                  f"{r['registers']}, {r['static_smem']}+{r['dynamic_smem']} ({r['smem_executed']})")


if __name__ == "__main__":
    main()
