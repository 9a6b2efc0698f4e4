// Decode attention on the tensor cores for long caches: the same work as attention() (the
// query heads' RoPE, the qwen3 q/k norms, the qwen2 biases, the new token's K and V written
// to the cache and attended), with Q K^T and P V on mma.sync, the K and V tiles streamed
// through shared memory several deep, and a KV cache of any scheme (decodebench/kv_quant.h).
// The kernel's header comment (attention_mma.cu) gives the design.
#pragma once

#include <cuda_runtime.h>

#include "attention.cuh"
#include "attention_mma_plan.h"
#include "decodebench/config.h"

namespace db::cuda {

// attention() over `batch` sequences with the cache stored as `kv` says: the same arguments,
// sequence z's at the same strides, except the caches: `a.k_cache` and `a.v_cache` point at
// sequence 0's layer cache in the scheme's layout (kv_quant.h: codes, then scales, for the
// 8-bit schemes), sequence z's at z * kvq::sequence_bytes(kv, rope_positions, kv_heads,
// head_dim) bytes from it. Uses part_o, part_ml and the counters as attention() does, for up
// to max_splits blocks a kv head. `a.early_launch` is not read: the kernel lets the next
// one launch once its blocks have streamed their positions. Takes the shapes
// attention_mma_takes() accepts and fails with the reason on any other. `splits` > 0 sets
// the grid's blocks a kv head (the lab bench; at most max_splits and
// kAttentionMmaMaxSplits); 0 takes attention_mma_splits(). `warps` 4 or 12 sets the warps a
// block (the lab tools and the tests; fails where such a block does not fit on this GPU); 0
// takes attention_mma_warps().
void attention_mma(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv, int splits = 0,
                   int warps = 0);

// The grid's blocks a kv head that attention_mma() launches by default for `a`, `batch` and
// `warps` (0: this GPU's choice): attention_mma_grid_splits() for this device's SMs and the
// kernel's blocks an SM.
int attention_mma_splits(const AttentionArgs& a, int batch, KvScheme kv, int warps = 0);

// The warps a block that attention_mma() launches by default for `a`'s head size and `kv`:
// attention_mma_choose_warps() for this GPU, 12 where a 12-warp block's shared memory fits
// (the H200), else 4. Fails where neither fits, or on a shape the kernel does not take.
int attention_mma_warps(const AttentionArgs& a, KvScheme kv);

}  // namespace db::cuda
