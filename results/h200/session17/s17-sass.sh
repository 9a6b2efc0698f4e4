#!/usr/bin/env bash
# Session 17 run 6: the SASS of the int4 R8 x K1 and int8 R4 x K2 rows kernels (ce7e2d9). This
# machine has nvcc but no cuobjdump: the cubin is compiled here with the build's flags for
# kernels/gemv.cu and carried in .devrun; the device machine only disassembles it.
#   here:   nvcc -std=c++17 -O3 -arch=sm_90 -cubin -lineinfo --expt-relaxed-constexpr -DNDEBUG \
#             -Iinclude -Ikernels kernels/gemv.cu -o .devrun/gemv.cubin
#   device: (this script)
for k in 'SchemeE2ELi1ELi8ELb0ELb0EE:int4_r8k1' 'SchemeE1ELi2ELi4ELb0ELb0EE:int8_r4k2'; do
  K=$(cuobjdump -symbols .devrun/gemv.cubin | grep -o "_ZN[^ ]*gemv_rows_kernelILNS_6${k%%:*}[^ ]*" | head -1)
  cuobjdump -sass -fun "$K" .devrun/gemv.cubin > $OUT/${k##*:}.sass
done
