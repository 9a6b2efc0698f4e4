#!/usr/bin/env bash
# The kernel timeline tool end to end: trace the tiny model's decode under graph and PDL,
# then check the CSV holds every kernel of a step and that scripts/trace_step.py reads it.
# Exit 77 (CTest: skipped) where there is no GPU.
#   scripts/trace_check.sh path/to/decodebench path/to/libdecodebench_kernel_trace.so
set -uo pipefail
bin=$1 lib=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! "$bin" info >/dev/null 2>&1; then echo "SKIPPED: no usable CUDA GPU"; exit 77; fi
[ -f "$lib" ] || { echo "$lib: not built (cmake --build ... --target decodebench_kernel_trace)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
DB_TRACE_OUT="$dir/trace.csv" CUDA_INJECTION64_PATH="$lib" \
  "$bin" --model tiny-int4 --graph on --tokens 8 --warmup 0 --repeat 1 -o "$dir/r.json" >/dev/null ||
  { echo "decodebench failed under the trace"; exit 1; }
head -1 "$dir/trace.csv" | grep -q '^start_ns,end_ns,' || { echo "trace.csv: no header"; exit 1; }
for k in embed_kernel attention_kernel gemv_rows_kernel finish_step_kernel; do
  grep -q "$k" "$dir/trace.csv" || { echo "trace.csv: no $k"; exit 1; }
done
# The prefill is eager and the timed loop replays the graph: one step per token, 8 timed.
steps=$(grep -c finish_step_kernel "$dir/trace.csv")
[ "$steps" -ge 8 ] || { echo "trace.csv: $steps steps, expected at least 8"; exit 1; }
python3 "$here/trace_step.py" "$dir/trace.csv" 0 > "$dir/summary.txt" || { echo "trace_step.py failed"; exit 1; }
grep -q '^step 0: ' "$dir/summary.txt" && grep -q ' attention ' "$dir/summary.txt" && grep -q ' qkv ' "$dir/summary.txt" ||
  { echo "trace_step.py: unexpected summary"; cat "$dir/summary.txt"; exit 1; }
cat "$dir/summary.txt"
echo "kernel trace ok: $(($(wc -l < "$dir/trace.csv") - 1)) kernels, $steps steps"
