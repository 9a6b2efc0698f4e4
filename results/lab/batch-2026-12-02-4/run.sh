#!/usr/bin/env bash
# The skinny GEMM at 16 sequences and more: x's traffic. From the repository root, on the GPU
# machine (libre2-dev as in ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-4/run.sh wr      # run1 (warp-rows.patch applied)
#   bash results/lab/batch-2026-12-02-4/run.sh land    # run2
# Outputs go to $OUT, else results/lab/batch-2026-12-02-4/run1.
#
# 1. (wr) Why the int4 skinny GEMM's layer jumps from 69 us at B = 8 to 98-101 at 16 (and 138
#    at 32, 231 at 64) while its weight bytes stay the same. The hypothesis, from
#    ../h200/batch/skinny-tune.txt: a block's warps split the columns, so every block reads
#    x for its share of the columns from L2 once per 16 x MT rows; x's bytes from L2 a
#    weight byte are 2 NT / MT for int4 (at MT = 4: 0.5 at B = 8, 1 at 16, 2 at 32), and
#    past ~1 the L2 carries as many bytes of x as of weights. The shapes with 8 tiles a warp
#    (half of x's traffic) take the same time at 16 as at 8 (108-118 us both), the 4-tile
#    ones 69 -> 98. The test: a warp-rows mode (skinny.cu, WR) in which a block's four warps
#    take their own rows and read the same columns, so that L1 serves x to three of the four
#    (x's L2 bytes a weight byte / 4), every shape timed by `skinny_bench --tune`, and
#    Nsight Compute's L2 and L1 counters of gate/up at B = 16 for the landed shape (m4u1b2)
#    and its warp-rows twin (m4u1b2w), at B = 8 the landed one.
#    Prediction (before running): int4 at B = 16 ~70-75 us a layer with the best warp-rows
#    shape (98 landed), at 32 ~85 (138), at 64 ~130 (231), at B <= 8 within 5% of the landed
#    shape; Nsight: L2 read bytes ~2x DRAM's for m4u1b2 at B = 16, ~1.3x for m4u1b2w, L1's
#    hit rate for x ~75% in warp-rows. Kill: the best warp-rows shape at B = 16 not at or
#    below 80 us a layer in this call (x's traffic is not what the jump is); budget: this
#    call and one to land.
# 2. (land, after run1: the warp-rows shapes 1.7-3x slower, kill met, reverted; but under
#    PDL the landed default shapes are not the fastest any more: int8 at B = 2..8 11.6%
#    slower than 2 tiles x 4 chunks at 4 blocks an SM, at 16 6.2%, at 64 7.6%; int4 at 64
#    9.6% behind 1 block an SM) The defaults re-chosen from run1's --tune (the fastest shape
#    of each scheme and group of 8 sequences where it is >= 3% faster; skinny.cu,
#    default_shape), then the batch tests and the committed sweep's skinny rows again.
#    Prediction (before running), steps in ms against results/h200/batch: 8b-int8 at
#    B = 2 / 4 / 8 / 16 / 64: 3.66 / 3.75 / 4.11 / 3.70 / 8.04 -> ~3.15 / 3.34 / 3.70 / 3.52 /
#    7.55; 8b-int4 at 64 8.83 -> ~8.15, its other rows within 1%; the 1b rows (tuned on 8b's
#    shapes) the same direction, smaller. Land if 8b-int8 at 2 and 8 and both 8b schemes at
#    64 are faster and no row is more than 2% slower than the committed sweep.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-4/run1}
mkdir -p "$out"
b=build-gpu
build() {
  { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
    cmake --build $b -j16 --target "$@"; } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
}
gtest() {  # filter, file
  $b/decodebench_gpu_tests --gtest_filter="$1" >"$out/$2" 2>&1
  tail -1 "$out/$2"
  grep -E "FAILED|Failure" -A3 "$out/$2" | head -30 || true
}
case "${1:?usage: run.sh wr|land}" in
  wr)
    build decodebench decodebench_gpu_tests decodebench_skinny_bench
    gtest '*Skinny*' gtest-skinny.txt
    $b/decodebench_skinny_bench --tune >"$out/skinny-tune.txt" 2>&1
    for s in int4 int8 fp16; do  # the three fastest shapes of each batch, and the default
      for B in 2 8 16 32 64; do
        grep -E "^$s +$B m" "$out/skinny-tune.txt" | sort -k4,4n | head -3 | tr -s ' ' | tr '\n' ';'
        grep -E "^$s +$B skinny" "$out/skinny-tune.txt" | tr -s ' '
      done
    done
    m=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum
    m=$m,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed
    m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
    # skinny_kernel<int4, MT, NT, U, WR>; --tune times each shape at 1, 2, 4, 8 blocks an SM,
    # 4 + 20 launches each: skip 24 for the 2-blocks run.
    for k in "b16:E2ELi4ELi2ELi1ELb0E" "b16w:E2ELi4ELi2ELi1ELb1E" "b8:E2ELi4ELi1ELi1ELb0E" "b8w:E2ELi4ELi1ELi1ELb1E"; do
      ncu --clock-control none --kernel-name-base mangled -k "regex:skinny_kernelILNS_6Scheme${k#*:}" \
        --launch-skip 24 -c 1 --metrics $m $b/decodebench_skinny_bench --tune --int4 28672 4096 \
        >"$out/ncu-${k%%:*}.txt" 2>&1
      echo "== ${k%%:*}"
      grep -E "ERROR|duration|bytes|hit_rate|throughput" "$out/ncu-${k%%:*}.txt" | tr -s ' ' | head -12
    done
    ;;
  land)
    build decodebench decodebench_gpu_tests decodebench_skinny_bench
    gtest '*Skinny*:*Batch*:*Prefill*' gtest.txt
    $b/decodebench_skinny_bench >"$out/skinny-bench.txt" 2>&1
    grep -E "^(int4|int8) +(2|8|16|32|64) skinny" "$out/skinny-bench.txt" | tr -s ' '
    for M in 8b 1b; do  # the committed sweep's skinny rows (results/h200/batch)
      $b/decodebench sweep --model $M-int8,$M-int4 --graph on --batch 2-64*2 --tokens 128 --warmup 16 --repeat 5 \
        -o "$out/sweep-$M.jsonl" >"$out/sweep-$M.txt" 2>"$out/sweep-$M.log" || tail -5 "$out/sweep-$M.log"
      cut -d'|' -f2,3,12,15 "$out/sweep-$M.txt"
    done
    ;;
esac
