#!/usr/bin/env bash
# Energy per token on the H200: everything issue 46's "done means" asks of the GPU, in one
# script. From the repository root, on the GPU machine:
#   bash results/lab/energy-2026-12-03/run.sh all       # build, then every stage below (~4-5 min + the build)
#   bash results/lab/energy-2026-12-03/run.sh build     # build-gpu (Ninja, sm_90): decodebench, decodebench_gpu_tests
#   bash results/lab/energy-2026-12-03/run.sh measure   # every stage, on the build there
#   bash results/lab/energy-2026-12-03/run.sh STAGE     # one of: counter gpu ab aa matrix batch aligned
# Outputs go to $OUT, else results/lab/energy-2026-12-03/run1: summary.txt (every figure the
# stages print), energy.png (plot.py energy of the matrix and the batch sweep) and
# outputs-STAGE.tar.gz (the result files, tables, logs and test output of each invocation).
# Two device calls fit the budget: `run.sh build && run.sh gpu && run.sh ab && run.sh aa`, then
# at once (the build kept warm) `run.sh matrix && run.sh batch`.
#
# The stages, each with what it answers and its prediction (written before running):
# 1. counter: `decodebench info`: the energy counter's update interval and increment at idle,
#    the figure that sizes every run below (a repetition of 25 updates: a resolution of 4%,
#    under the 5% energy is reported at). Prediction: it changes every ~10-25 ms (other
#    cards' NVML counters do: pynvml #18 saw ~10 ms), by ~1-2 J at ~80-120 W idle.
# 2. gpu: the gpu tests of energy (tests/gpu_test_energy.cu): the counter only rises and
#    updates at idle and under load (its interval under load printed); a 1b-fp16 run's energy
#    is positive and its average power between idle and the power limit; the counter agrees
#    with nvmlDeviceGetPowerUsage integrated over 3 s idle + 4 s streaming reads + 3 s idle.
#    Prediction: 3/3 pass; the counter and power x time within 1% (one sensor behind both).
# 3. ab: TPOT with the energy reads and the sampler (the default) against --energy off, 2 runs
#    a side in separate processes, compare --metric tpot: 8b-int4 graph on, and 1b-int4
#    graph off (host-bound: where a polling thread would show first). Prediction: `same`
#    both, |delta| < 0.5%: the reads fall outside the event marks and the sampler thread
#    sleeps 2 ms between polls on a 16-core host.
# 4. aa: A/A of energy in separate processes: 13 runs of 8b-int4 graph on (each its own
#    process), 10 pairs of 2 runs against 2 (pair k: runs k, k+1 against k+2, k+3),
#    compare --metric energy at the default 3%, and the run-to-run spread of J/token.
#    Prediction: 10 of 10 pairs `same` (or `unstable` where the power cap moved a side's
#    clock), 0 regressed, 0 improved; J/token's spread across runs < 1% (8b runs end at the
#    power cap, which holds the power, so energy follows TPOT's 0.1-0.2%).
# 5. matrix: J/token of the matrix keys: 1b, 4b, 8b x fp16, int8, int4 x graph on, off (a
#    sweep a model, --repeat 2). Prediction: J/token follows bytes per token less than TPOT
#    does, since power rises with the bandwidth a run reaches: 8b-int4 ~0.6-0.8 J/token,
#    8b-fp16 ~1.5-2 J/token (reads 3.2x the bytes at 2.2x the time and a higher power);
#    graph off costs more energy per token than on by about its extra time at idle-ish power.
# 6. batch: J/token at --batch 1-256 (x2) for 8b-fp16 and 8b-int4 (three sweeps, the
#    repetitions sized per group of batches). Prediction: J/token falls with the batch (a
#    step's energy grows far slower than B while the weights dominate): 8b-int4 and
#    8b-fp16 at B = 256 below 1/50 of their batch-1 J/token, while TPOT rises 2.6x (fp16)
#    and 11.7x (int4) (the committed batch sweep).
# 7. aligned: the energy windows aligned on the counter's updates (docs/method.md "Energy"),
#    in one device call after the build, ~2.5 min: `run.sh build && run.sh aligned`. It runs
#    `info`; the gpu tests of energy (now 4, with EnergyRun.DefaultRepetitionsAreAligned...);
#    13 runs of the default `decodebench --model 8b-int4 --graph on` (128 tokens x 5), each a
#    process of its own, the first of which answers whether the default run reports energy
#    now; compare --metric energy on 10 pairs of 2 runs against 2 (pair k: runs k, k+1 against
#    k+2, k+3) at the default 3%, counting the pairs tested (same, noise, regressed, improved,
#    unconfirmed) and the false alarms (regressed, improved, unconfirmed); the tails' check
#    (below); and an A/B of TPOT: 2 runs with --energy off against the last 2 A/A runs
#    (energy on, the same command otherwise, run just before).
#    Predictions (written before running):
#    - info: as in run1, every ~100 ms by ~12.4 J at ~124 W idle; the idle window now spans 21
#      updates (~2.1 s).
#    - gpu: 4 of 4 pass. The new test's 1b-fp16 default run (~0.1 s a repetition) is aligned
#      and reported: detection (energy.detect_ms) 0.6-1.5 ms (the 0.5 ms poll, its sleep's
#      overshoot and one NVML read), tails spread over 0-100 ms, resolution <= 2%.
#    - default run: `energy` now reports a figure (window aligned): 8b-int4 at 656 W x 1.661 ms
#      = 1.09 J/token, predicted 1.05-1.15 J/token, resolution <= 0.6%, detect <= 1.5 ms.
#    - A/A: 13 of 13 runs report energy; a run's J/step spread over its 5 repetitions <= 0.5%
#      (unaligned, at 2.3 s a repetition: 1.2-3.3%); across runs J/token spread <= 1%
#      (unaligned: 0.80%); 10 of 10 pairs tested (`same`), 0 false alarms.
#    - tails' check: the correction assumes the idle tail draws the idle power measured before
#      the run and that the counter's value at an update holds the energy up to it. Across the
#      65 repetitions, each run's counter difference (repetition_j + repetition_idle_j)
#      against its tail has the tail's actual power as its slope: predicted within 10% of
#      idle_power_w (the corrected J's slope against the tail within +-12 W), and the
#      repetitions with tails under 10 ms no lower than the rest (a counter lagging its update
#      would cut their last steps). Risk: after 0.2 s at ~650 W the board may draw well above
#      its cold idle for tens of ms; the slope then says by how much, and the spread grows by
#      about (P_tail - P_idle) x 29 ms (the tail's stdev) over ~141 J.
#    - A/B: TPOT `same`, |delta| < 0.5%: the waits (up to two updates a repetition) fall
#      outside the event marks; the one risk is the 0-200 ms of idle before each repetition's
#      first step lowering the clocks for its first steps, which the median would not see.
#    Kill criterion: a run's J/step spread over its repetitions > 1%, or the tail's power more
#    than 10% off idle_power_w: the correction then subtracts the wrong power, and the next
#    step is to measure the tail's own (the counter over the update after the closing one).
# Runs: run1 = `run.sh build && run.sh gpu && run.sh ab && run.sh aa` (the interval parsed from
# the wrong word of info's line: ab and aa ran nothing; fixed below), then the main job;
# run2 = `run.sh matrix; run.sh batch; run.sh aa` (aa at --repeat 2, the update cap at 100 ms).
# Kill criterion: none; a measurement. A stage whose figures come out null says why in its
# results (energy.reason), and the summary shows it.
# The device machine has no libre2-dev: `apt-get download libre2-dev libre2-9` into .debs/ here
# (git-ignored through .git/info/exclude) and carry it; this script unpacks it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/energy-2026-12-03/run1}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b=build-gpu
bin=$b/decodebench
sum="$out/summary.txt"
say() { echo "$*" | tee -a "$sum"; }

build() {
  { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_gpu_energy_tests; } >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log"; pack; exit 1; }
  say "build: ok ($(git rev-parse --short HEAD))"
}

# The counter's update interval in ms, from `info` (stage counter); 20 where it cannot say.
update_ms() {
  local u
  u=$(grep -oE 'changes every [0-9.e+]+ ms' "$work/info.txt" 2>/dev/null | grep -oE '[0-9][0-9.e+]*' | head -1)
  python3 -c 'import sys; u = float(sys.argv[1]) if sys.argv[1] else 20.0; print(min(max(u, 1.0), 100.0))' "${u:-}"
}
# The tokens that make a repetition of the fastest key at `ms` a step span 21 counter updates
# (a resolution of 4.8%, under the 5% energy is reported at; at least `least` tokens); the
# update is capped at 25 ms so that a slow counter cannot make the stages outrun the device
# budget (its runs then say the resolution they miss, and the --tokens it needs).
tokens_for() {  # ms_per_step [least]
  python3 -c 'import math, sys; print(max(int(sys.argv[3]), math.ceil(21 * float(sys.argv[1]) / float(sys.argv[2]))))' \
    "$(update_ms)" "$1" "${2:-128}"
}

counter() {
  $bin info >"$work/info.txt" 2>&1
  say "counter: $(grep -E '^(device|clocks|energy) ' "$work/info.txt" | tr -s ' ' | paste -sd '|')"
  say "counter: update interval used to size the runs: $(update_ms) ms"
}

gpu() {
  timeout 300 $b/decodebench_gpu_energy_tests >"$work/gtest-energy.txt" 2>&1
  say "gpu: $(grep -E '^\[  (PASSED|FAILED) ' "$work/gtest-energy.txt" | paste -sd ' ')"
  grep -E '^(idle|load|aligned): |^counter .* ratio |^energy ' "$work/gtest-energy.txt" | sed 's/^/gpu: /' | tee -a "$sum"
  grep -E 'Failure' -A4 "$work/gtest-energy.txt" | head -20 | tee -a "$sum"
}

runs() {  # name, count, options...: `count` runs, each a process of its own, into $work/name.jsonl
  local name=$1 n=$2
  shift 2
  $bin "$@" --runs "$n" -o "$work/$name.jsonl" >"$work/$name.md" 2>"$work/$name.log" ||
    { say "$name: failed: $(tail -1 "$work/$name.log")"; return 1; }
  say "$name: $(grep ' runs in separate processes: ' "$work/$name.md")"
}

ab() {
  local t8 t1
  t8=$(tokens_for 1.65)
  t1=$(tokens_for 0.55)
  runs ab-8b-on 2 --model 8b-int4 --graph on --tokens "$t8" --repeat 5
  runs ab-8b-off 2 --model 8b-int4 --graph on --tokens "$t8" --repeat 5 --energy off
  runs ab-1b-on 2 --model 1b-int4 --graph off --tokens "$t1" --repeat 5
  runs ab-1b-off 2 --model 1b-int4 --graph off --tokens "$t1" --repeat 5 --energy off
  for m in 8b 1b; do
    $bin compare "$work/ab-$m-off.jsonl" "$work/ab-$m-on.jsonl" >"$work/ab-$m.md" 2>>"$work/ab.log"
    say "ab $m (BASE --energy off, NEW on): exit $?: $(grep -E '^\| ' "$work/ab-$m.md" | tail -1)"
  done
}

aa() {
  local t8 i
  t8=$(tokens_for 1.65)
  : >"$work/aa-runs.jsonl"
  for i in $(seq 0 12); do
    $bin --model 8b-int4 --graph on --tokens "$t8" --repeat 2 -o "$work/aa-$i.json" >/dev/null 2>>"$work/aa.log" ||
      say "aa: run $i failed: $(tail -1 "$work/aa.log")"
    $bin report "$work/aa-$i.json" --format jsonl >>"$work/aa-runs.jsonl" 2>>"$work/aa.log"
  done
  $bin report "$work/aa-runs.jsonl" >"$work/aa-runs.md" 2>>"$work/aa.log"
  python3 - "$work/aa-runs.jsonl" <<'EOF' | tee -a "$sum"
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
j = [r["energy"]["j_per_token"]["median"] for r in rs if r["energy"]["reason"] == ""]
t = [r["timing"]["tpot_ms"]["median"] for r in rs]
def spread(v):
    return statistics.stdev(v) / statistics.mean(v) if len(v) > 1 else float("nan")
print(f"aa: {len(rs)} runs, {len(j)} with energy; J/token median {statistics.median(j) if j else float('nan'):.4g}, "
      f"spread across runs {100 * spread(j):.2f}%; TPOT {statistics.median(t):.3f} ms, spread {100 * spread(t):.2f}%")
for reason in sorted({r["energy"]["reason"] for r in rs if r["energy"]["reason"]}):
    print(f"aa: no energy in {sum(r['energy']['reason'] == reason for r in rs)} runs: {reason}")
print(f"aa: power {statistics.median(r['energy']['power_w']['median'] or 0 for r in rs):.1f} W median of the "
      f"{rs[0]['device']['power_limit_w']:.0f} W limit; end throttle {sorted({t for r in rs for t in (r['device']['end'] or {}).get('throttle', [])})}")
EOF
  local false_alarms=0 tested=0 k
  for k in $(seq 0 9); do
    sed -n "$((k + 1))p;$((k + 2))p" "$work/aa-runs.jsonl" >"$work/aa-$k-base.jsonl"
    sed -n "$((k + 3))p;$((k + 4))p" "$work/aa-runs.jsonl" >"$work/aa-$k-new.jsonl"
    $bin compare "$work/aa-$k-base.jsonl" "$work/aa-$k-new.jsonl" --metric energy >"$work/aa-$k.md" 2>>"$work/aa.log"
    local rc=$?
    grep -qE '\| (regressed|improved) \|' "$work/aa-$k.md" && false_alarms=$((false_alarms + 1))
    grep -qE '\| (same|noise|regressed|improved) \|' "$work/aa-$k.md" && tested=$((tested + 1))
    say "aa pair $k (runs $k,$((k + 1)) vs $((k + 2)),$((k + 3))): exit $rc: $(grep -m1 ' matched: ' "$work/aa-$k.md")"
  done
  say "aa: 10 A/A pairs of energy at 3%: $tested tested (same, noise, regressed or improved), $false_alarms false alarms (regressed or improved)"
}

aligned() {
  local i k rc false_alarms=0 tested=0
  : >"$work/al-runs.jsonl"
  for i in $(seq 0 12); do  # the default run, each a process of its own
    $bin --model 8b-int4 --graph on -o "$work/al-$i.json" >"$work/al-$i.txt" 2>>"$work/al.log" ||
      say "aligned: run $i failed: $(tail -1 "$work/al.log")"
    $bin report "$work/al-$i.json" --format jsonl >>"$work/al-runs.jsonl" 2>>"$work/al.log"
  done
  say "aligned: default run: $(grep -E '^(TPOT|energy) ' "$work/al-0.txt" | tr -s ' ' | paste -sd '|')"
  $bin report "$work/al-runs.jsonl" >"$work/al-runs.md" 2>>"$work/al.log"
  python3 - "$work/al-runs.jsonl" <<'EOF' | tee -a "$sum"
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
es = [r["energy"] for r in rs]
ok = [e for e in es if e["reason"] == ""]
def spread(v):
    return statistics.stdev(v) / statistics.mean(v) if len(v) > 1 else float("nan")
print(f"aligned: {len(rs)} runs, {len(ok)} with energy, windows {sorted({e['window'] for e in es})}")
for reason in sorted({e["reason"] for e in es if e["reason"]}):
    print(f"aligned: no energy in {sum(e['reason'] == reason for e in es)} runs: {reason}")
for why in sorted({e["window_reason"] for e in es if e["window_reason"]}):
    print(f"aligned: unaligned windows in {sum(e['window_reason'] == why for e in es)} runs: {why}")
if ok:
    j = [e["j_per_token"]["median"] for e in ok]
    t = [r["timing"]["tpot_ms"]["median"] for r in rs]
    within = [e["j_per_step"]["spread"] for e in ok]
    tails = [x for e in ok for x in e["repetition_tail_s"]]
    print(f"aligned: J/token median {statistics.median(j):.4g}, spread across runs {100 * spread(j):.2f}%; "
          f"TPOT {statistics.median(t):.3f} ms, spread {100 * spread(t):.2f}%")
    print(f"aligned: J/step spread within a run: median {100 * statistics.median(within):.2f}%, "
          f"largest {100 * max(within):.2f}%; resolution largest {100 * max(e['resolution'] for e in ok):.2f}%; "
          f"detect largest {max(e['detect_ms'] or 0 for e in ok):.3f} ms; "
          f"tails {1e3 * min(tails):.1f}-{1e3 * max(tails):.1f} ms; "
          f"idle {min(e['idle_power_w'] for e in ok):.1f}-{max(e['idle_power_w'] for e in ok):.1f} W; "
          f"power {statistics.median(e['power_w']['median'] for e in ok):.1f} W")
    # The tails' check, within each run: the counter's difference against the tail (its slope
    # is the tail's power) and the corrected J against it (the tail's power less the idle's).
    sxx = sxy = sxz = 0.0
    resid = []
    for e in ok:
        x = e["repetition_tail_s"]
        y = [a + b for a, b in zip(e["repetition_j"], e["repetition_idle_j"])]
        z = e["repetition_j"]
        mx, my, mz = statistics.mean(x), statistics.mean(y), statistics.mean(z)
        sxx += sum((a - mx) ** 2 for a in x)
        sxy += sum((a - mx) * (b - my) for a, b in zip(x, y))
        sxz += sum((a - mx) * (c - mz) for a, c in zip(x, z))
        resid += [(a, (c - mz) / mz) for a, c in zip(x, z)]
    if sxx > 0:
        idle = statistics.median(e["idle_power_w"] for e in ok)
        print(f"aligned: tails' check: the tail draws {sxy / sxx:.1f} W (idle measured {idle:.1f} W); "
              f"the corrected J's slope against the tail {sxz / sxx:+.1f} W over {len(resid)} repetitions")
        short = [r for a, r in resid if a < 0.010]
        rest = [r for a, r in resid if a >= 0.010]
        if short and rest:
            print(f"aligned: tails under 10 ms ({len(short)}): corrected J {100 * statistics.mean(short):+.2f}% "
                  f"against their run's mean; the rest ({len(rest)}): {100 * statistics.mean(rest):+.2f}%")
EOF
  for k in $(seq 0 9); do
    sed -n "$((k + 1))p;$((k + 2))p" "$work/al-runs.jsonl" >"$work/al-$k-base.jsonl"
    sed -n "$((k + 3))p;$((k + 4))p" "$work/al-runs.jsonl" >"$work/al-$k-new.jsonl"
    $bin compare "$work/al-$k-base.jsonl" "$work/al-$k-new.jsonl" --metric energy >"$work/al-pair-$k.md" \
      2>>"$work/al.log"
    rc=$?
    grep -qE '\| (regressed|improved|unconfirmed) \|' "$work/al-pair-$k.md" && false_alarms=$((false_alarms + 1))
    grep -qE '\| (same|noise|regressed|improved|unconfirmed) \|' "$work/al-pair-$k.md" && tested=$((tested + 1))
    say "aligned pair $k (runs $k,$((k + 1)) vs $((k + 2)),$((k + 3))): exit $rc: $(grep -m1 ' matched: ' "$work/al-pair-$k.md")"
  done
  say "aligned: 10 A/A pairs of energy at 3%: $tested tested, $false_alarms false alarms (regressed, improved or unconfirmed)"
  # TPOT with the windows (the last two A/A runs) against without them (--energy off), just after.
  $bin --model 8b-int4 --graph on --energy off --runs 2 -o "$work/al-ab-off.jsonl" >"$work/al-ab-off.md" \
    2>>"$work/al.log" || say "aligned ab: failed: $(tail -1 "$work/al.log")"
  sed -n '12p;13p' "$work/al-runs.jsonl" >"$work/al-ab-on.jsonl"
  $bin compare "$work/al-ab-off.jsonl" "$work/al-ab-on.jsonl" >"$work/al-ab.md" 2>>"$work/al.log"
  say "aligned ab (BASE --energy off, NEW on; TPOT): exit $?: $(grep -E '^\| ' "$work/al-ab.md" | tail -1)"
}

matrix() {
  local m ms
  : >"$work/matrix.jsonl"
  for m in 1b:0.46 4b:1.34 8b:1.65; do  # the fastest key of the model, ms a step (results/h200)
    ms=${m#*:}
    m=${m%:*}
    $bin sweep --model "$m-fp16,$m-int8,$m-int4" --graph on,off --tokens "$(tokens_for "$ms")" --repeat 2 \
      -o "$work/matrix.jsonl" >/dev/null 2>>"$work/matrix.log" || say "matrix $m: $(tail -1 "$work/matrix.log")"
  done
  $bin report "$work/matrix.jsonl" >"$work/matrix.md" 2>>"$work/matrix.log"
  say "matrix:"
  tee -a "$sum" <"$work/matrix.md"
  python3 - "$work/matrix.jsonl" <<'EOF' | tee -a "$sum"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    e = r["energy"]
    if e["reason"]:
        print(f"matrix: {r['config']['model']} graph {'on' if r['config']['graph'] else 'off'}: no energy: {e['reason']}")
    else:
        print(f"matrix: {r['config']['model']} graph {'on' if r['config']['graph'] else 'off'}: "
              f"{e['j_per_token']['median']:.4g} J/token ± {100 * e['j_per_step']['spread']:.2f}%, "
              f"{e['power_w']['median']:.1f} W, counter update {e['counter_update_ms']:.1f} ms, "
              f"resolution {100 * e['resolution']:.1f}%, idle {e['idle_power_w'] or float('nan'):.1f} W, "
              f"SM {e['sm_clock_mhz']['median']:.0f} MHz")
EOF
}

batch() {
  local g
  : >"$work/batch.jsonl"
  for g in 1,2,4:1.656 8,16,32:2.735 64,128,256:5.385; do  # the fastest of the group, ms a step (results/h200/batch)
    $bin sweep --model 8b-fp16,8b-int4 --graph on --batch "${g%:*}" --tokens "$(tokens_for "${g#*:}" 32)" \
      --repeat 2 -o "$work/batch.jsonl" >/dev/null 2>>"$work/batch.log" || say "batch ${g%:*}: $(tail -1 "$work/batch.log")"
  done
  $bin report "$work/batch.jsonl" >"$work/batch.md" 2>>"$work/batch.log"
  say "batch:"
  tee -a "$sum" <"$work/batch.md"
}

plots() {
  local files=()
  for f in "$work/matrix.jsonl" "$work/batch.jsonl"; do [ -s "$f" ] && files+=("$f"); done
  [ ${#files[@]} -gt 0 ] || return 0
  python3 scripts/plot.py energy "$out/energy.png" "${files[@]}" 2>>"$work/plot.log" | sed 's/^/plot: /' | tee -a "$sum"
}

pack() {  # a tarball a stage, so that one call may run several stages
  tar -C "$work" -czf "$out/outputs-$stage.tar.gz" .
}

stage=${1:?usage: run.sh all|build|measure|counter|gpu|ab|aa|matrix|batch|aligned}
say "== run.sh $stage, $(date -u +%FT%TZ)"
case "$stage" in
  all) build && { counter; gpu; ab; aa; matrix; batch; plots; } ;;
  build) build ;;
  measure) counter; gpu; ab; aa; matrix; batch; plots ;;
  counter) counter ;;
  gpu) counter; gpu ;;
  ab | aa) counter; "$stage" ;;
  matrix | batch) counter; "$stage"; plots ;;
  aligned) counter; gpu; aligned ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
pack
