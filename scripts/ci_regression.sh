#!/usr/bin/env bash
# CI regression check: run a sweep, compare it with a baseline, exit with compare's code.
#   scripts/ci_regression.sh BASELINE.json [BUILD_DIR] [sweep options...]
# BUILD_DIR defaults to build. Without sweep options the matrix is
#   --model 8b-int4,8b-int8,8b-fp16 --graph on --tokens 128 --repeat 5 --runs 3
# (three runs of each key in separate processes: a change must stand out from run-to-run
# variation, which one run a side cannot show)
# (any option given replaces the whole default matrix). The new results go to
# $DB_CI_OUT (default: BUILD_DIR/ci_regression/new.json); the comparison table is printed
# on stdout. Exit (decodebench compare --threshold 3%):
#   0  every baseline key measured and tested, none regressed
#   1  a matched run regressed past 3%, significantly
#   2  bad input: no baseline or binary, a sweep that wrote nothing, an unreadable file
#   3  incomplete, the gate fails closed: a baseline key not measured (a failed instance is
#      an error entry), nothing matched, settings that differ besides the code, a change
#      past the threshold with one run a side (unconfirmed), or no pair that could be tested
#      (too few repetitions, unstable runs)
# DB_CI_ALLOW_MISSING=1 passes --allow-missing (baseline keys missing from the new results
# do not fail the gate). DB_CI_NEW=FILE skips the sweep and compares FILE (re-judging
# stored results; with FILE = BASELINE every run is "same" and the exit is 0).
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 BASELINE.json [BUILD_DIR] [sweep options...]" >&2
  exit 2
fi
baseline=$1
build=${2:-build}
shift $(( $# > 2 ? 2 : $# ))
bin="$build/decodebench"
if [ ! -x "$bin" ]; then echo "$0: $bin not found: build first" >&2; exit 2; fi
if [ ! -f "$baseline" ]; then echo "$0: baseline $baseline not found" >&2; exit 2; fi
if [ $# -eq 0 ]; then
  set -- --model 8b-int4,8b-int8,8b-fp16 --graph on --tokens 128 --repeat 5 --runs 3
fi
if [ -n "${DB_CI_NEW:-}" ]; then
  new=$DB_CI_NEW
  if [ ! -f "$new" ]; then echo "$0: DB_CI_NEW $new not found" >&2; exit 2; fi
else
  new=${DB_CI_OUT:-$build/ci_regression/new.json}
  mkdir -p "$(dirname "$new")"
  rm -f "$new"
  echo "== decodebench sweep $* -o $new" >&2
  "$bin" sweep "$@" -o "$new" --format json >/dev/null
  sweep_rc=$?
  if [ ! -s "$new" ]; then
    echo "$0: the sweep wrote no results (exit $sweep_rc)" >&2
    exit 2
  fi
  if [ $sweep_rc -ne 0 ]; then
    echo "$0: warning: some sweep instances failed (exit $sweep_rc): see the error entries in $new" >&2
  fi
fi
extra=()
if [ "${DB_CI_ALLOW_MISSING:-0}" = 1 ]; then extra+=(--allow-missing); fi
echo "== decodebench compare $baseline $new --threshold 3% ${extra[*]}" >&2
"$bin" compare "$baseline" "$new" --threshold 3% "${extra[@]}"
exit $?
