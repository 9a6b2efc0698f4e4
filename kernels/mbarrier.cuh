// Shared-memory mbarriers for the producer/consumer rings of the Hopper kernels (sm_90): the
// prefill attention's TMA ring (prefill_wgmma.cu) and the lab's benches (the flight, chain,
// stream and wgmma benches). Defined only in the sm_90 device pass, where the kernels that use
// them have bodies, so that the other passes neither see the instructions nor warn about unused
// helpers.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace db::hopper {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Waits for the phase of `parity` to complete. suspend_ns > 0: the thread may sleep until then
// (or that long) instead of polling; the chain bench measured no difference and keeps it.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity, unsigned suspend_ns = 0) {
  if (suspend_ns == 0) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity), "r"(suspend_ns)
        : "memory");
  }
}

// mbar_wait with a bound: after `limit_ns` of failed tries (the global timer, read once every
// 1024 tries) it traps, so that a wrong byte count or a lost arrival ends the kernel with an
// error ("an illegal instruction was encountered") instead of hanging the device. No printf: a
// call inside a wgmma pipeline makes ptxas serialise every wgmma of the kernel (C7510).
__device__ __forceinline__ void mbar_wait_bounded(uint64_t* bar, unsigned parity,
                                                  unsigned long long limit_ns = 2000000000ull) {
  unsigned long long start = 0;
  for (unsigned tries = 0;; ++tries) {
    unsigned done;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (tries % 1024 == 0) {
      unsigned long long now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (tries == 0)
        start = now;
      else if (now - start > limit_ns)
        __trap();
    }
  }
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// One bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
// shared memory, completing on `bar`: the arrival that expects its bytes, then the copy.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// The bulk copy alone, for a producer that announced a stage's bytes in one expect_tx.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

}  // namespace db::hopper
#endif
