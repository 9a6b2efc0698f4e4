#!/usr/bin/env python3
# Per-role kernel time of one decode step from `ncu --csv --metrics gpu__time_duration.sum`
# (launch order: embed, per layer qkv attention o gate_up down, then lm_head, finish_step).
import csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get('Metric Name') == 'gpu__time_duration.sum']
unit = rows[0]['Metric Unit'] if rows else '?'
to_us = {'nsecond': 1e-3, 'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3}.get(unit, 1e-3)
ks = [(r['Kernel Name'], float(r['Metric Value'].replace(',', '')) * to_us) for r in rows]
layers = sum(1 for n, _ in ks if 'attention_kernel' in n)
out, j = {}, 0
for n, v in ks:
    if 'embed_kernel' in n: role = 'embed'
    elif 'finish_step' in n: role = 'finish'
    elif 'attention_kernel' in n: role = 'attention'
    else:
        role = 'lm_head' if j == 4 * layers else ['qkv', 'o', 'gate_up', 'down'][j % 4]
        j += 1
    out.setdefault(role, []).append(v)
print(f"{len(ks)} kernels ({layers} layers), total {sum(v for _, v in ks):.1f} us")
for r, vs in out.items():
    print(f"  {r:10s} n={len(vs):3d} sum {sum(vs):8.1f} us  mean {sum(vs)/len(vs):7.2f}  max {max(vs):7.2f}")
