#!/usr/bin/env bash
# The wide attention kernel streaming several chunks a block, the fp8 scheme merged, and the
# gpu suite with the energy tests run alone. From the repository root, on the GPU machine:
#   bash results/lab/long-context-2026-12-03/run.sh build    # build-gpu (Ninja, sm_90), every target
#   bash results/lab/long-context-2026-12-03/run.sh gpu      # ctest -L gpu (energy tests RUN_SERIAL)
#   bash results/lab/long-context-2026-12-03/run.sh fp8      # 8b-fp8 against 8b-int8, and --check
#   bash results/lab/long-context-2026-12-03/run.sh context  # 8b-int4 and 8b-int8 at 32768 and 131000
# Outputs go to $OUT, else results/lab/long-context-2026-12-03/run1.
#
# Predictions (written before running):
# - gpu: every test passes, the new AttentionWide.BlocksStreamingSeveralChunks... among them
#   (4 head shapes x 3 contexts against the CPU reference, graph against eager); the energy
#   tests pass now that nothing else runs beside them (ratio within 1% as alone before).
# - fp8: 8b-fp8 within 3% of 8b-int8 at batch 1 graph on (same bytes + 2 per row); the
#   extra multiply per pair may cost up to ~2%. --check passes.
# - context: the KV part (TPOT minus context 0's 1.650 ms) of 8b-int4 at 32768, 1.896 ms
#   (2.26 TB/s, 0.50 of the 4.57 measured) before, falls to ~1.2-1.3 ms (0.75-0.8): TPOT
#   ~2.85-2.95 ms. At 131000, 8.54 ms before: ~6.3-6.8 ms.
# Kill criterion: if 8b-int4 at 32768 stays above 3.0 ms (KV below 0.70 of bandwidth), the
# looped-block design gets one variation at most (the grid's block count), then notes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/long-context-2026-12-03/run1}
mkdir -p "$out"
b=build-gpu
bin=$b/decodebench
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
for stage in "$@"; do
  case $stage in
    build)
      { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
        cmake --build $b -j16; } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
      t built ;;
    gpu)
      (cd $b && timeout 420 ctest -L gpu -j8 --output-on-failure) >"$out/ctest-gpu.txt" 2>&1
      grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$out/ctest-gpu.txt" | head -20; t gpu ;;
    fp8)
      for r in 1 2; do
        for m in 8b-int8 8b-fp8; do
          $bin --model $m --graph on -o "$out/$m-graph-on-$r.json" | grep -E "^TPOT|^bytes" | sed "s/^/$m: /"
        done
      done
      $bin --model 8b-fp8 --graph on --check -o "$out/8b-fp8-check.json" | grep -E "^check|^TPOT"
      $bin compare "$out"/8b-int8-graph-on-[12].json "$out"/8b-fp8-graph-on-[12].json --threshold 3% 2>&1 | tail -4
      t fp8 ;;
    context)
      for ctx in 32768 131000; do
        for m in 8b-int4 8b-int8; do
          [ "$ctx" = 131000 ] && [ "$m" = 8b-int8 ] && continue
          $bin --model $m --graph on --context $ctx --repeat 3 -o "$out/$m-ctx$ctx.json" |
            grep -E "^TPOT|^bytes|^floor|^achieved" | sed "s/^/$m ctx $ctx: /"
        done
      done
      t context ;;
    *) echo "run.sh: unknown stage $stage" >&2; exit 2 ;;
  esac
done
