// Which decode attention the engine runs, and how the tensor-core kernel (attention_mma.cu)
// divides a kv head's positions among its blocks. Arithmetic only, on the host and the
// device, kept apart from the kernel so that the CPU tests check it.
//
// The tensor-core kernel launches one grid for the run's last position (a CUDA graph
// replays it at every position): `grid_splits` blocks a kv head and sequence, about as many
// as the GPU holds at once, so that the whole cache streams in one wave. A block has 12
// warps where the GPU lets it have their shared memory, else 4 (attention_mma_choose_warps).
// At run time the `keys` = pos + 1 positions are divided into `active` contiguous ranges, one
// a block, of equal length to within one key and at least attention_mma_min_keys(warps) each
// (one 16-key tile for each of the block's warps); the blocks past them return at once.
#pragma once

#include <algorithm>
#include <cstdint>

#include "decodebench/host_device.h"

namespace db {

// The engine runs the tensor-core kernel for a cache of at least this many positions and
// the one-block-a-chunk kernels (attention.cu) below it; the attention bench
// (tests/bench/attention_bench.cu) times both from 1024 to 131000 positions. On the H200, 8b's
// layer at 8192 positions, launched back to back over four layers' caches: 19.6 us against
// 21.4 (fp16 cache), 17.2 against 18.2 (fp8), 16.9 against 18.1 (int8)
// (results/lab/kv-stream-2026-12-04/next/attention_bench.jsonl).
constexpr int64_t kAttentionMmaMinPositions = 8192;
constexpr int kAttentionMmaMaxGroup = 16;    // query heads per kv head: mma.m16n8k16's 16 rows
constexpr int kAttentionMmaTile = 16;        // positions a warp takes at a time: one k-step of P V
constexpr int kAttentionMmaMaxSplits = 512;  // blocks a kv head at most: the partials one block merges

// The shapes the kernel takes: head sizes a multiple of 32 up to 128 (a lane holds whole
// elements of a head, RoPE's partner in lane l ^ 16, as in attention.cu; past 128 the output
// accumulators and the query fragments outgrow the registers two blocks an SM leave) and up
// to 16 query heads per kv head.
inline bool attention_mma_takes(int head_dim, int heads, int kv_heads) {
  const bool hd = head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128;
  return hd && kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= kAttentionMmaMaxGroup;
}

// Whether an engine whose cache holds `positions` positions runs the tensor-core kernel.
inline bool attention_mma_chosen(int64_t positions, int head_dim, int heads, int kv_heads) {
  return positions >= kAttentionMmaMinPositions && attention_mma_takes(head_dim, heads, kv_heads);
}

// The grid's blocks a kv head: a wave of `resident` blocks an SM over `sms` SMs, shared by
// the kv heads of `batch` sequences; at least 1, at most the partials' room (`max_splits`,
// attention_splits of the cache) and kAttentionMmaMaxSplits.
inline int attention_mma_grid_splits(int resident, int sms, int kv_heads, int batch, int max_splits) {
  const int64_t wave = int64_t{std::max(resident, 1)} * std::max(sms, 1);
  const int64_t per = wave / (int64_t{std::max(kv_heads, 1)} * std::max(batch, 1));
  const int64_t cap = std::min<int64_t>(std::max(max_splits, 1), kAttentionMmaMaxSplits);
  return static_cast<int>(std::clamp<int64_t>(per, 1, cap));
}

// The warps a block the kernel launches with on a GPU whose blocks may have `optin_bytes` of
// shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin): 12 where a 12-warp block's
// `bytes12` fit and an SM holds one (`resident12`, the occupancy query; 0 where it was not
// made), else 4 where a 4-warp block's `bytes4` fit, else 0 (the kernel does not run). A block
// of 12 is one an SM on the H200: a third as many partials for the last block to merge.
inline int attention_mma_choose_warps(int64_t optin_bytes, int64_t bytes4, int64_t bytes12, int resident12) {
  if (bytes12 <= optin_bytes && resident12 >= 1) return 12;
  return bytes4 <= optin_bytes ? 4 : 0;
}

// The positions a block of `warps` warps takes at least: one tile a warp.
DB_HOST_DEVICE int attention_mma_min_keys(int warps) {
  return kAttentionMmaTile * warps;
}

// The blocks a kv head that hold positions when `keys` positions are attended by blocks of
// `warps` warps (the launched kernel's).
DB_HOST_DEVICE int attention_mma_active_splits(int64_t keys, int grid_splits, int warps) {
  const int64_t by_keys = keys / attention_mma_min_keys(warps);
  const int64_t n = by_keys < grid_splits ? by_keys : grid_splits;
  return n < 1 ? 1 : static_cast<int>(n);
}

// The first position of block `split` of `active` (split == active: one past the last).
DB_HOST_DEVICE int64_t attention_mma_split_start(int64_t keys, int active, int split) {
  return int64_t{split} * keys / active;
}

}  // namespace db
