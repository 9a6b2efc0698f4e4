#!/usr/bin/env bash
# Prepared at the end of session 12 for session 13's first device run (results/NOTES.md "Next,
# from session 12" (1), item 69's reading): branch wip-s12-floor. DB_EXP_FRAG = none | tall |
# all picks which int4 matrices take the fragment layout (unset: main's >= 2e8 weights);
# DB_EXP_FLOOR_FP16 / _INT8 / _INT4 set the rows kernels' carveout floor by scheme (unset: 14,
# 32 KB). The fragment kernel's x stages make it ask for the 64 KB configuration (25%); the
# question is whether the fragment layout wins in the step once every int4 GEMV asks for 64 KB.
# Before running, locally, on the branch:  git rev-parse --short=12 HEAD > .devrun/commit
# then run(command="bash .devrun/next.sh", carry=[".devrun"]). ~4 minutes.
export DB_GIT_COMMIT=$(cat .devrun/commit)
R=$OUT/r; mkdir -p $R; T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-gpu -j16 --target decodebench > $R/build.log 2>&1; echo "build rc=$?"
t built
cfg() {  # label FRAG FLOOR_INT4 (- for unset)
  local l=$1 f=$2 i4=$3; [ "$f" = - ] && f=""; [ "$i4" = - ] && i4=""
  for m in 8b-int4 1b-int4 8b-int4 70b-int4; do
    DB_EXP_FRAG=$f DB_EXP_FLOOR_INT4=$i4 timeout 90 build-gpu/decodebench --model $m --graph on -o $R/c.json > $R/c.txt 2>&1
    echo "$l $m rc=$?: $(grep -E '^TPOT' $R/c.txt | tr -s ' ' | cut -d' ' -f2-3) $(grep -o '"tokens_hash": *"[^"]*"' $R/c.json)"
  done
}
{ cfg main - -
  cfg nib25 none 25
  cfg tall tall -
  cfg tall25 tall 25
  cfg all25 all 25
  cfg main2 - - ; } | tee $R/step.txt
rm -f $R/c.json; t done; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
