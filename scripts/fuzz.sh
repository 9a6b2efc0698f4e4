#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/: the safetensors reader, the config loader with
# "extends" chains and GPTQ/AWQ quantization_config, adapters (the --adapter spec and
# adapter_config.json), the result reader, GPTQ/AWQ int4 checkpoints) with clang, ASan and
# UBSan, CPU-only, in build-fuzz/, and runs each for SECONDS from its committed seed corpus,
# one target after another. Any finding (a crash, a sanitizer report, an exception other than
# db::Error, an input that runs over 10 s, more than 2 GB of memory) fails the script,
# with the input that caused it in build-fuzz/findings/ (rerun it: build-fuzz/fuzz_TARGET FILE).
#   scripts/fuzz.sh [SECONDS] [TARGET...]   default: 60 s each, all five targets
# What a run finds is kept in build-fuzz/corpus/TARGET and used as a start by the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors_header config adapter result int4_checkpoint)
build=${DB_FUZZ_BUILD:-build-fuzz}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found (scripts/install_deps.sh installs clang and libFuzzer)" >&2
  exit 2
fi
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDECODEBENCH_CUDA=OFF \
  -DDECODEBENCH_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_targets

mkdir -p "$build/findings"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  log="$build/fuzz_$t.log"
  echo "fuzz: $t for ${seconds}s (log: $log)"
  # The first directory receives new inputs; the committed seeds are only read.
  if "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | sed "s/^/fuzz: $t: /"
  else
    echo "fuzz: $t: FINDING (the input is in $build/findings/; the end of the log follows)" >&2
    tail -n 60 "$log" >&2
    status=1
  fi
done
exit $status
