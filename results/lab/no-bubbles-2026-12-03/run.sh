#!/usr/bin/env bash
# The tensor-core int4 dot fed from a shared-memory ring (tests/bench/stream_bench.cu). From the
# repository root, on the GPU machine:
#   bash results/lab/no-bubbles-2026-12-03/run.sh stream   # run1, run2 (the check's reference unsynced in both)
#   bash results/lab/no-bubbles-2026-12-03/run.sh profile  # run3 (with w8 and w16 by hand): ncu, SASS
#   bash results/lab/no-bubbles-2026-12-03/run.sh design2  # run4
# Outputs go to $OUT, else results/lab/no-bubbles-2026-12-03/run1.
#
# 1. (stream) The chain of 8b-int4's 128 block matrices, one persistent block an SM: a producer
#    lane bulk-copies the block's tiles (16 rows x 2048 columns, 17 KB) into an 11-slot ring and
#    never waits; W consumer warps take each stage by columns with the int4 dot on the tensor
#    cores (two mma.m16n8k16 per lane and 32-column chunk, one LOP3 per A register, x as B),
#    ~0.8 instructions a weight against the rows kernel's ~2; a block owns whole rows, so its
#    sums never leave it; each matrix waits for every block to finish the one before it.
#    Prediction (before running): check passes (error / sum|w x| ~1e-5); stream alone ~0.95 of
#    the read bandwidth; consumers alone at w8 ~0.4 ms (~2x the memory's pace); no waits
#    >= 0.92 at the best warp count; waits ~0.85; kernels 1.22 ms (0.66).
#    Kill: no waits below 0.85 at every warp count after two device calls (~8 minutes).
# 2. (stream + profile, after run1: the check compared with a reference not yet computed, a
#    harness bug; and every line far off: stream alone 0.77, consumers alone 1.225 ms at w8,
#    no waits 1.283) The parts taken apart: stream and consumers without x's staging and
#    without the tile's reduction, the consumers' waits suspending; ncu of the consumers alone
#    (w8, 4 layers) and the kernel's SASS. Prediction: the consumers without staging and tile
#    ends near ~0.5 ms (the dot's issue and mma latency); if not, ncu says which pipe or stall.
#    Measured (run3): check passes (1.3e-6); stream without staging or tile ends 0.988; with
#    them 0.76; consumers without both 0.939 ms, with staging 1.074, all 1.26; no waits 0.595,
#    waits 0.577 (w8). ncu: 2.24 warps a scheduler, 0.47 eligible, issue 33%; ~1.9 instructions
#    a weight in all. Kill criterion met for design 1 (no waits 0.60 < 0.85 after two calls).
# 3. (design2) Another consumer: each warp loads the next stage's share into a second register
#    set before the current stage's dot (the wait and the shared-memory round trip under the
#    dot), each group's mmas in chains of two, a tile's reduction by the last warp to arrive (a
#    counter, no barrier), x's loads issued beside the sum of squares; registers capped from
#    the real warp count (ptxas sized 9 warps as 12: 168 a thread with spills, now 224).
#    Prediction (before running): consumers without staging and tile ends 0.939 -> ~0.55 ms;
#    consumers alone ~0.75; no waits ~0.85; waits ~0.8. Kill: the consumers without staging and
#    tile ends above 0.6 ms at w8 and w16 in this call: then the ring-fed tensor-core consumer
#    is stopped for now and written down.
#    Measured (run4; its first try capped registers at 224 and the block did not fit): the dot
#    alone 1.143 ms (w8) / 1.191 (w16), consumers alone 2.2, no waits 0.345: worse everywhere.
#    Kill criterion met; the line stops here (results/lab/no-bubbles.md).
# The device machine has no libre2-dev: `apt-get download libre2-dev libre2-9` into .debs/ here
# (git-ignored through .git/info/exclude) and carry it; this script unpacks it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/no-bubbles-2026-12-03/run1}
mkdir -p "$out"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
build() {
  { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
    cmake --build $b -j16 --target "$@"; } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  t built
}
case "${1:?usage: run.sh stream}" in
  stream)
    build decodebench_stream_bench
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >"$out/gpu.txt"
    timeout 60 $b/decodebench_stream_bench --layers 1 --reps 3 >"$out/stream-l1.txt" 2>&1
    echo "l1 rc=$?"; cat "$out/stream-l1.txt"
    for w in 8 16 4; do
      timeout 120 $b/decodebench_stream_bench --warps $w >"$out/stream-w$w.txt" 2>&1
      echo "w$w rc=$?"; cat "$out/stream-w$w.txt"; t "w$w"
    done
    ;;
  design2)
    build decodebench_stream_bench
    for w in 8 16; do
      timeout 120 $b/decodebench_stream_bench --warps $w >"$out/stream-w$w.txt" 2>&1
      echo "w$w rc=$?"; cat "$out/stream-w$w.txt"; t "w$w"
    done
    ncu --clock-control none --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
      --section InstructionStats --print-details all -k regex:stream_kernel --launch-count 1 \
      $b/decodebench_stream_bench --layers 4 --warps 8 --only $((4 | 16 | 32)) >"$out/ncu-w8-dot.txt" 2>&1
    echo "ncu rc=$?"; grep -iE "stall|Issued Warp|Eligible|Warp Cycles" "$out/ncu-w8-dot.txt" | head -30
    ;;
  profile)
    build decodebench_stream_bench
    ncu --clock-control none --set full -k regex:stream_kernel --launch-count 1 \
      $b/decodebench_stream_bench --layers 4 --warps 8 --only 4 >"$out/ncu-w8-consumers.txt" 2>&1
    echo "ncu rc=$?"; grep -E "Duration|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|No Eligible|Stall|Pipe" "$out/ncu-w8-consumers.txt" | head -40
    cuobjdump -sass $b/decodebench_stream_bench >"$out/sass-all.txt" 2>&1
    awk '/Function : .*stream_kernelILi8E/{f=1} f&&/Function : / && !/stream_kernelILi8E/{f=0} f' "$out/sass-all.txt" >"$out/sass-w8.txt"
    rm -f "$out/sass-all.txt"
    echo "sass w8: $(grep -c HMMA "$out/sass-w8.txt") HMMA, $(grep -c LOP3 "$out/sass-w8.txt") LOP3, $(grep -c 'LDS' "$out/sass-w8.txt") LDS, $(wc -l <"$out/sass-w8.txt") lines"
    ;;
esac
