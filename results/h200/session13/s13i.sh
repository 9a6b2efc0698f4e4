#!/usr/bin/env bash
# Session 13 run 11: ncu on layer 10's four int4 GEMVs of 8b-int4 (graph off, serialized),
# nibble QKV against the fragment QKV with its shared-memory stage (32 KB split) and built
# by shuffles at a 32 KB and a 64 KB split (item 76's open question: L1).
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"
t built
M=gpu__time_duration.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,launch__shared_mem_config_size,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem,launch__registers_per_thread
for l in nib fragsmem shfl14 shfl25; do
  e=(); case $l in fragsmem) e=(DB_EXP_FRAG=qkv);; shfl14) e=(DB_EXP_FRAG=qkv DB_EXP_FRAG_SHFL=1);; shfl25) e=(DB_EXP_FRAG=qkv DB_EXP_FRAG_SHFL=1 DB_EXP_FLOOR_FRAG=25);; esac
  env "${e[@]}" timeout 150 ncu --clock-control none --cache-control none --kernel-name regex:gemv_rows_kernel --launch-skip 40 --launch-count 4 --metrics $M --csv \
    build-gpu/decodebench --model 8b-int4 --graph off --tokens 2 --warmup 0 --repeat 1 > $R/ncu-$l.csv 2> $R/ncu-$l.err
  echo "== $l rc=$?"; python3 - $R/ncu-$l.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no rows"); sys.exit()
h = rows[0]; iid = h.index("ID"); im = h.index("Metric Name"); iv = h.index("Metric Value")
by = {}
for r in rows[1:]: by.setdefault(r[iid], {})[r[im]] = r[iv]
for k, d in by.items(): print(k, " ".join(f"{m.split('__')[1][:28]}={d[m]}" for m in sorted(d)))
PY
done
t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
