// Decode attention (see attention.cuh): the public entry points. The kernels and their launchers
// are in attention_kernels.cuh, instantiated one KV cache scheme and batch-1-or-more a file
// (attention_fp16.cu, attention_fp16_batch.cu, and so on).
#include "attention_kernels.cuh"

namespace db::cuda {

int attention_splits(int64_t positions) {
  return static_cast<int>((positions + kAttentionChunk - 1) / kAttentionChunk);
}

bool attention_fast_path(int head_dim, int heads, int kv_heads) {
  const bool hd = head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128;
  return hd && heads % kv_heads == 0 && heads / kv_heads <= kMaxGroup;
}

void attention(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv) {
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    fail("attention: {} query heads are not a multiple of {} kv heads", a.heads, a.kv_heads);
  if (batch < 1 || batch > 65535) fail("attention: a batch of {} sequences (1 to 65535)", batch);
  switch (kv) {
    case KvScheme::fp16:
      return batch == 1 ? attention_launch_fp16(a, s) : attention_launch_fp16_batch(a, s, batch);
    case KvScheme::fp8:
      return batch == 1 ? attention_launch_fp8(a, s) : attention_launch_fp8_batch(a, s, batch);
    case KvScheme::int8:
      return batch == 1 ? attention_launch_int8(a, s) : attention_launch_int8_batch(a, s, batch);
  }
  fail("attention: an unknown KV cache scheme");
}

}  // namespace db::cuda
