#!/usr/bin/env bash
# What the per-group branches that ce7e2d9 removed (int4-kernel §22-§23) did to the int4 rows
# kernel's schedule (int4-kernel §26). Two halves, both run on 2026-12-01:
#   here (no GPU needed, nvcc only):  results/lab/int4-kernel-2026-12-01-2/sass-diff.sh build
#     compiles kernels/gemv.cu of 2147eb9 (both branches) and ce7e2d9 (neither) to cubins in
#     .devrun/sass-<rev>.cubin with the build's flags;
#   there (the device machine, which has cuobjdump):  ... prepared-sass-diff.sh dump
#     disassembles the int4 R8 x K1 kernel of each into $OUT and counts, per version, the
#     instructions between the next group's first weight load and the barrier, and the
#     position of each meta load among the weight loads.
set -euo pipefail
revs="2147eb9 ce7e2d9"
case ${1:-} in
  build)
    for r in $revs; do
      rm -rf .devrun/src-$r && mkdir -p .devrun && git archive --format=tar --prefix=src-$r/ $r | (cd .devrun && tar xf -)
      (cd .devrun/src-$r && nvcc -std=c++17 -O3 -arch=sm_90 -cubin -lineinfo --expt-relaxed-constexpr -DNDEBUG \
         -Iinclude -Ikernels kernels/gemv.cu -o ../sass-$r.cubin)
      rm -rf .devrun/src-$r; echo "built .devrun/sass-$r.cubin"
    done ;;
  dump)
    for r in $revs; do
      K=$(cuobjdump -symbols .devrun/sass-$r.cubin | grep -o '_ZN[^ ]*gemv_rows_kernelILNS_6SchemeE2ELi1ELi8ELb0ELb0EE[^ ]*' | head -1)
      cuobjdump -sass -fun "$K" .devrun/sass-$r.cubin > $OUT/int4_r8k1-$r.sass
      echo "== $r: $(grep -c 'LDG' $OUT/int4_r8k1-$r.sass) LDG, $(grep -c ' BRA ' $OUT/int4_r8k1-$r.sass) BRA,"\
           "$(grep -cE '^\s+/\*[0-9a-f]{4}\*/' $OUT/int4_r8k1-$r.sass) instructions"
      grep -nE 'LDG|BAR\.SYNC| BRA ' $OUT/int4_r8k1-$r.sass | sed -n '1,80p' > $OUT/loads-$r.txt
    done ;;
  *) echo "usage: $0 build|dump" >&2; exit 2 ;;
esac
