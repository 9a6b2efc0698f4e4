// Which kernel the prefill's causal attention runs (prefill_attention() in prefill.cu), decided
// on the host from the shape, the cache scheme, the GPU and the build, so that the CPU tests
// check the choice (tests/test_prefill_attention_plan.cpp).
#pragma once

#include <string_view>

#include "decodebench/config.h"
#include "decodebench/error.h"

namespace db {

enum class PrefillAttentionKernel {
  wgmma,  // Hopper's wgmma fed by TMA (prefill_wgmma.cu): sm_90a code, fp16 cache, head_dim 128
  mma,    // mma.sync m16n8k16 (prefill.cu's flash_prefill_kernel): head sizes 32, 64, 80, 96, 128
  plain,  // a warp per query and head, any head size up to 256 (plain_prefill_attention_kernel)
};

inline const char* to_string(PrefillAttentionKernel k) {
  switch (k) {
    case PrefillAttentionKernel::wgmma:
      return "wgmma";
    case PrefillAttentionKernel::mma:
      return "mma";
    case PrefillAttentionKernel::plain:
      return "plain";
  }
  return "?";
}

// The head sizes the mma.sync kernel takes, on every cache scheme.
inline bool prefill_attention_mma_takes(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128;
}

// The wgmma kernel's shapes: an fp16 cache (TMA copies the cache's bytes into the tiles as they
// are; the 8-bit caches would need dequantizing on the way) and 128-dim heads (its tiles'
// width, Q K^T's k steps and P V's N).
inline bool prefill_attention_wgmma_takes(int head_dim, KvScheme kv) {
  return head_dim == 128 && kv == KvScheme::fp16;
}

// DECODEBENCH_PREFILL_ATTENTION: unset, empty or "auto" lets the plan choose; "mma" keeps the
// wgmma kernel off (today's mma.sync kernel where it takes the shape), to time both kernels in
// one process. Anything else is an error naming the accepted values.
inline bool prefill_attention_force_mma(const char* env) {
  const std::string_view v = env ? env : "";
  if (v.empty() || v == "auto") return false;
  if (v == "mma") return true;
  fail("DECODEBENCH_PREFILL_ATTENTION={}: auto or mma", v);
}

// The kernel for a head size and cache scheme on a GPU of compute capability `cc` (10 major +
// minor) with the wgmma kernel built in or not: wgmma on compute capability 9.0 (sm_90a code
// runs on 9.0 alone) for the shapes it takes unless forced off, else mma for the head sizes it
// takes, else plain.
inline PrefillAttentionKernel choose_prefill_attention(int head_dim, KvScheme kv, int cc, bool wgmma_built,
                                                       bool force_mma) {
  if (wgmma_built && !force_mma && cc == 90 && prefill_attention_wgmma_takes(head_dim, kv))
    return PrefillAttentionKernel::wgmma;
  return prefill_attention_mma_takes(head_dim) ? PrefillAttentionKernel::mma : PrefillAttentionKernel::plain;
}

}  // namespace db
