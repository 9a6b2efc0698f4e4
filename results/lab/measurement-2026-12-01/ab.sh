#!/usr/bin/env bash
# A/B of two decodebench binaries on one machine: the matrix's 18 auto-kernel runs (1b, 4b,
# 8b x fp16, int8, int4 x graph on/off), interleaved run by run (A then B) so that the
# machine's drift falls on both sides alike; then `compare --threshold 1%` of A against B.
#   ab.sh A_BIN B_BIN OUT_DIR
# Used to check that a restructuring changed no speed: A built from the commit before it, B
# from the tree after (a commit's tree: git archive COMMIT CMakeLists.txt configs include
# kernels src scripts tests | tar -x -C DIR, then cmake in DIR).
set -uo pipefail
a=${1:?usage: ab.sh A_BIN B_BIN OUT_DIR} b=${2:?} out=${3:?}
mkdir -p "$out/a" "$out/b"
for m in 1b 4b 8b; do
  for q in fp16 int8 int4; do
    for g in on off; do
      for side in a b; do
        bin=$a; [ $side = b ] && bin=$b
        "$bin" --model "$m-$q" --graph "$g" --tokens 128 --warmup 16 --repeat 5 \
          -o "$out/$side/$m-$q-graph-$g.json" >/dev/null 2>>"$out/ab.log"
      done
    done
  done
done
"$b" report "$out"/a/*.json --format jsonl -o "$out/a.jsonl"
"$b" report "$out"/b/*.json --format jsonl -o "$out/b.jsonl"
"$b" compare "$out/a.jsonl" "$out/b.jsonl" --threshold 1% >"$out/compare.md" 2>>"$out/ab.log"
echo "compare exit: $?" >>"$out/compare.md"
cat "$out/compare.md"
